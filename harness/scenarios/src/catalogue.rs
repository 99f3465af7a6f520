//! The scenarios the explorer and the gate run.

use crate::jobs::{job, leader, lifecycle, oneshot, report_alloc, service};
use taskgate_engine::jobspec::{Job, LifecycleHook, Task};
use taskgate_faults::points::{
    self, hook_point, Edge, EXECUTOR_BOUNDARIES, TASK_RUNNER_BOUNDARIES, UPDATE_BOUNDARIES,
};
use taskgate_faults::Action;

/// What kind of run a scenario is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A stop update raced against one task runner, driven by a schedule.
    StopRace { controlled: &'static str },
    /// One fault per run, in process: each listed (point, action) alone.
    Faults {
        faults: Vec<(String, Action)>,
        then: Then,
    },
    /// The agent is SIGKILLed at a boundary, restarted, and stops the alloc.
    AgentKill { boundaries: Vec<String> },
}

/// When a fault run delivers its stop, and how the alloc must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// The fault stops the task from starting: once its runner settled, stop;
    /// the alloc must end failed and the task never exec'd.
    StopWhenSettled,
    /// The fault only slows things down: once every task runs, stop; the
    /// alloc must end complete.
    StopWhenRunning,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub job: Job,
    pub kind: Kind,
}

impl Scenario {
    pub fn tasks(&self) -> &[Task] {
        &self.job.groups[0].tasks
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown scenario {0:?}; known: {1}")]
pub struct UnknownScenario(pub String, pub String);

pub fn find(name: &str) -> Result<Scenario, UnknownScenario> {
    let all = catalogue();
    let names = all.iter().map(|s| s.name).collect::<Vec<_>>().join(", ");
    all.into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| UnknownScenario(name.to_string(), names))
}

pub fn catalogue() -> Vec<Scenario> {
    let prestart_hooks = ["validate", "task_dir", "log_files", "task_env"];
    let hook_faults = |task: &str, action: Action| -> Vec<(String, Action)> {
        prestart_hooks
            .iter()
            .flat_map(|h| [Edge::Before, Edge::After].map(|e| hook_point("prestart", e, h)))
            .map(|p| (taskgate_faults::scoped(Some(task), &p), action.clone()))
            .collect()
    };
    // Every boundary a task runner passes on its way to running (the
    // leader's and the sidecar's), then every boundary of the stop update.
    let runner_boundaries = || {
        TASK_RUNNER_BOUNDARIES
            .iter()
            .chain([&points::TR_START_COMMITTED])
            .map(|p| p.to_string())
            .chain(
                prestart_hooks.iter().flat_map(|h| {
                    [Edge::Before, Edge::After].map(|e| hook_point("prestart", e, h))
                }),
            )
            .chain(
                [Edge::Before, Edge::After].map(|e| hook_point("poststart", e, "persist_handle")),
            )
    };
    let kill_boundaries: Vec<String> = ["leader", "sidecar"]
        .iter()
        .flat_map(|task| runner_boundaries().map(move |p| taskgate_faults::scoped(Some(task), &p)))
        .chain(UPDATE_BOUNDARIES.iter().map(|p| p.to_string()))
        .collect();
    vec![
        Scenario {
            name: "sidecar-stop",
            about: "the report: stop while the sidecar is between its start condition and its start",
            job: report_alloc(),
            kind: Kind::StopRace { controlled: "sidecar" },
        },
        Scenario {
            name: "single-task-stop",
            about: "the report's race with a single task",
            job: job("single", vec![service("web")]),
            kind: Kind::StopRace { controlled: "web" },
        },
        Scenario {
            name: "prestart-stop",
            about: "stop while the main task waits behind a prestart task",
            job: job("prestart", vec![lifecycle(oneshot("init"), LifecycleHook::Prestart, false), service("web")]),
            kind: Kind::StopRace { controlled: "web" },
        },
        Scenario {
            name: "poststop-after-stop",
            about: "stop races the leader; the poststop task must still run after the alloc is terminal",
            job: job(
                "poststop",
                vec![leader(service("leader")), lifecycle(oneshot("cleanup"), LifecycleHook::Poststop, false)],
            ),
            kind: Kind::StopRace { controlled: "leader" },
        },
        Scenario {
            name: "prestart-hook-error",
            about: "every prestart hook boundary returns an error: the task is never exec'd, the alloc fails",
            job: job("hook-error", vec![service("web")]),
            kind: Kind::Faults { faults: hook_faults("web", Action::Error), then: Then::StopWhenSettled },
        },
        Scenario {
            name: "prestart-hook-panic",
            about: "every prestart hook boundary panics: the runner survives, the task is never exec'd",
            job: job("hook-panic", vec![service("web")]),
            kind: Kind::Faults { faults: hook_faults("web", Action::Panic), then: Then::StopWhenSettled },
        },
        Scenario {
            name: "slow-boundaries",
            about: "a slow boundary (each sidecar hook, then each update boundary during the stop)",
            job: report_alloc(),
            kind: Kind::Faults {
                faults: hook_faults("sidecar", Action::Delay(20))
                    .into_iter()
                    .chain(UPDATE_BOUNDARIES.iter().map(|p| (p.to_string(), Action::Delay(20))))
                    .collect(),
                then: Then::StopWhenRunning,
            },
        },
        Scenario {
            name: "executor-fault",
            about: "the executor fails after its cgroup, after its mounts, before exec: nothing is leaked",
            job: job("executor-fault", vec![service("web")]),
            kind: Kind::Faults {
                faults: EXECUTOR_BOUNDARIES.iter().map(|p| (taskgate_faults::scoped(Some("web"), p), Action::Error)).collect(),
                then: Then::StopWhenSettled,
            },
        },
        Scenario {
            name: "agent-kill",
            about: "the agent is SIGKILLed at a boundary and restarted: no task lost, none started twice",
            job: report_alloc(),
            kind: Kind::AgentKill { boundaries: kill_boundaries },
        },
    ]
}

/// Executor-side points are configured in the executor process, through the
/// environment; everything else in the engine's own process.
pub fn is_executor_point(name: &str) -> bool {
    EXECUTOR_BOUNDARIES.iter().any(|p| name.ends_with(p)) && name.contains(":ex.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_findable() {
        let all = catalogue();
        for s in &all {
            assert_eq!(find(s.name).unwrap().name, s.name);
            assert_eq!(all.iter().filter(|o| o.name == s.name).count(), 1);
        }
        assert!(find("nope")
            .unwrap_err()
            .to_string()
            .contains("sidecar-stop"));
    }

    #[test]
    fn controlled_tasks_exist() {
        for s in catalogue() {
            if let Kind::StopRace { controlled } = s.kind {
                assert!(s.tasks().iter().any(|t| t.name == controlled), "{}", s.name);
            }
        }
    }

    #[test]
    fn executor_points_are_recognised() {
        assert!(is_executor_point(&taskgate_faults::scoped(
            Some("web"),
            points::EX_BEFORE_EXEC
        )));
        assert!(!is_executor_point(points::AR_KILL_STARTED));
    }
}
