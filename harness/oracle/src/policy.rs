//! The restart policy's account of every attempt, across agent restores
//! and restart windows, judged on the kernel's and the harness's records
//! (see [`crate::attempts`]): launches, commits left by killed agents,
//! injected setup failures, the executors' exit records, and the times
//! their hits were stamped at. The engine's own counters are never read.
//!
//! Nomad's tracker, which the engine follows: a window begins with the
//! task's tracker; a decision taken `interval` or more after the window
//! began starts a new one; a window grants `attempts` restarts, then fail
//! mode gives up and delay mode waits for the next window. A restart waits
//! its delay plus the seed's jitter first: the runner states the wait it
//! chose as it decides (`tr.restart_decided`), and the real restart comes
//! no sooner.

use crate::attempts::{attempts, windows_begin, Attempt, Began};
use crate::history::{Event, TaskShape};
use crate::invariant::{Invariant, Violation};
use crate::timeline::{executor_kills, exit_taken, kept_restarts, launches, peeks, task_hits};
use std::time::Duration;
use taskgate_faults::points::{
    EX_PEEKED, TR_KILLING, TR_KILL_ASKED, TR_MAIN_EXITED, TR_RESTART_ASKED, TR_RESTART_DECIDED,
    TR_RESTART_DELAY_ELAPSED, TR_RESTART_SIGNALED, TR_START_CONDITION_MET,
};
use taskgate_faults::rng::SplitMix64;
use taskgate_faults::{scoped, Detail};

/// The wait before a task's `n`th restart by its policy (from 0, over its
/// life), as the harness expects it, restated here from Nomad's rule (the
/// engine's own is held to it by a test of the harness's): the policy's
/// `delay` plus a quarter of a draw below it, the draw the `n`th of the
/// stream `seed` gives for `<alloc id>/<task>`. A replay under the same
/// seed waits exactly as its run.
pub fn restart_wait(seed: u64, alloc_id: &str, task: &str, delay: Duration, n: u32) -> Duration {
    let stream = SplitMix64::stream(seed, &format!("{alloc_id}/{task}")).0;
    let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX).max(1);
    let draw = SplitMix64(stream ^ u64::from(n)).draw() % nanos;
    delay + Duration::from_nanos(draw / 4)
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Milliseconds after `begin`, for messages.
fn since(begin: u64, at: u64) -> String {
    format!("{:.3}s", at.saturating_sub(begin) as f64 / 1e6)
}

/// The restarts the policy granted, each with its number over the task's
/// life (from 0) and the attempt it began: every attempt after the first
/// that no user restart brought on.
fn policy_restarts(attempts: &[Attempt]) -> impl Iterator<Item = (usize, usize)> + '_ {
    (1..attempts.len())
        .filter(|&n| !attempts[n].by_user)
        .enumerate()
}

/// Whether a user restart or a kill asked of `task` cut short the policy's
/// wait between `previous` and `next`. An ask from `previous`'s start
/// condition on counts: one its runner took while `previous` ran found the
/// exit already recorded (else `next` would be the user's restart, not the
/// policy's), and stays asked; one before was answered while the task
/// waited to start.
fn cut_short(history: &[Event], task: &str, previous: &Attempt, next: &Attempt) -> bool {
    let asked = [
        scoped(Some(task), TR_RESTART_ASKED),
        scoped(Some(task), TR_KILL_ASKED),
    ];
    let from = (task_hits(history, task, TR_START_CONDITION_MET).into_iter())
        .rfind(|&i| i < previous.at)
        .unwrap_or(previous.at);
    (from..next.at).any(|i| asked.iter().any(|a| history[i].is_hit(a)))
}

/// Whether the restart decided at `decided` was taken back: a kill asked
/// of the task ended its delay, before the delay ran out, the next launch
/// or the next decision (`next`).
fn taken_back(
    history: &[Event],
    task: &str,
    decided: usize,
    next: Option<usize>,
    launched: &[usize],
) -> bool {
    let elapsed = task_hits(history, task, TR_RESTART_DELAY_ELAPSED);
    let end = [
        elapsed.into_iter().find(|&i| i > decided),
        launched.iter().copied().find(|&l| l > decided),
        next,
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(history.len());
    (task_hits(history, task, TR_KILL_ASKED).into_iter()).any(|k| k > decided && k < end)
}

/// The first restart window the policy's `r`th restart (from 1) can fall
/// in: `None` if the policy grants none. A window holds `attempts`
/// restarts; in delay mode the one that finds them used up opens the next.
fn window_of(task: &TaskShape, r: u64) -> Option<u64> {
    match (task.restarts_forever, u64::from(task.restart_attempts)) {
        (false, 0) => None,
        (true, 0) => Some(r),
        (_, a) => Some((r - 1) / a),
    }
}

/// [`Invariant::LaunchesAccounted`]: the `r`th restart the policy granted began no
/// earlier than its window could open: `k` intervals after the first
/// tracker began, for the `k`th window. A restore neither grants a window
/// afresh nor forgets an attempt it found lost.
pub fn check_launches_accounted(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let begin = windows_begin(history).unwrap_or(0);
    let mut out = Vec::new();
    for task in tasks {
        let all = attempts(history, &task.name);
        let interval = us(task.restart_interval);
        for (k, n) in policy_restarts(&all) {
            let (attempt, r) = (&all[n], k as u64 + 1);
            if let Some(exited) = completed_before(history, task, &all[n - 1], attempt) {
                out.push(Invariant::LaunchesAccounted.violation(
                    Some(&task.name),
                    format!(
                        "{} at #{} follows the task's completion (exit 0 at #{exited}): \
                         its policy restarts it on failure only",
                        describe(attempt),
                        attempt.at,
                    ),
                ));
                continue;
            }
            let opens = window_of(task, r).map(|k| match k {
                0 => Some(0),
                k => interval.checked_mul(k).and_then(|t| t.checked_add(begin)),
            });
            let too_early = match (opens, attempt.latest) {
                (None, _) => true,
                // The window never opens within the run.
                (Some(None), _) => true,
                (Some(Some(opens)), Some(latest)) => latest < opens,
                (Some(Some(_)), None) => false,
            };
            // A user's ask shortens a delay mode's wait for its next window;
            // it never grants a restart the policy refuses.
            let shortened =
                task.restarts_forever && cut_short(history, &task.name, &all[n - 1], attempt);
            if too_early && !shortened {
                out.push(Invariant::LaunchesAccounted.violation(
                    Some(&task.name),
                    format!(
                        "{} at #{} is restart {r} by its policy ({} attempts per {}, {}){}",
                        describe(attempt),
                        attempt.at,
                        task.restart_attempts,
                        interval_text(task.restart_interval),
                        if task.restarts_forever {
                            "delay mode"
                        } else {
                            "fail mode"
                        },
                        match attempt.latest {
                            Some(latest) =>
                                format!(", begun {} into the run", since(begin, latest)),
                            None => String::new(),
                        }
                    ),
                ));
            }
        }
    }
    out
}

/// Where `previous` completed, if `next` came after its completion: its
/// own exit 0, of a task restarted on failure only, that no kill or
/// restart its executor peeked for caused, with no restart kept as owed
/// between the two (which brings the task back), and that the engine took
/// before any executor kill (one it never took is a lost attempt to it).
fn completed_before(
    history: &[Event],
    task: &TaskShape,
    previous: &Attempt,
    next: &Attempt,
) -> Option<usize> {
    let (exited, _, exit) = previous.exit?;
    let told = |hits: Vec<usize>, until: usize| hits.iter().any(|&i| i > previous.at && i < until);
    let lost = (executor_kills(history, &task.name).into_iter())
        .any(|k| k > exited && k < next.at && !exit_taken(history, &task.name, exited, k));
    let brought_back = told(peeks(history, &task.name), exited)
        || told(kept_restarts(history, &task.name), next.at)
        || lost;
    (!task.restarts_on_success && exit.successful() && !brought_back).then_some(exited)
}

fn describe(attempt: &Attempt) -> &'static str {
    match attempt.began {
        Began::Launch => "a launch",
        Began::LostCommit => "an attempt its killed agent committed",
        Began::SetupFailed => "an attempt whose setup failed",
    }
}

fn interval_text(interval: Duration) -> String {
    if interval == Duration::MAX {
        "run".into()
    } else {
        format!("{interval:?}")
    }
}

/// [`Invariant::RestartWindows`]: each restart the policy decided states
/// the wait its seed draws for it, and begins no sooner after the
/// attempt's recorded exit than that (unless a kill or a user restart cut
/// the wait short; in delay mode, a restart that finds the window's
/// attempts used waits for the next window instead, which
/// [`Invariant::LaunchesAccounted`] holds). And a task in fail mode whose runner
/// gives up after an exit (no stop, no kill) has used its interval's
/// attempts: that many restarts were decided within the interval before
/// the exit.
pub fn check_restart_windows(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks {
        let all = attempts(history, &task.name);
        out.extend(waits_stated(history, task));
        out.extend(delays_kept(history, task, &all));
        out.extend(give_up_earned(history, task, &all));
    }
    out
}

/// The `n`th restart its runners decided over the task's life (from 0,
/// across restores) stated exactly the wait the harness's seed draws for
/// it: its delay plus the jitter. In delay mode, one past the policy's
/// attempts may wait for the next window instead, never longer than an
/// interval. (An engine that drew its jitter otherwise passed the check of
/// the real restart's time, which has no upper bound.)
fn waits_stated(history: &[Event], task: &TaskShape) -> Vec<Violation> {
    let stated = history.iter().enumerate().filter_map(|(i, e)| match e {
        Event::FaultHit(h) if h.is(Some(&task.name), TR_RESTART_DECIDED) => Some((i, h.detail)),
        _ => None,
    });
    let stated: Vec<_> = stated.collect();
    let launched = launches(history, &task.name);
    let mut out = Vec::new();
    let mut n = 0;
    for (d, &(at, detail)) in stated.iter().enumerate() {
        // Numbered among the restarts the engine kept: one whose delay a
        // kill ended never came, and is taken back (the next draws again).
        let this = n;
        if !taken_back(
            history,
            &task.name,
            at,
            stated.get(d + 1).map(|s| s.0),
            &launched,
        ) {
            n += 1;
        }
        let n = this;
        let Some(&expected) = task.restart_waits.get(n) else {
            continue;
        };
        let wait = match detail {
            Some(Detail::RestartWait { wait_ns }) => Duration::from_nanos(wait_ns),
            _ => {
                out.push(Invariant::RestartWindows.violation(
                    Some(&task.name),
                    format!("restart {n} by its policy, decided at #{at}, states no wait"),
                ));
                continue;
            }
        };
        let next_window = task.restarts_forever
            && n >= task.restart_attempts as usize
            && wait <= task.restart_interval;
        if wait == expected || next_window {
            continue;
        }
        out.push(Invariant::RestartWindows.violation(
            Some(&task.name),
            format!(
                "restart {n} by its policy, decided at #{at}, waits {wait:?}; its delay and the seed's jitter make {expected:?}"
            ),
        ));
    }
    out
}

fn delays_kept(history: &[Event], task: &TaskShape, all: &[Attempt]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (k, n) in policy_restarts(all) {
        let (previous, next) = (&all[n - 1], &all[n]);
        let (Some((exited, exit_us, _)), Some(latest), Some(&wait)) =
            (previous.exit, next.latest, task.restart_waits.get(k))
        else {
            continue;
        };
        let exhausted = task.restarts_forever && k >= task.restart_attempts as usize;
        if exhausted
            || cut_short(history, &task.name, previous, next)
            || latest >= exit_us.saturating_add(us(wait))
        {
            continue;
        }
        out.push(Invariant::RestartWindows.violation(
            Some(&task.name),
            format!(
                "restart {k} by its policy began by {} after the exit at #{exited} ({} at #{}); it waits {wait:?}",
                since(exit_us, latest),
                describe(next),
                next.at
            ),
        ));
    }
    out
}

fn give_up_earned(history: &[Event], task: &TaskShape, all: &[Attempt]) -> Vec<Violation> {
    let attempts_per_window = task.restart_attempts as usize;
    if task.restarts_forever || attempts_per_window == 0 {
        return Vec::new();
    }
    let Some(last) = all.last() else {
        return Vec::new();
    };
    let Some((exited, exit_us, exit)) = last.exit else {
        return Vec::new();
    };
    if exit.successful() && !task.restarts_on_success {
        return Vec::new();
    }
    // Told to die or to restart during the attempt (its executor's peek
    // answers either), or told to die after it, in the restart's delay:
    // the end is the one it was told.
    let told = [
        scoped(Some(&task.name), TR_KILLING),
        scoped(Some(&task.name), TR_RESTART_SIGNALED),
        scoped(Some(&task.name), EX_PEEKED),
    ];
    if (last.at..exited).any(|i| told.iter().any(|t| history[i].is_hit(t))) {
        return Vec::new();
    }
    let main_exited = scoped(Some(&task.name), TR_MAIN_EXITED);
    let Some(gave_up) = (exited..history.len()).find(|&i| history[i].is_hit(&main_exited)) else {
        return Vec::new();
    };
    let kill_asked = scoped(Some(&task.name), TR_KILL_ASKED);
    if (exited..gave_up).any(|i| history[i].is_hit(&kill_asked)) {
        return Vec::new();
    }
    let stopped = history[..gave_up].iter().any(|e| {
        matches!(
            e,
            Event::StopDelivered { .. } | Event::AgentRestarted { stop: true }
        )
    });
    if stopped {
        return Vec::new();
    }
    let window_opened = exit_us.saturating_sub(us(task.restart_interval));
    let within = policy_restarts(all)
        .filter(|&(_, n)| all[n].latest.is_none_or(|l| l > window_opened))
        .count();
    if within >= attempts_per_window {
        return Vec::new();
    }
    vec![Invariant::RestartWindows.violation(
        Some(&task.name),
        format!(
            "given up after its exit at #{exited} with {within} restart(s) in the {} before it; its policy allows {attempts_per_window} per interval",
            interval_text(task.restart_interval)
        ),
    )]
}

#[cfg(test)]
mod tests {
    //! The restart policy's account of attempts over recorded histories,
    //! holding and broken.

    use super::*;
    use crate::history::{TaskExit, TaskRole};
    use crate::timed_history::T;
    use rstest::rstest;
    use taskgate_faults::points::{
        HARNESS_STOP_DELIVERED, TR_RESTART_DELAY, TR_RESTART_KEPT, TR_RESTART_SIGNALED,
        TR_START_COMMITTED,
    };
    use taskgate_faults::{Action, Intervention};

    const FAILED: TaskExit = TaskExit::Code(1);
    const OK: TaskExit = TaskExit::Code(0);

    fn web(attempts: u32, interval_ms: Option<u64>) -> TaskShape {
        let mut web = TaskShape::new("web", TaskRole::Main { leader: false }, attempts);
        if let Some(ms) = interval_ms {
            web.restart_interval = Duration::from_millis(ms);
        }
        web
    }

    fn delay_mode(attempts: u32, interval_ms: u64) -> TaskShape {
        TaskShape {
            restarts_forever: true,
            ..web(attempts, Some(interval_ms))
        }
    }

    fn names(v: &[Violation]) -> Vec<Invariant> {
        v.iter().map(|v| v.invariant).collect()
    }

    /// A launch at each of `ms` (the first the task's first), each failing at once.
    fn failing_at(ms: &[u64]) -> T {
        ms.iter()
            .fold(T::run(), |h, &t| h.at(t).start("web").exit("web", FAILED))
    }

    #[rstest]
    #[case::within_the_policy(web(1, None), failing_at(&[0, 10]), 0)]
    #[case::one_restart_too_many(web(1, None), failing_at(&[0, 10, 20]), 1)]
    #[case::none_allowed(web(0, None), failing_at(&[0, 10]), 1)]
    #[case::a_second_window_opened(web(1, Some(2000)), failing_at(&[0, 10, 2500]), 0)]
    #[case::before_the_second_window(web(1, Some(2000)), failing_at(&[0, 10, 1500]), 1)]
    #[case::delay_mode_waits_for_the_next_window(delay_mode(1, 1000), failing_at(&[0, 10, 1010]), 0)]
    #[case::delay_mode_restarted_early(delay_mode(1, 1000), failing_at(&[0, 10, 20]), 1)]
    #[case::delay_mode_without_attempts(delay_mode(0, 1000), failing_at(&[0, 500]), 1)]
    #[case::no_restart_granted_by_an_ask(
        web(0, None),
        failing_at(&[0]).task_hit("web", TR_RESTART_ASKED).at(10).start("web"),
        1
    )]
    #[case::delay_mode_wait_cut_short_by_a_restart(
        delay_mode(1, 1000),
        failing_at(&[0, 10]).task_hit("web", TR_RESTART_ASKED).at(20).start("web"),
        0
    )]
    fn launches_are_accounted_interval_by_interval(
        #[case] task: TaskShape,
        #[case] h: T,
        #[case] expected: usize,
    ) {
        let v = check_launches_accounted(&h.events, &[task]);
        assert_eq!(v.len(), expected, "{v:#?}");
        assert!(v
            .iter()
            .all(|v| v.invariant == Invariant::LaunchesAccounted));
    }

    /// Bug 1's class: an attempt its killed agent committed, found lost by the
    /// restored agent, counts, though nothing of it was ever exec'd.
    #[rstest]
    #[case::lost_then_launched_again(0, 1)]
    #[case::with_an_attempt_left(1, 0)]
    fn an_attempt_lost_before_its_launch_counts(#[case] attempts: u32, #[case] expected: usize) {
        let h = T::run()
            .task_hit("web", TR_START_COMMITTED)
            .agent_restart(false)
            .at(5)
            .start("web");
        assert_eq!(
            check_launches_accounted(&h.events, &[web(attempts, None)]).len(),
            expected
        );
    }

    /// A task that completes (exit 0, restarted on failure only) is given
    /// no restart by its policy, whatever attempts it has left: a launch
    /// after its completion is no restart the policy grants, within one
    /// agent's life or across a restore, wherever the agent restart falls
    /// beside the exit.
    #[rstest]
    #[case::restarted_after_its_completion(
        T::run().start("web").exit("web", OK).at(10).start("web")
    )]
    #[case::restored_and_run_again(
        T::run().start("web").agent_restart(false).exit("web", OK).at(10).start("web")
    )]
    #[case::its_executor_killed_once_the_exit_was_taken(
        T::run().start("web").exit("web", OK)
            .fault("web", "hook.exited.before.executor_shutdown", Action::Intervene(Intervention::KillExecutor))
            .at(10).start("web")
    )]
    fn a_completed_task_is_given_no_restart(#[case] h: T) {
        let v = check_launches_accounted(&h.events, &[web(2, None)]);
        assert_eq!(names(&v), [Invariant::LaunchesAccounted], "{v:#?}");
    }

    /// What does bring a completed task back: an exit 0 the kill or the
    /// restart its executor peeked for caused (a trap's answer), a restart
    /// kept as owed; and a failure is retried.
    #[rstest]
    #[case::retried_after_a_failure(failing_at(&[0]).at(10).start("web"))]
    #[case::an_exit_a_kill_caused(
        T::run().start("web").task_hit("web", EX_PEEKED).exit("web", OK).at(10).start("web")
    )]
    #[case::a_restart_kept_as_owed(
        T::run().start("web").exit("web", OK).task_hit("web", TR_RESTART_KEPT).at(10).start("web")
    )]
    // The exit came while no agent ran, and its executor died before the
    // next one took it: to the engine the attempt was lost.
    #[case::an_exit_the_engine_never_took(
        T::run().start("web").agent_restart(false).exit("web", OK)
            .fault("web", "tr.restoring", Action::Intervene(Intervention::KillExecutor))
            .at(10).start("web")
    )]
    fn a_task_brought_back_is_accounted(#[case] h: T) {
        assert_eq!(check_launches_accounted(&h.events, &[web(2, None)]), []);
    }

    #[test]
    fn a_commit_launched_before_the_agent_died_is_one_attempt() {
        let h = T::run()
            .task_hit("web", TR_START_COMMITTED)
            .start("web")
            .agent_restart(false);
        assert_eq!(check_launches_accounted(&h.events, &[web(0, None)]), []);
    }

    #[test]
    fn a_failed_setup_counts_and_a_user_restart_does_not() {
        let failed_setup = T::run()
            .start("web")
            .exit("web", FAILED)
            .fault("web", "hook.prestart.before.task_env", Action::Error)
            .start("web");
        assert_eq!(
            names(&check_launches_accounted(
                &failed_setup.events,
                &[web(1, None)]
            )),
            [Invariant::LaunchesAccounted]
        );
        let user = T::run()
            .start("web")
            .task_hit("web", TR_RESTART_SIGNALED)
            .exit("web", TaskExit::Signal(2))
            .start("web")
            .exit("web", FAILED)
            .start("web");
        assert_eq!(check_launches_accounted(&user.events, &[web(1, None)]), []);
    }

    fn waiting(ms: u64) -> TaskShape {
        TaskShape {
            restart_waits: vec![Duration::from_millis(ms); 4],
            ..web(3, None)
        }
    }

    #[rstest]
    #[case::waited(waiting(1000), 1200, None, 0)]
    #[case::too_soon(waiting(1000), 500, None, 1)]
    #[case::cut_short_by_a_restart(waiting(1000), 500, Some(TR_RESTART_ASKED), 0)]
    #[case::cut_short_by_a_kill(waiting(1000), 500, Some(TR_KILL_ASKED), 0)]
    #[case::delay_mode_within_its_attempts(TaskShape { restarts_forever: true, ..waiting(1000) }, 500, None, 1)]
    fn a_restart_waits_its_delay(
        #[case] task: TaskShape,
        #[case] relaunch_ms: u64,
        #[case] asked: Option<&str>,
        #[case] expected: usize,
    ) {
        let mut h = T::run().start("web").at(100).exit("web", FAILED);
        if let Some(asked) = asked {
            h = h.at(150).task_hit("web", asked);
        }
        let h = h.at(100 + relaunch_ms).start("web");
        let v = check_restart_windows(&h.events, &[task]);
        assert_eq!(v.len(), expected, "{v:#?}");
    }

    /// A restart asked as the task failed, whose runner found the exit
    /// already recorded (it peeked after it): the exit was the task's own,
    /// and the restart, still asked, cuts the policy's delay short.
    #[test]
    fn a_restart_asked_just_before_an_own_exit_cuts_its_delay_short() {
        let h = T::run()
            .start("web")
            .at(50)
            .task_hit("web", TR_RESTART_ASKED)
            .at(100)
            .exit("web", FAILED)
            .task_hit("web", EX_PEEKED)
            .at(600)
            .start("web");
        let v = check_restart_windows(&h.events, &[waiting(1000)]);
        assert_eq!(v, [], "{v:#?}");
    }

    /// A restart asked as the task was let start, before its launch: its
    /// runner takes it at its first look, finds the exit already recorded,
    /// and the ask cuts the policy's delay short.
    #[test]
    fn a_restart_asked_before_the_launch_cuts_the_delay_short() {
        let h = T::run()
            .task_hit("web", TR_START_CONDITION_MET)
            .task_hit("web", TR_RESTART_ASKED)
            .at(50)
            .start("web")
            .at(100)
            .exit("web", FAILED)
            .task_hit("web", EX_PEEKED)
            .at(600)
            .start("web");
        let v = check_restart_windows(&h.events, &[waiting(1000)]);
        assert_eq!(v, [], "{v:#?}");
        let asked_before_its_start_condition = T::run()
            .task_hit("web", TR_RESTART_ASKED)
            .task_hit("web", TR_START_CONDITION_MET)
            .at(50)
            .start("web")
            .at(100)
            .exit("web", FAILED)
            .at(600)
            .start("web");
        let v = check_restart_windows(&asked_before_its_start_condition.events, &[waiting(1000)]);
        assert_eq!(names(&v), [Invariant::RestartWindows], "{v:#?}");
    }

    /// A restart a kill took back (its delay ended by a kill: it never
    /// came) counts for nothing: the next restart, after a restart of all
    /// tasks brought the task back, draws the same jitter again.
    #[test]
    fn a_restart_a_kill_took_back_draws_again() {
        let h = T::run()
            .start("web")
            .exit("web", FAILED)
            .decided("web", Duration::from_millis(1000))
            .task_hit("web", TR_RESTART_DELAY)
            .task_hit("web", TR_KILL_ASKED)
            .task_hit("web", TR_MAIN_EXITED)
            .task_hit("web", TR_RESTART_SIGNALED)
            .at(100)
            .start("web")
            .exit("web", FAILED)
            .decided("web", Duration::from_millis(1000));
        let v = check_restart_windows(&h.events, &[drawn(web(3, None))]);
        assert!(v.is_empty(), "{v:#?}");
    }

    /// Restarts 0 to 3 wait 1 s plus 0, 0.1, 0.2 and 0.3 s of jitter.
    fn drawn(task: TaskShape) -> TaskShape {
        TaskShape {
            restart_waits: (0..4)
                .map(|n| Duration::from_millis(1000 + 100 * n))
                .collect(),
            restart_interval: Duration::from_secs(5),
            ..task
        }
    }

    fn deciding(ms: &[u64]) -> T {
        ms.iter().fold(T::run(), |h, &ms| {
            h.decided("web", Duration::from_millis(ms))
        })
    }

    #[rstest]
    #[case::the_drawn_waits(web(3, None), deciding(&[1000, 1100, 1200]), 0)]
    #[case::twice_the_jitter(web(3, None), deciding(&[1000, 1200]), 1)]
    #[case::a_draw_taken_twice(web(3, None), deciding(&[1000, 1000]), 1)]
    #[case::across_a_restore(web(3, None), deciding(&[1000]).agent_restart(false).decided("web", Duration::from_millis(1100)), 0)]
    #[case::redrawn_after_a_restore(web(3, None), deciding(&[1000]).agent_restart(false).decided("web", Duration::from_millis(1000)), 1)]
    #[case::no_wait_stated(web(3, None), T::run().task_hit("web", TR_RESTART_DECIDED), 1)]
    #[case::delay_mode_waits_for_the_next_window(delay_mode(1, 5000), deciding(&[1000, 4000]), 0)]
    #[case::delay_mode_waits_past_the_window(delay_mode(1, 5000), deciding(&[1000, 6000]), 1)]
    #[case::delay_mode_within_its_attempts(delay_mode(2, 5000), deciding(&[1000, 4000]), 1)]
    fn a_restart_states_the_wait_its_seed_draws(
        #[case] task: TaskShape,
        #[case] h: T,
        #[case] expected: usize,
    ) {
        let v = check_restart_windows(&h.events, &[drawn(task)]);
        assert_eq!(
            names(&v),
            vec![Invariant::RestartWindows; expected],
            "{v:#?}"
        );
    }

    #[test]
    fn delay_mode_past_its_attempts_waits_the_window_instead() {
        let task = TaskShape {
            restarts_forever: true,
            ..waiting(1000)
        };
        let task = TaskShape {
            restart_attempts: 1,
            ..task
        };
        let h = T::run()
            .start("web")
            .exit("web", FAILED)
            .at(1100)
            .start("web")
            .exit("web", FAILED)
            .at(1200)
            .start("web");
        assert_eq!(check_restart_windows(&h.events, &[task]), []);
    }

    /// Bug 3's class: a task given up on while the interval still had an
    /// attempt (the restored tracker counted restarts of an older interval).
    #[rstest]
    #[case::interval_passed_since_the_restart(Some(2000), None, 1)]
    #[case::restart_within_the_interval(Some(10_000), None, 0)]
    #[case::interval_longer_than_the_run(None, None, 0)]
    #[case::stopped_first(Some(2000), Some(HARNESS_STOP_DELIVERED), 0)]
    #[case::killed_first(Some(2000), Some(TR_KILLING), 0)]
    fn a_give_up_uses_the_intervals_attempts(
        #[case] interval_ms: Option<u64>,
        #[case] first: Option<&str>,
        #[case] expected: usize,
    ) {
        let mut h = T::run()
            .start("web")
            .exit("web", FAILED)
            .at(50)
            .start("web")
            .at(3000);
        match first {
            Some(HARNESS_STOP_DELIVERED) => h = h.stop(),
            Some(point) => h = h.task_hit("web", point),
            None => {}
        }
        let h = h
            .exit("web", FAILED)
            .agent_restart(false)
            .task_hit("web", TR_MAIN_EXITED);
        let v = check_restart_windows(&h.events, &[web(1, interval_ms)]);
        assert_eq!(
            names(&v),
            vec![Invariant::RestartWindows; expected],
            "{v:#?}"
        );
    }

    /// A task told to die in its restart delay (a sidecar, once the main
    /// tasks are done) ends as told, whatever attempts its policy has
    /// left; so does one whose tree died just after its executor's peek
    /// for a kill, before the kill path began.
    #[rstest]
    #[case::told_to_die_in_its_delay(
        T::run().start("web").at(200).exit("web", OK).task_hit("web", TR_KILL_ASKED)
            .task_hit("web", TR_MAIN_EXITED)
    )]
    #[case::died_after_the_peek(
        T::run().start("web").task_hit("web", EX_PEEKED).at(200).exit("web", OK)
            .task_hit("web", TR_MAIN_EXITED)
    )]
    fn a_task_told_to_die_gives_up_as_told(#[case] h: T) {
        let sidecar = TaskShape {
            restarts_on_success: true,
            ..web(3, Some(60_000))
        };
        let v = check_restart_windows(&h.events, &[sidecar]);
        assert!(v.is_empty(), "{v:#?}");
    }

    #[test]
    fn a_completion_is_no_give_up() {
        let h = T::run()
            .start("web")
            .exit("web", FAILED)
            .at(50)
            .start("web")
            .at(3000)
            .exit("web", TaskExit::Code(0))
            .task_hit("web", TR_MAIN_EXITED);
        assert_eq!(check_restart_windows(&h.events, &[web(1, Some(2000))]), []);
        let service = TaskShape {
            restarts_on_success: true,
            ..web(1, Some(2000))
        };
        assert_eq!(
            names(&check_restart_windows(&h.events, &[service])),
            [Invariant::RestartWindows]
        );
    }
}
