//! Where in a run's history each task's records fall: its launches, the
//! roots of its process trees, its exits, when its runner was told to die
//! or to restart, and when the harness killed its executor. The checks
//! reason over these positions.

use crate::history::{Event, TaskExit};
use taskgate_faults::points::{EX_PEEKED, TR_KILLING, TR_RESTART_KEPT, TR_RESTART_SIGNALED};
use taskgate_faults::{scoped, Action, Intervention};

/// Where an executor for `task` was exec'd: one per launch of an attempt.
pub(crate) fn launches(history: &[Event], task: &str) -> Vec<usize> {
    positions(history, |e| e.executor_exec_of(task).is_some())
}

/// Where each launch's task process was exec'd: the first exec in the
/// task's cgroup after each launch (the tree's root).
pub(crate) fn tree_roots(history: &[Event], task: &str) -> Vec<usize> {
    let launched = launches(history, task);
    launched
        .iter()
        .enumerate()
        .filter_map(|(n, &at)| {
            let end = launched.get(n + 1).copied().unwrap_or(history.len());
            (at..end).find(|&i| history[i].is_task_exec_of(task))
        })
        .collect()
}

/// Where `task`'s executors recorded its trees' ends, and how each ended.
pub(crate) fn exits(history: &[Event], task: &str) -> Vec<(usize, TaskExit)> {
    history
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::TaskExited { task: t, exit } if t == task => Some((i, *exit)),
            _ => None,
        })
        .collect()
}

/// Where `task`'s runner was told to die.
pub(crate) fn kills(history: &[Event], task: &str) -> Vec<usize> {
    task_hits(history, task, TR_KILLING)
}

/// Where `task`'s executor answered a runner told to die or to restart
/// (this agent's or a restored one's) whether the task ended on its own:
/// the runner's decision whose end the attempt's is (an exit recorded
/// before the first is the task's own; one after it, the kill's or the
/// restart's).
pub(crate) fn peeks(history: &[Event], task: &str) -> Vec<usize> {
    task_hits(history, task, EX_PEEKED)
}

/// Where the task's runner took a user restart: its live attempt is told
/// to die (or, dead, the task is brought back), and the next attempt is
/// the restart's, outside the restart policy.
pub(crate) fn restarts(history: &[Event], task: &str) -> Vec<usize> {
    task_hits(history, task, TR_RESTART_SIGNALED)
}

/// Where the task's runner kept a user restart that found its attempt
/// already over (its own exit came first, or its executor was gone): owed,
/// the restart still brings the task back (a restored agent's runner too).
pub(crate) fn kept_restarts(history: &[Event], task: &str) -> Vec<usize> {
    task_hits(history, task, TR_RESTART_KEPT)
}

/// Whether the engine took `task`'s exit recorded at `exited` by `until`
/// (inclusive): its runner reached the task's exited hooks, which come
/// once the attempt's end is persisted. An exit only the executor held
/// (no agent ran, say) goes with an executor killed before then.
pub(crate) fn exit_taken(history: &[Event], task: &str, exited: usize, until: usize) -> bool {
    (exited..=until.min(history.len().saturating_sub(1))).any(|i| {
        matches!(&history[i], Event::FaultHit(h) if h.point.scope() == Some(task)
            && h.point.point.starts_with("hook.exited."))
    })
}

/// Where the harness SIGKILLed the task's executor behind the engine's back.
pub(crate) fn executor_kills(history: &[Event], task: &str) -> Vec<usize> {
    positions(history, |e| {
        matches!(e, Event::FaultHit(h) if h.point.scope() == Some(task)
            && h.action == Some(Action::Intervene(Intervention::KillExecutor)))
    })
}

/// Whether the harness killed the executor of `task`'s latest launch
/// before `at`: that tree's end has no record (the engine destroys what the
/// executor left), so no order can be judged on it; what outlives the run
/// is [`NoSurvivors`](crate::invariant::Invariant::NoSurvivors)'s.
pub(crate) fn end_unrecorded(history: &[Event], task: &str, at: usize) -> bool {
    let Some(launch) = launches(history, task).into_iter().rfind(|&l| l < at) else {
        return false;
    };
    executor_kills(history, task)
        .into_iter()
        .any(|k| k > launch && k < at)
}

/// Where `task`'s point `point` was hit.
pub(crate) fn task_hits(history: &[Event], task: &str, point: &str) -> Vec<usize> {
    let name = scoped(Some(task), point);
    positions(history, |e| e.is_hit(&name))
}

/// Where the events `f` picks are.
pub(crate) fn positions(history: &[Event], f: impl Fn(&Event) -> bool) -> Vec<usize> {
    history
        .iter()
        .enumerate()
        .filter(|(_, e)| f(e))
        .map(|(i, _)| i)
        .collect()
}
