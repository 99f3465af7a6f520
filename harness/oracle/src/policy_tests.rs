//! The restart policy's account of attempts over recorded histories,
//! holding and broken.

use super::*;
use crate::invariants::{TaskExit, TaskRole};
use crate::timed_history::T;
use rstest::rstest;
use taskgate_faults::points::{HARNESS_STOP_DELIVERED, TR_RESTART_SIGNALED, TR_START_COMMITTED};
use taskgate_faults::Action;

const FAILED: TaskExit = TaskExit::Code(1);

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

fn names(v: &[Violation]) -> Vec<&'static str> {
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
fn launches_are_accounted_interval_by_interval(
    #[case] task: TaskShape,
    #[case] h: T,
    #[case] expected: usize,
) {
    let v = check_launches_accounted(&h.events, &[task]);
    assert_eq!(v.len(), expected, "{v:#?}");
    assert!(v.iter().all(|v| v.invariant == LAUNCHES_ACCOUNTED));
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
        [LAUNCHES_ACCOUNTED]
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
    assert_eq!(names(&v), vec![RESTART_WINDOWS; expected], "{v:#?}");
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
        [RESTART_WINDOWS]
    );
}
