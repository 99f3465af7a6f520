//! The kill grace over recorded histories, holding and broken.

use super::*;
use crate::invariants::TaskRole;
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

/// Started with job `version`, told to die at 1 s, its tree ended `exit`
/// at 1 s + `after_ms`.
fn killed(version: u64, told: &str, exit: TaskExit, after_ms: u64) -> T {
    let kill_timeout = kill_timeout_of(Duration::from_millis(400), version);
    T::run()
        .start_version("web", version, kill_timeout)
        .at(1000)
        .task_hit("web", told)
        .at(1000 + after_ms)
        .exit("web", exit)
}

#[rstest]
#[case::sigkilled_after_delay_and_grace(killed(0, TR_KILLING, TaskExit::Signal(9), 650), 0)]
#[case::sigkilled_too_soon(killed(0, TR_KILLING, TaskExit::Signal(9), 300), 1)]
#[case::a_restarts_kill_too(killed(0, TR_RESTART_SIGNALED, TaskExit::Signal(9), 300), 1)]
#[case::exited_on_its_signal(killed(0, TR_KILLING, TaskExit::Code(0), 5), 0)]
#[case::its_started_versions_grace(killed(1, TR_KILLING, TaskExit::Signal(9), 450), 0)]
#[case::short_of_its_started_versions_grace(killed(1, TR_KILLING, TaskExit::Signal(9), 350), 1)]
fn sigkill_waits_for_the_delay_and_the_grace(#[case] h: T, #[case] expected: usize) {
    let v = check_kill_grace(&h.events, &[web()]);
    assert_eq!(v.len(), expected, "{v:#?}");
}

#[test]
fn the_harness_own_kills_and_restores_are_excused() {
    // Recorded once the tree is dead: after its executor's record.
    let tree_killed = T::run()
        .start("web")
        .at(1000)
        .task_hit("web", TR_KILLING)
        .exit("web", TaskExit::Signal(9))
        .fault(
            "web",
            "hook.prekill.before.shutdown_delay",
            Action::Intervene(Intervention::KillTaskTree),
        );
    assert_eq!(check_kill_grace(&tree_killed.events, &[web()]), []);
    let restored = T::run()
        .start("web")
        .at(1000)
        .task_hit("web", TR_KILLING)
        .agent_restart(true)
        .exit("web", TaskExit::Signal(9));
    assert_eq!(check_kill_grace(&restored.events, &[web()]), []);
    let sigkill_is_its_signal = TaskShape {
        killed_by_sigkill: true,
        ..web()
    };
    let h = killed(0, TR_KILLING, TaskExit::Signal(9), 250);
    assert_eq!(check_kill_grace(&h.events, &[sigkill_is_its_signal]), []);
}

#[test]
fn each_update_halves_the_kill_timeout() {
    let first = Duration::from_millis(400);
    assert_eq!(kill_timeout_of(first, 0), first);
    assert_eq!(kill_timeout_of(first, 2), Duration::from_millis(100));
    assert_eq!(kill_timeout_of(first, 64), Duration::ZERO);
}
