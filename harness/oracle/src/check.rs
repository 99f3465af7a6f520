//! Each invariant's check, and the run's judgement: every invariant of
//! [`ALL`] over one run's history. The top of the crate's checks: it
//! imports each check module, and none imports it.

use crate::execs::{
    check_layout_before_exec, check_no_exec_after_terminal, check_one_exec_per_attempt,
    check_started_tasks_end, InvariantConfig,
};
use crate::history::{Event, TaskRole, TaskShape};
use crate::invariant::{Invariant, Violation, ALL};
use crate::{kills, lifecycle, liveness, policy, restarts, updates};

impl Invariant {
    /// Its breaches in one run's `history`, of an alloc of `tasks`, with
    /// the fault points `config` names.
    pub fn check(
        self,
        history: &[Event],
        tasks: &[TaskShape],
        config: &InvariantConfig,
    ) -> Vec<Violation> {
        let names = |keep: fn(&TaskShape) -> bool| -> Vec<String> {
            (tasks.iter().filter(|t| keep(t)))
                .map(|t| t.name.clone())
                .collect()
        };
        match self {
            Invariant::LayoutBeforeExec => check_layout_before_exec(history),
            // Poststop tasks start after terminal, by design.
            Invariant::NoExecAfterTerminal => check_no_exec_after_terminal(
                history,
                &names(|t| t.role != TaskRole::Poststop),
                config,
            ),
            Invariant::OneExecPerAttempt => {
                check_one_exec_per_attempt(history, &names(|_| true), config)
            }
            Invariant::StartedTasksEnd => check_started_tasks_end(history),
            Invariant::NoRestartAfterCompletion => {
                lifecycle::check_no_restart_after_completion(history, tasks)
            }
            Invariant::NoExecAfterKill => lifecycle::check_no_exec_after_kill(history, tasks),
            Invariant::OneLiveTree => lifecycle::check_one_live_tree(history, tasks),
            Invariant::KillOrder => lifecycle::check_kill_order(history, tasks),
            Invariant::PoststopOnce => lifecycle::check_poststop_once(history, tasks),
            Invariant::StatusMatchesExits => lifecycle::check_status_matches_exits(history, tasks),
            Invariant::NoSurvivors => lifecycle::check_no_survivors(history),
            Invariant::RestartsMonotonic => lifecycle::check_restarts_monotonic(history),
            Invariant::StartOrder => lifecycle::check_start_order(history, tasks),
            Invariant::AttemptsWithinPolicy => {
                lifecycle::check_attempts_within_policy(history, tasks)
            }
            Invariant::ExitsObserved => lifecycle::check_exits_observed(history, tasks),
            Invariant::UpdatesWhole => updates::check_updates_whole(history, tasks),
            Invariant::RestartOrder => restarts::check_restart_order(history, tasks),
            Invariant::LaunchesAccounted => policy::check_launches_accounted(history, tasks),
            Invariant::CommandsTakeEffect => liveness::check_commands_take_effect(history, tasks),
            Invariant::RestartWindows => policy::check_restart_windows(history, tasks),
            Invariant::KillSignal => kills::check_kill_signal(history, tasks),
            Invariant::KillGrace => kills::check_kill_grace(history, tasks),
        }
    }
}

/// Every invariant, with the engine's default point names.
pub fn check(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    check_with(history, tasks, &InvariantConfig::default())
}

/// Every invariant, in [`ALL`]'s order.
pub fn check_with(
    history: &[Event],
    tasks: &[TaskShape],
    config: &InvariantConfig,
) -> Vec<Violation> {
    ALL.iter()
        .flat_map(|invariant| invariant.check(history, tasks, config))
        .collect()
}

/// The invariants [`Invariant::settled_at_exec`] over a part of a run's
/// history so far: what a run already broke for good.
pub fn check_settled(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let config = InvariantConfig::default();
    ALL.iter()
        .filter(|invariant| invariant.settled_at_exec())
        .flat_map(|invariant| invariant.check(history, tasks, &config))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{AllocStatus, TaskEventKind, TaskExit};
    use crate::timed_history::T;
    use taskgate_faults::points::TR_KILLING;

    fn names(v: &[Violation]) -> Vec<(Invariant, Option<&str>)> {
        v.iter().map(|v| (v.invariant, v.task.as_deref())).collect()
    }

    fn main_task(name: &str) -> TaskShape {
        TaskShape::new(name, TaskRole::Main { leader: false }, 0)
    }

    #[test]
    fn a_start_decided_after_the_alloc_went_terminal_breaks_that_invariant_only() {
        // The Nomad bug: the stop lands between the check and the driver start.
        let h = T::default()
            .hit("web:tr.start_condition_met")
            .stop()
            .hit("ar.update_received")
            .hit("ar.alloc_terminal")
            .hit("ar.alloc_state_set")
            .hit("web:tr.before_driver_start")
            .launch("web")
            .hit("ar.update_applied");
        assert_eq!(
            names(&check(&h.events, &[main_task("web")])),
            [(Invariant::NoExecAfterTerminal, Some("web"))]
        );
    }

    #[test]
    fn a_clean_history_passes_everything() {
        let observed = InvariantConfig {
            observed_terminal: Some("tr.observed_terminal".into()),
            ..Default::default()
        };
        let h = T::default()
            .hit("web:tr.before_driver_start")
            .launch("web")
            .task_event("web", TaskEventKind::Started, 1)
            .stop()
            .hit("ar.alloc_terminal")
            .hit("ar.alloc_state_set")
            .hit("web:tr.observed_terminal")
            .task_exec("web")
            .hit("ar.update_applied")
            .task_event("web", TaskEventKind::Killed, 1)
            .exit("web", TaskExit::Signal(15));
        assert_eq!(check_with(&h.events, &[main_task("web")], &observed), []);
    }

    /// One history that breaks many invariants: each is reported, in
    /// [`ALL`]'s order.
    #[test]
    fn check_runs_every_invariant_in_order() {
        let h = T::default()
            .start("web")
            .exit("web", TaskExit::Code(0))
            .agent_restart(false)
            .start_beside("web", &[1])
            .task_hit("web", TR_KILLING)
            .start("web")
            .restart_count("web", 1)
            .restart_count("web", 0)
            .survivors("web", &[1])
            .status(AllocStatus::Failed);
        let init = TaskShape::new("init", TaskRole::Prestart { sidecar: false }, 0);
        let mut got: Vec<Invariant> = check(&h.events, &[main_task("web"), init])
            .iter()
            .map(|v| v.invariant)
            .collect();
        got.dedup();
        assert_eq!(
            got,
            [
                Invariant::OneExecPerAttempt,
                Invariant::NoRestartAfterCompletion,
                Invariant::NoExecAfterKill,
                Invariant::OneLiveTree,
                Invariant::StatusMatchesExits,
                Invariant::NoSurvivors,
                Invariant::RestartsMonotonic,
                Invariant::StartOrder,
                Invariant::AttemptsWithinPolicy,
                Invariant::ExitsObserved,
                Invariant::LaunchesAccounted,
            ]
        );
    }

    /// Of a history that breaks many invariants, only a second tree beside
    /// a live one is settled the moment it execs; the same history up to
    /// just before that exec has broken nothing for good yet.
    #[test]
    fn only_what_an_exec_showed_is_settled() {
        let before = T::default()
            .start("web")
            .exit("web", TaskExit::Code(0))
            .agent_restart(false);
        let tasks = [main_task("web")];
        assert_eq!(check_settled(&before.events, &tasks), []);
        let after = before
            .start_beside("web", &[1])
            .task_hit("web", TR_KILLING)
            .start("web")
            .survivors("web", &[1])
            .status(AllocStatus::Failed);
        assert!(check(&after.events, &tasks).len() > 1);
        assert_eq!(
            names(&check_settled(&after.events, &tasks)),
            [(Invariant::OneLiveTree, Some("web"))]
        );
    }
}
