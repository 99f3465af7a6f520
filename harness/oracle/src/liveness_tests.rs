//! Liveness of stops, restarts and updates over recorded histories,
//! holding and broken.

use super::*;
use crate::invariants::{TaskRole, TaskShape};
use crate::timed_history::T;
use rstest::rstest;
use taskgate_faults::points::{TR_MAIN_EXITED, TR_RESTART_DELAY, TR_RESTART_SIGNALED};

fn tasks() -> Vec<TaskShape> {
    vec![TaskShape::new("web", TaskRole::Main { leader: false }, 2)]
}

fn check(h: &T) -> Vec<Violation> {
    check_commands_take_effect(&h.events, &tasks())
}

fn delay_begun() -> T {
    T::run().start("web").task_hit("web", TR_RESTART_DELAY)
}

#[rstest]
#[case::ran_out_before_the_kill(
    delay_begun().task_hit("web", TR_RESTART_DELAY_ELAPSED).task_hit("web", TR_KILL_ASKED), 0)]
#[case::ran_out_after_the_kill(
    delay_begun().task_hit("web", TR_KILL_ASKED).task_hit("web", TR_RESTART_DELAY_ELAPSED), 1)]
#[case::ran_out_while_a_restart_was_asked(
    delay_begun().hit(AR_RESTART_ACCEPTED).task_hit("web", TR_RESTART_ASKED)
        .task_hit("web", TR_RESTART_DELAY_ELAPSED).hit(AR_RESTART_TARGETS_DOWN), 1)]
#[case::ran_out_once_the_restart_was_done(
    delay_begun().hit(AR_RESTART_ACCEPTED).task_hit("web", TR_RESTART_ASKED)
        .hit(AR_RESTART_TARGETS_DOWN).task_hit("web", TR_RESTART_DELAY_ELAPSED), 0)]
#[case::revived_after_its_kill(
    delay_begun().task_hit("web", TR_KILL_ASKED).hit(AR_RESTART_ACCEPTED)
        .task_hit("web", TR_RESTART_ASKED).task_hit("web", TR_RESTART_SIGNALED)
        .hit(AR_RESTART_TARGETS_DOWN).task_hit("web", TR_RESTART_DELAY_ELAPSED), 0)]
#[case::told_before_the_agent_died(
    delay_begun().task_hit("web", TR_KILL_ASKED).agent_restart(false)
        .task_hit("web", TR_RESTART_DELAY_ELAPSED), 0)]
fn no_restart_delay_runs_out_on_a_kill_or_restart(#[case] h: T, #[case] expected: usize) {
    let v = check(&h);
    assert_eq!(v.len(), expected, "{v:#?}");
    assert!(v.iter().all(|v| v.task.as_deref() == Some("web")), "{v:#?}");
}

/// Bug 2's class: the restart hung on a delay it should have cut short,
/// and the stop sent meanwhile waited behind it.
#[rstest]
#[case::done(
    T::run().hit(AR_RESTART_ACCEPTED).stop().hit(AR_RESTART_TARGETS_DOWN).hit(AR_UPDATE_APPLIED),
    0
)]
// A violation for the restart, and one for the stop it held up.
#[case::hung_with_a_stop_behind_it(T::run().hit(AR_RESTART_ACCEPTED).stop(), 2)]
#[case::its_agent_was_killed(T::run().hit(AR_RESTART_ACCEPTED).agent_restart(false), 0)]
fn an_accepted_restart_takes_its_targets_down(#[case] h: T, #[case] expected: usize) {
    let v = check(&h);
    assert_eq!(v.len(), expected, "{v:#?}");
    if let Some(v) = v.first() {
        assert!(v.detail.contains("waited behind it"), "{}", v.detail);
    }
}

#[rstest]
#[case::applied(T::run().stop().hit(AR_UPDATE_APPLIED), 0)]
#[case::never_applied(T::run().stop(), 1)]
#[case::the_alloc_had_finished(T::run().status(AllocStatus::Complete).stop(), 0)]
#[case::lost_with_its_agent(T::run().stop().agent_restart(true).stop().hit(AR_UPDATE_APPLIED), 0)]
#[case::an_update_never_applied(T::run().hit(HARNESS_UPDATE_DELIVERED), 1)]
fn every_stop_and_update_takes_effect(#[case] h: T, #[case] expected: usize) {
    assert_eq!(check(&h).len(), expected);
}

#[rstest]
#[case::kept(true, 0)]
#[case::undone(false, 1)]
fn a_stop_is_final(#[case] stop: bool, #[case] expected: usize) {
    let h = T::run()
        .stop()
        .hit(AR_ALLOC_TERMINAL)
        .hit(AR_UPDATE_APPLIED)
        .hit(HARNESS_UPDATE_DELIVERED)
        .hit(AR_UPDATE_APPLIED)
        .status(AllocStatus::Complete)
        .desired_stop(stop);
    assert_eq!(check(&h).len(), expected);
}

/// A stop in a 10 s restart delay: the runner is done at once; one that
/// ignored the kill is done only as the delay ran out.
#[rstest]
#[case::done_at_once(2_050, 0)]
#[case::done_as_the_delay_ran_out(11_000, 1)]
fn a_kill_ends_a_restart_delay(#[case] done_ms: u64, #[case] expected: usize) {
    let web = TaskShape {
        restart_waits: vec![std::time::Duration::from_secs(10)],
        ..tasks().remove(0)
    };
    let h = T::run()
        .start("web")
        .exit("web", crate::invariants::TaskExit::Code(1))
        .at(1000)
        .task_hit("web", TR_RESTART_DELAY)
        .at(2000)
        .task_hit("web", TR_KILL_ASKED)
        .at(done_ms)
        .task_hit("web", TR_MAIN_EXITED)
        .status(AllocStatus::Complete);
    let v = check_commands_take_effect(&h.events, &[web]);
    assert_eq!(v.len(), expected, "{v:#?}");
}

/// Told in the delay's last half, the tie may go either way.
#[test]
fn a_kill_late_in_a_delay_may_meet_its_end() {
    let web = TaskShape {
        restart_waits: vec![std::time::Duration::from_secs(10)],
        ..tasks().remove(0)
    };
    let h = T::run()
        .start("web")
        .exit("web", crate::invariants::TaskExit::Code(1))
        .at(1000)
        .task_hit("web", TR_RESTART_DELAY)
        .at(10_990)
        .task_hit("web", TR_KILL_ASKED)
        .at(11_010)
        .task_hit("web", TR_MAIN_EXITED)
        .status(AllocStatus::Complete);
    assert_eq!(check_commands_take_effect(&h.events, &[web]), []);
}
