//! "Stop once every task runs" (`Then::StopWhenRunning`), in one place for
//! the engine in the harness's process and in a `taskgate agent` process:
//! which tasks the stop waits for, and what tells that one has settled
//! (started, or will not start). In process the harness reads that from
//! the fault points each task runner passes; in an agent, from the task
//! events the agent follows, since a restored task runner reattaches
//! without passing its start.

use std::collections::BTreeSet;
use taskgate_engine::jobspec::Task;
use taskgate_engine::task_state::EventKind;
use taskgate_faults::{points, Await};

/// The tasks a stop still waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UntilRunning {
    /// In the job's order.
    waiting: Vec<String>,
}

impl UntilRunning {
    /// Waits for every task that can start: not a poststop task (those
    /// start after the stop), and not one dead already (it reports
    /// nothing more).
    pub fn new<'t>(tasks: impl IntoIterator<Item = &'t Task>, dead: &BTreeSet<String>) -> Self {
        UntilRunning {
            waiting: tasks
                .into_iter()
                .filter(|t| !t.is_poststop() && !dead.contains(&t.name))
                .map(|t| t.name.clone())
                .collect(),
        }
    }

    /// Whether every task it waited for has settled: time for the stop.
    pub fn all_running(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Takes in a task event an agent followed.
    pub fn saw(&mut self, task: &str, kind: EventKind) {
        if settles(kind) {
            self.waiting.retain(|t| t != task);
        }
    }

    /// For the engine in this process: per task waited for, the fault
    /// points any of which tells it settled.
    pub fn awaits(&self) -> Vec<Vec<Await>> {
        self.waiting.iter().map(|t| settled(t)).collect()
    }
}

/// The task events that say a task has settled.
fn settles(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::Started | EventKind::Restored | EventKind::NotStarted | EventKind::NotRestarting
    )
}

/// The fault points any of which, once passed, says `task`'s runner
/// settled: past its driver start, or its main loop over.
pub fn settled(task: &str) -> Vec<Await> {
    let passed = |point: &str| Await::Passed(taskgate_faults::scoped(Some(task), point));
    vec![
        passed(points::TR_AFTER_DRIVER_START),
        passed(points::TR_MAIN_EXITED),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::{job, leader, lifecycle, service};
    use taskgate_engine::jobspec::LifecycleHook;

    #[test]
    fn waits_for_every_task_but_poststop_and_dead_ones() {
        let j = job(
            "j",
            vec![
                lifecycle(service("init"), LifecycleHook::Prestart, false),
                leader(service("web")),
                service("proxy"),
                lifecycle(service("cleanup"), LifecycleHook::Poststop, false),
            ],
        );
        let dead = BTreeSet::from(["init".to_string()]);
        let mut until = UntilRunning::new(&j.groups[0].tasks, &dead);
        assert_eq!(until.awaits().len(), 2, "web and proxy: {until:?}");
        until.saw("web", EventKind::Started);
        until.saw("proxy", EventKind::TaskSetup);
        assert!(!until.all_running(), "proxy is only being set up");
        until.saw("proxy", EventKind::NotRestarting);
        assert!(until.all_running());
    }
}
