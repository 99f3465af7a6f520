//! A task told to die gets its kill signal, then its shutdown delay and
//! its grace before SIGKILL: judged on when its runner was told
//! (`tr.killing`, or `tr.restart_signaled` for a restart's kill), on its
//! executor's record of how and when its tree ended, and, for the signal,
//! on the task's own word. The grace is the one the attempt started with,
//! read from its spec on the kernel's side (see [`crate::updates`]): an
//! in-place update's new `kill_timeout` holds from the next attempt, never
//! the running one, except that a restored agent kills the attempt it
//! reattached to with the version it was built from.

use crate::attempts::{attempts, Began};
use crate::history::{Event, ExecRecord, TaskExit, TaskShape};
use crate::invariant::{Invariant, Violation};
use crate::updates::{delivered_version, kill_timeout_of};
use taskgate_faults::points::{TR_KILLING, TR_RESTART_SIGNALED};
use taskgate_faults::{scoped, Action, Intervention};

const SIGKILL: i32 = 9;

/// The program a task that reports its kill signal runs from the signal's
/// trap (`/bin/<name>` in the lab's task root). Its exec, seen by the exec
/// gate in the task's own cgroup, is the task's word that the signal
/// reached it: no executor can forge it, and SIGKILL leaves no time for it.
pub const KILL_SIGNAL_WITNESS: &str = "kill-signal-received";

/// [`Invariant::KillGrace`]: a tree that ended by SIGKILL after its runner was told
/// to kill it ended no sooner than the shutdown delay plus the attempt's
/// kill timeout after it was told. Across an agent restore the kill
/// timeout is bounded, not known (see `killed_with_version`). Not
/// judged: a tree the harness killed, a runner that panicked (its cleanup
/// kills at once), and a task whose kill signal is SIGKILL itself.
pub fn check_kill_grace(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks.iter().filter(|t| t.kill_signal != SIGKILL) {
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
            let Some(at) = told_to_die(history, &task.name, attempt.at, exited) else {
                continue;
            };
            if (history[attempt.at..until].iter()).any(|e| harness_kill(e, &task.name)) {
                continue;
            }
            let Event::FaultHit(hit) = &history[at] else {
                continue;
            };
            let (version, restored) = killed_with_version(history, &task.name, attempt.at, exited);
            let grace = kill_timeout_of(task.kill_timeout, version);
            let owed = task.shutdown_delay + grace;
            let waited = exit_us.saturating_sub(hit.at_us);
            if u128::from(waited) < owed.as_micros() {
                let across = restored.map_or(String::new(), |r| {
                    format!(", the newest delivered before the agent was restored at #{r}")
                });
                out.push(Invariant::KillGrace.violation(
                    Some(&task.name),
                    format!(
                        "told to die at #{at}, SIGKILLed {:.3}s later (#{exited}); its shutdown delay and grace (version {version}{across}) are {owed:?}",
                        waited as f64 / 1e6
                    ),
                ));
            }
        }
    }
    out
}

/// [`Invariant::KillSignal`]: a task that reports its kill signal, told to
/// die, reported it before its tree ended: its tree exec'd the
/// [`KILL_SIGNAL_WITNESS`] between the telling and the end, or died of
/// that signal (as the fake driver's tasks do: its record is all the fake
/// world has). Not judged: an
/// attempt the harness's kill or a panic ended (the kill path never ran to
/// its signal). A restore is no excuse: the restored agent kills through
/// the executor it reattached to, with the signal.
pub fn check_kill_signal(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let mut out = Vec::new();
    let judged = |t: &&TaskShape| t.reports_kill_signal && t.kill_signal != SIGKILL;
    for task in tasks.iter().filter(judged) {
        let all = attempts(history, &task.name);
        for (n, attempt) in all.iter().enumerate() {
            let Some((exited, _, exit)) = attempt.exit else {
                continue;
            };
            let until = all.get(n + 1).map_or(history.len(), |a| a.at);
            let Some(at) = told_to_die(history, &task.name, attempt.at, exited) else {
                continue;
            };
            if history[attempt.at..until]
                .iter()
                .any(|e| harness_kill(e, &task.name))
            {
                continue;
            }
            let witnessed = history[at..exited].iter().any(|e| match e {
                Event::Exec(r) => r.identity.task() == Some(&task.name) && is_witness(r),
                _ => false,
            });
            if !witnessed && exit != TaskExit::Signal(task.kill_signal) {
                out.push(Invariant::KillSignal.violation(
                    Some(&task.name),
                    format!(
                        "told to die at #{at}, its tree ended ({exit:?}, #{exited}) without reporting its kill signal: the signal never reached it"
                    ),
                ));
            }
        }
    }
    out
}

/// Where, between `from` and `to`, `task`'s runner was first told to kill
/// it (by a stop or a restart).
fn told_to_die(history: &[Event], task: &str, from: usize, to: usize) -> Option<usize> {
    let told = [
        scoped(Some(task), TR_KILLING),
        scoped(Some(task), TR_RESTART_SIGNALED),
    ];
    (from..to).find(|&i| told.iter().any(|t| history[i].is_hit(t)))
}

fn is_witness(exec: &ExecRecord) -> bool {
    exec.exe
        .file_name()
        .is_some_and(|name| name == KILL_SIGNAL_WITNESS)
}

/// What kills a task's tree without its kill path: the harness's own
/// kills, a panic (its cleanup kills at once).
fn harness_kill(event: &Event, task: &str) -> bool {
    match event {
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

/// The newest job version whose kill timeout the attempt's tree, launched
/// at `from` and ended at `to`, may have been killed with, and the last
/// agent restore in between, if any. Without one, the version it started
/// with. With one, the restored agent's runner was built from the
/// persisted version, not the attempt's, and kills with its timeout
/// (docs/lifecycle.md); no version is persisted before the harness
/// delivered it, and a running attempt takes no later one, so none newer
/// than the newest delivered before that restore: each update halves the
/// timeout, so that version's is the least the kill may have waited.
fn killed_with_version(
    history: &[Event],
    task: &str,
    from: usize,
    to: usize,
) -> (u64, Option<usize>) {
    let started = started_version(history, task, from, to);
    let restored = (from..to).rfind(|&i| matches!(history[i], Event::AgentRestarted { .. }));
    let newest = restored.map_or(started, |r| {
        (history[..r].iter().filter_map(delivered_version)).fold(started, u64::max)
    });
    (newest, restored)
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
mod tests {
    //! The kill signal and its grace over recorded histories, holding and
    //! broken.

    use super::*;
    use crate::history::TaskRole;
    use crate::timed_history::T;
    use rstest::rstest;
    use std::time::Duration;

    fn web() -> TaskShape {
        TaskShape {
            shutdown_delay: Duration::from_millis(200),
            kill_timeout: Duration::from_millis(400),
            ..TaskShape::new("web", TaskRole::Main { leader: false }, 0)
        }
    }

    /// Started with job `version`, told to die at 1 s (`by` that point).
    fn told(version: u64, by: &str) -> T {
        let kill_timeout = kill_timeout_of(Duration::from_millis(400), version);
        T::run()
            .start_version("web", version, kill_timeout)
            .at(1000)
            .task_hit("web", by)
    }

    /// `h`, then its tree ended `exit` at 1 s + `after_ms`.
    fn ended(h: T, exit: TaskExit, after_ms: u64) -> T {
        h.at(1000 + after_ms).exit("web", exit)
    }

    /// Started with job `version`, told to die at 1 s, its tree ended `exit`
    /// at 1 s + `after_ms`.
    fn killed(version: u64, by: &str, exit: TaskExit, after_ms: u64) -> T {
        ended(told(version, by), exit, after_ms)
    }

    #[rstest]
    #[case::sigkilled_after_delay_and_grace(killed(0, TR_KILLING, TaskExit::Signal(9), 650), 0)]
    #[case::sigkilled_too_soon(killed(0, TR_KILLING, TaskExit::Signal(9), 300), 1)]
    #[case::a_restarts_kill_too(killed(0, TR_RESTART_SIGNALED, TaskExit::Signal(9), 300), 1)]
    #[case::exited_on_its_signal(killed(0, TR_KILLING, TaskExit::Code(0), 5), 0)]
    #[case::its_started_versions_grace(killed(1, TR_KILLING, TaskExit::Signal(9), 450), 0)]
    #[case::short_of_its_started_versions_grace(killed(1, TR_KILLING, TaskExit::Signal(9), 350), 1)]
    // A restored agent kills with the version it was built from: at most
    // the newest delivered before the restore, never one delivered after.
    #[case::across_a_restore(
        ended(told(0, TR_KILLING).agent_restart(true), TaskExit::Signal(9), 650),
        0
    )]
    #[case::across_a_restore_with_a_newer_version(
        ended(told(0, TR_KILLING).update_delivered(1).agent_restart(true), TaskExit::Signal(9), 450),
        0
    )]
    #[case::short_of_the_newer_versions_grace(
        ended(told(0, TR_KILLING).update_delivered(1).agent_restart(true), TaskExit::Signal(9), 350),
        1
    )]
    #[case::a_version_delivered_after_the_restore(
        ended(told(0, TR_KILLING).agent_restart(true).update_delivered(1), TaskExit::Signal(9), 450),
        1
    )]
    #[case::the_agent_restored_once_it_ended(
        killed(0, TR_KILLING, TaskExit::Signal(9), 450).agent_restart(false),
        1
    )]
    fn sigkill_waits_for_the_delay_and_the_grace(#[case] h: T, #[case] expected: usize) {
        let v = check_kill_grace(&h.events, &[web()]);
        assert_eq!(v.len(), expected, "{v:#?}");
    }

    /// Told to die, then its tree SIGKILLed by the harness in its delay
    /// (recorded once the tree is dead: after its executor's record).
    fn killed_by_the_harness() -> T {
        T::run()
            .start("web")
            .at(1000)
            .task_hit("web", TR_KILLING)
            .exit("web", TaskExit::Signal(9))
            .fault(
                "web",
                "hook.prekill.before.shutdown_delay",
                Action::Intervene(Intervention::KillTaskTree),
            )
    }

    /// Told to die, then SIGKILLed after the agent was restored.
    fn killed_across_a_restore() -> T {
        T::run()
            .start("web")
            .at(1000)
            .task_hit("web", TR_KILLING)
            .agent_restart(true)
            .exit("web", TaskExit::Signal(9))
    }

    #[test]
    fn the_harness_own_kills_are_excused() {
        let tree_killed = killed_by_the_harness();
        assert_eq!(check_kill_grace(&tree_killed.events, &[web()]), []);
        let sigkill_is_its_signal = TaskShape {
            kill_signal: SIGKILL,
            ..web()
        };
        let h = killed(0, TR_KILLING, TaskExit::Signal(9), 250);
        assert_eq!(check_kill_grace(&h.events, &[sigkill_is_its_signal]), []);
    }

    /// A restored agent kills the attempt it reattached to with the
    /// version it was built from, none newer than the newest delivered
    /// before the restore: none was, so the grace is the first version's,
    /// and a SIGKILL at once is too soon.
    #[test]
    fn sigkilled_at_once_across_a_restore() {
        let restored = killed_across_a_restore();
        let v = check_kill_grace(&restored.events, &[web()]);
        assert_eq!(v.len(), 1, "{v:#?}");
    }

    fn reporting() -> TaskShape {
        TaskShape {
            reports_kill_signal: true,
            ..web()
        }
    }

    /// Started, told to die at 1 s (by `told`), its tree ran the witness
    /// if `witnessed`, then ended `exit`.
    fn signalled(told: &str, witnessed: bool, exit: TaskExit) -> T {
        let h = T::run()
            .start("web")
            .at(1000)
            .task_hit("web", told)
            .at(1200);
        let h = if witnessed { h.witness("web") } else { h };
        h.at(1700).exit("web", exit)
    }

    #[rstest]
    #[case::reported_then_sigkilled(signalled(TR_KILLING, true, TaskExit::Signal(9)), 0)]
    #[case::reported_then_exited(signalled(TR_KILLING, true, TaskExit::Code(0)), 0)]
    #[case::a_restarts_kill_reported(signalled(TR_RESTART_SIGNALED, true, TaskExit::Signal(9)), 0)]
    #[case::sigkilled_unsignalled(signalled(TR_KILLING, false, TaskExit::Signal(9)), 1)]
    #[case::a_restart_sigkilled_unsignalled(
        signalled(TR_RESTART_SIGNALED, false, TaskExit::Signal(9)),
        1
    )]
    #[case::ended_by_another_signal(signalled(TR_KILLING, false, TaskExit::Signal(15)), 1)]
    #[case::died_of_its_signal(signalled(TR_KILLING, false, TaskExit::Signal(2)), 0)]
    fn a_task_told_to_die_reports_its_signal(#[case] h: T, #[case] expected: usize) {
        let v = check_kill_signal(&h.events, &[reporting()]);
        assert_eq!(v.len(), expected, "{v:#?}");
        assert!(v.iter().all(|v| v.invariant == Invariant::KillSignal));
    }

    #[test]
    fn only_reporting_tasks_told_to_die_are_judged() {
        let unsignalled = signalled(TR_KILLING, false, TaskExit::Signal(9));
        assert_eq!(check_kill_signal(&unsignalled.events, &[web()]), []);
        let sigkill_is_its_signal = TaskShape {
            kill_signal: SIGKILL,
            ..reporting()
        };
        assert_eq!(
            check_kill_signal(&unsignalled.events, &[sigkill_is_its_signal]),
            []
        );
        // Another task's witness speaks for no one else.
        let others = T::run()
            .start("web")
            .at(1000)
            .task_hit("web", TR_KILLING)
            .witness("db")
            .exit("web", TaskExit::Signal(9));
        assert_eq!(check_kill_signal(&others.events, &[reporting()]).len(), 1);
        // A witness before the telling is no report of this kill.
        let early = T::run()
            .start("web")
            .witness("web")
            .at(1000)
            .task_hit("web", TR_KILLING)
            .exit("web", TaskExit::Signal(9));
        assert_eq!(check_kill_signal(&early.events, &[reporting()]).len(), 1);
        let never_told = T::run().start("web").exit("web", TaskExit::Code(1));
        assert_eq!(check_kill_signal(&never_told.events, &[reporting()]), []);
    }

    #[test]
    fn the_harness_own_kills_are_excused_restores_are_not() {
        let tree_killed = killed_by_the_harness();
        assert_eq!(check_kill_signal(&tree_killed.events, &[reporting()]), []);
        let restored = killed_across_a_restore();
        assert_eq!(check_kill_signal(&restored.events, &[reporting()]).len(), 1);
    }

    #[test]
    fn each_update_halves_the_kill_timeout() {
        let first = Duration::from_millis(400);
        assert_eq!(kill_timeout_of(first, 0), first);
        assert_eq!(kill_timeout_of(first, 2), Duration::from_millis(100));
        assert_eq!(kill_timeout_of(first, 64), Duration::ZERO);
    }
}
