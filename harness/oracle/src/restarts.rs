//! User restarts (Nomad's `alloc restart`), judged on the kernel's and the
//! harness's records: executor launches and tree roots (execs), exits (the
//! executors' own records), and where each task runner took the restart.
//! The engine's word is used only for where a restart was accepted and
//! where its targets were all down, the window the rules below speak of.
//! Nomad #19403: a restart killed the sidecars with the main tasks, and
//! started the tasks again out of lifecycle order.

use crate::invariants::{Event, TaskRole, TaskShape, Violation};
use crate::lifecycle::{exits, launches, positions, restarts, told_in_kill_order, tree_roots};
use taskgate_faults::points::{
    AR_ALLOC_TERMINAL, AR_RESTART_ACCEPTED, AR_RESTART_TARGETS_DOWN, TR_BEFORE_DRIVER_START,
};
use taskgate_faults::{scoped, Detail};

pub const RESTART_ORDER: &str =
    "a restart takes its tasks down leader first and sidecars last, starts nothing until they \
     are down, and brings them back in lifecycle order, a completed prestart task only when all \
     tasks restart; none is accepted after a stop";

/// One accepted restart: from its acceptance to its targets being down
/// (or, if they never were, the agent's death or the run's end).
#[derive(Debug, Clone, Copy)]
struct Restart {
    accepted: usize,
    down: Option<usize>,
    end: usize,
    all_tasks: bool,
}

impl Restart {
    fn within(&self, at: usize) -> bool {
        at > self.accepted && at < self.down.unwrap_or(self.end)
    }
}

fn accepted_restarts(history: &[Event]) -> Vec<Restart> {
    let agent_deaths = positions(history, |e| matches!(e, Event::AgentRestarted { .. }));
    history
        .iter()
        .enumerate()
        .filter_map(|(at, e)| match e {
            Event::FaultHit(h)
                if h.point.scope().is_none() && h.point.point == AR_RESTART_ACCEPTED =>
            {
                let all_tasks = matches!(h.detail, Some(Detail::Restart { all_tasks: true }));
                let end = (agent_deaths.iter().copied().find(|&d| d > at)).unwrap_or(history.len());
                let down = (at..end).find(|&i| {
                    matches!(&history[i], Event::FaultHit(h) if h.name() == AR_RESTART_TARGETS_DOWN)
                });
                Some(Restart {
                    accepted: at,
                    down,
                    end,
                    all_tasks,
                })
            }
            _ => None,
        })
        .collect()
}

fn violation(task: &str, detail: String) -> Violation {
    Violation {
        invariant: RESTART_ORDER,
        task: Some(task.to_string()),
        detail,
    }
}

/// Every accepted restart: accepted only before a stop made the alloc
/// terminal (a stop is final), its kill order, its hold on starts, the
/// order its tasks come back in, and a completed prestart task kept
/// completed unless all tasks restart.
pub fn check_restart_order(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let restarts_seen = accepted_restarts(history);
    let terminal = history
        .iter()
        .position(|e| matches!(e, Event::FaultHit(h) if h.name() == AR_ALLOC_TERMINAL));
    let mut out = Vec::new();
    for (n, restart) in restarts_seen.iter().enumerate() {
        if let Some(terminal) = terminal.filter(|&t| t < restart.accepted) {
            out.push(Violation {
                invariant: RESTART_ORDER,
                task: None,
                detail: format!(
                    "a restart was accepted at #{} after a stop made the alloc terminal at #{terminal}",
                    restart.accepted
                ),
            });
        }
        let next = restarts_seen
            .get(n + 1)
            .map_or(history.len(), |r| r.accepted);
        let signaled = |task: &TaskShape| {
            (restarts(history, &task.name).into_iter()).find(|&at| restart.within(at))
        };
        out.extend(told_in_kill_order(
            history,
            tasks,
            &signaled,
            RESTART_ORDER,
            "restart",
        ));
        out.extend(starts_held(history, tasks, restart));
        if let Some(down) = restart.down {
            out.extend(lifecycle_order(history, tasks, &signaled, down, next));
        }
        if !restart.all_tasks {
            out.extend(completed_prestart_kept(
                history,
                tasks,
                restart.accepted,
                next,
            ));
        }
    }
    out
}

/// From the restart's acceptance until its targets are down, no task is
/// launched on a start decided after the acceptance (one decided before
/// may have been committed before the hold: the restart takes it down).
fn starts_held(history: &[Event], tasks: &[TaskShape], restart: &Restart) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks.iter().filter(|t| t.role != TaskRole::Poststop) {
        let decision = scoped(Some(&task.name), TR_BEFORE_DRIVER_START);
        let decided = positions(
            history,
            |e| matches!(e, Event::FaultHit(h) if h.name() == decision),
        );
        for launch in launches(history, &task.name)
            .into_iter()
            .filter(|&l| restart.within(l))
        {
            let Some(at) = decided.iter().copied().rfind(|&d| d < launch) else {
                continue;
            };
            if at > restart.accepted {
                out.push(violation(
                    &task.name,
                    format!(
                        "launched at #{launch} on a start decided at #{at}, while the restart accepted at #{} was taking its targets down",
                        restart.accepted
                    ),
                ));
            }
        }
    }
    out
}

/// After the targets are down, each main and poststart task's first tree
/// comes after the restarted prestart tasks completed (ephemeral) or
/// started (sidecars) again, and a poststart task's after the restarted
/// main tasks started again.
fn lifecycle_order(
    history: &[Event],
    tasks: &[TaskShape],
    signaled: &dyn Fn(&TaskShape) -> Option<usize>,
    down: usize,
    next: usize,
) -> Vec<Violation> {
    let after = |task: &str, from: usize, before: usize| {
        tree_roots(history, task)
            .into_iter()
            .find(|&r| r > from && r < before)
    };
    // Its latest tree before `before` completed: run again after the
    // restart, or (its exit beat the restart's kill) not needed again.
    let completed = |task: &str, before: usize| {
        let Some(last) = launches(history, task).into_iter().rfind(|&l| l < before) else {
            return false;
        };
        (exits(history, task).iter())
            .any(|&(at, exit)| at > last && at < before && exit.successful())
    };
    let mut out = Vec::new();
    for task in tasks {
        let poststart = match task.role {
            TaskRole::Main { .. } => false,
            TaskRole::Poststart { .. } => true,
            TaskRole::Prestart { .. } | TaskRole::Poststop => continue,
        };
        let Some(root) = after(&task.name, down, next) else {
            continue;
        };
        for before in tasks.iter().filter(|b| signaled(b).is_some()) {
            let missing = match before.role {
                TaskRole::Prestart { sidecar: false } if !completed(&before.name, root) => {
                    "completed"
                }
                TaskRole::Prestart { sidecar: true }
                    if after(&before.name, down, root).is_none() =>
                {
                    "started"
                }
                TaskRole::Main { .. } if poststart && after(&before.name, down, root).is_none() => {
                    "started"
                }
                _ => continue,
            };
            out.push(violation(
                &task.name,
                format!(
                    "started at #{root}, after the restart, before {} had {missing} again",
                    before.name
                ),
            ));
        }
    }
    out
}

/// A restart of the running tasks leaves a completed prestart task
/// completed: it is not launched again.
fn completed_prestart_kept(
    history: &[Event],
    tasks: &[TaskShape],
    accepted: usize,
    next: usize,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks
        .iter()
        .filter(|t| t.role == TaskRole::Prestart { sidecar: false })
    {
        let done = (exits(history, &task.name).iter())
            .any(|&(at, exit)| at < accepted && exit.successful());
        let again = launches(history, &task.name)
            .into_iter()
            .find(|&l| l > accepted && l < next);
        if let (true, Some(again)) = (done, again) {
            out.push(violation(
                &task.name,
                format!(
                    "completed before the restart of the running tasks at #{accepted}, launched again at #{again}"
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
#[path = "restarts_tests.rs"]
mod tests;
