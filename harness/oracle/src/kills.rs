//! A task told to die is given its shutdown delay and its grace before
//! SIGKILL: judged on when its runner was told (`tr.killing`, or
//! `tr.restart_signaled` for a restart's kill) and on its executor's
//! record of how and when its tree ended. The grace is the one the attempt
//! started with, read from its spec on the kernel's side (see
//! [`crate::updates`]): an in-place update's new `kill_timeout` holds from
//! the next attempt, never the running one.

use crate::attempts::{attempts, is_hit, Began};
use crate::invariants::{Event, TaskExit, TaskShape, Violation};
use crate::updates::kill_timeout_of;
use taskgate_faults::points::{TR_KILLING, TR_RESTART_SIGNALED};
use taskgate_faults::{scoped, Action, Intervention};

pub const KILL_GRACE: &str =
    "a task told to die is SIGKILLed only after its shutdown delay and the grace its attempt started with";

const SIGKILL: i32 = 9;

/// [`KILL_GRACE`]: a tree that ended by SIGKILL after its runner was told
/// to kill it ended no sooner than the shutdown delay plus the attempt's
/// kill timeout after it was told. Not judged: a tree the harness killed,
/// a runner that panicked (its cleanup kills at once), an attempt that
/// spans an agent restart (a restored agent kills with the persisted
/// version's timeout, as documented), and a task whose kill signal is
/// SIGKILL itself.
pub fn check_kill_grace(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks.iter().filter(|t| !t.killed_by_sigkill) {
        let told = [
            scoped(Some(&task.name), TR_KILLING),
            scoped(Some(&task.name), TR_RESTART_SIGNALED),
        ];
        let all = attempts(history, &task.name);
        for (n, attempt) in all.iter().enumerate() {
            let Some((exited, exit_us, TaskExit::Signal(SIGKILL))) = attempt.exit else {
                continue;
            };
            // The harness records its own kill once it is done, after the
            // executor recorded the exit it caused.
            let until = all.get(n + 1).map_or(history.len(), |a| a.at);
            if attempt.began != Began::Launch {
                continue;
            }
            let Some(at) =
                (attempt.at..exited).find(|&i| told.iter().any(|t| is_hit(&history[i], t)))
            else {
                continue;
            };
            if (attempt.at..until).any(|i| excuses(&history[i], &task.name)) {
                continue;
            }
            let Event::FaultHit(hit) = &history[at] else {
                continue;
            };
            let version = started_version(history, &task.name, attempt.at, exited);
            let grace = kill_timeout_of(task.kill_timeout, version);
            let owed = task.shutdown_delay + grace;
            let waited = exit_us.saturating_sub(hit.at_us);
            if u128::from(waited) < owed.as_micros() {
                out.push(Violation {
                    invariant: KILL_GRACE,
                    task: Some(task.name.clone()),
                    detail: format!(
                        "told to die at #{at}, SIGKILLed {:.3}s later (#{exited}); its shutdown delay and grace (version {version}) are {owed:?}",
                        waited as f64 / 1e6
                    ),
                });
            }
        }
    }
    out
}

/// What makes a SIGKILL no kill path's: the harness's own kills, a panic
/// (its cleanup kills at once), an agent restart.
fn excuses(event: &Event, task: &str) -> bool {
    match event {
        Event::AgentRestarted { .. } => true,
        Event::FaultHit(h) if h.point.scope() == Some(task) => matches!(
            h.action,
            Some(
                Action::Panic
                    | Action::Intervene(Intervention::KillExecutor | Intervention::KillTaskTree)
            )
        ),
        _ => false,
    }
}

/// The job version the attempt's tree was exec'd with (0 when unknown).
fn started_version(history: &[Event], task: &str, from: usize, to: usize) -> u64 {
    history[from..to]
        .iter()
        .find_map(|e| match e {
            Event::Exec(r) if r.identity.task() == Some(task) => {
                r.started_version.as_ref().and_then(|v| v.whole())
            }
            _ => None,
        })
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "kills_tests.rs"]
mod tests;
