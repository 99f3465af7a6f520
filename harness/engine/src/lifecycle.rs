//! The lifecycle rules of an allocation's tasks, as Nomad's task hook
//! coordinator has them, as pure functions of the tasks' states: which
//! start conditions are open, and why the coordinator kills tasks on its
//! own. The alloc runner applies them; the tables below pin them down.

use crate::alloc::ClientStatus;
use crate::job::{LifecycleHook, Task};
use crate::task_state::{Outcome, TaskState};

/// When in an allocation's life a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Before the main tasks; a sidecar keeps running beside them.
    Prestart { sidecar: bool },
    /// The main tasks (no `lifecycle` block).
    Main,
    /// Once every main task runs.
    Poststart { sidecar: bool },
    /// Once every other task is dead, even after the alloc was stopped.
    Poststop,
}

impl Stage {
    pub fn of(task: &Task) -> Stage {
        match &task.lifecycle {
            None => Stage::Main,
            Some(l) => match l.hook {
                LifecycleHook::Prestart => Stage::Prestart { sidecar: l.sidecar },
                LifecycleHook::Poststart => Stage::Poststart { sidecar: l.sidecar },
                LifecycleHook::Poststop => Stage::Poststop,
            },
        }
    }

    fn is_sidecar(self) -> bool {
        matches!(
            self,
            Stage::Prestart { sidecar: true } | Stage::Poststart { sidecar: true }
        )
    }
}

/// What the rules need to know of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub stage: Stage,
    pub leader: bool,
    pub state: TaskState,
}

impl Member {
    pub fn of(task: &Task, state: TaskState) -> Member {
        Member {
            stage: Stage::of(task),
            leader: task.leader,
            state,
        }
    }
}

/// Whether a task's process was started (running, or dead after running).
fn started(state: &TaskState) -> bool {
    match state {
        TaskState::Running { .. } => true,
        TaskState::Dead { outcome } => !matches!(
            outcome,
            Outcome::NeverStarted { .. } | Outcome::Failed { .. }
        ),
        TaskState::Pending => false,
    }
}

fn succeeded(state: &TaskState) -> bool {
    matches!(
        state,
        TaskState::Dead {
            outcome: Outcome::Exited { failed: false, .. }
        }
    )
}

/// Whether a task of `stage` may start, given every task of the alloc:
/// prestart tasks at once; main tasks once every ephemeral prestart task
/// succeeded and every prestart sidecar started; poststart tasks once, in
/// addition, every main task started; poststop tasks once all else is dead.
pub fn may_start(stage: Stage, all: &[Member]) -> bool {
    let prestart_done = || {
        all.iter().all(|m| match m.stage {
            Stage::Prestart { sidecar: true } => started(&m.state),
            Stage::Prestart { sidecar: false } => succeeded(&m.state),
            _ => true,
        })
    };
    let main_started = || {
        all.iter()
            .filter(|m| m.stage == Stage::Main)
            .all(|m| started(&m.state))
    };
    match stage {
        Stage::Prestart { .. } => true,
        Stage::Main => prestart_done(),
        Stage::Poststart { .. } => prestart_done() && main_started(),
        Stage::Poststop => all
            .iter()
            .filter(|m| m.stage != Stage::Poststop)
            .all(|m| m.state.is_dead()),
    }
}

/// Why the coordinator kills tasks on its own (not for an update).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// A task failed for good: its siblings are killed.
    SiblingFailed,
    /// The leader died: Nomad kills every other task.
    LeaderDead,
    /// Every main task finished: sidecars have nothing left to serve.
    MainTasksDone,
}

impl KillReason {
    /// Whether this reason kills a task of `stage` (poststop tasks are
    /// never killed: they run after everything else).
    pub fn targets(self, stage: Stage) -> bool {
        stage != Stage::Poststop && (self != KillReason::MainTasksDone || stage.is_sidecar())
    }
}

/// The first reason, in this order, that holds for the alloc's tasks.
pub fn kill_reason(all: &[Member]) -> Option<KillReason> {
    let failed = |s: &TaskState| matches!(s, TaskState::Dead { outcome } if outcome.failed());
    if all
        .iter()
        .any(|m| m.stage != Stage::Poststop && failed(&m.state))
    {
        return Some(KillReason::SiblingFailed);
    }
    if all.iter().any(|m| m.leader && m.state.is_dead()) {
        return Some(KillReason::LeaderDead);
    }
    let mut mains = all
        .iter()
        .filter(|m| matches!(m.stage, Stage::Main | Stage::Poststart { sidecar: false }))
        .peekable();
    if mains.peek().is_some() && mains.all(|m| m.state.is_dead()) {
        return Some(KillReason::MainTasksDone);
    }
    None
}

/// Nomad's client status while the alloc lives (its `getClientStatus`
/// before the end): running while any task runs, pending otherwise. Complete
/// or failed is decided once every task is dead; Nomad says failed at the
/// first failed task, while here the siblings' kill path is still at work.
pub fn live_client_status(all: &[Member]) -> ClientStatus {
    if all
        .iter()
        .any(|m| matches!(m.state, TaskState::Running { .. }))
    {
        ClientStatus::Running
    } else {
        ClientStatus::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use taskgate_executor::ExitResult;

    const PRE: Stage = Stage::Prestart { sidecar: false };
    const PRE_SIDE: Stage = Stage::Prestart { sidecar: true };
    const POST: Stage = Stage::Poststart { sidecar: false };
    const POST_SIDE: Stage = Stage::Poststart { sidecar: true };
    const MAIN: Stage = Stage::Main;
    const STOP: Stage = Stage::Poststop;

    fn exited(failed: bool) -> TaskState {
        TaskState::Dead {
            outcome: Outcome::Exited {
                result: ExitResult {
                    exit_code: Some(failed as i32),
                    signal: None,
                    oom_killed: false,
                    started_at_ms: 0,
                    exited_at_ms: 0,
                },
                failed,
            },
        }
    }

    /// A one-letter state: P pending, R running, S succeeded, F failed
    /// (exited non-zero), K killed, N never started.
    fn state(c: char) -> TaskState {
        match c {
            'P' => TaskState::Pending,
            'R' => TaskState::Running { attempt: 1 },
            'S' => exited(false),
            'F' => exited(true),
            'K' => TaskState::Dead {
                outcome: Outcome::Killed { result: None },
            },
            'N' => TaskState::Dead {
                outcome: Outcome::NeverStarted {
                    reason: "stopped".into(),
                },
            },
            other => panic!("no state {other:?}"),
        }
    }

    fn alloc(members: &[(Stage, bool, char)]) -> Vec<Member> {
        members
            .iter()
            .map(|&(stage, leader, s)| Member {
                stage,
                leader,
                state: state(s),
            })
            .collect()
    }

    #[rstest]
    #[case::prestart_starts_at_once(PRE, &[(PRE, false, 'P'), (MAIN, false, 'P')], true)]
    #[case::main_waits_for_prestart(MAIN, &[(PRE, false, 'R'), (MAIN, false, 'P')], false)]
    #[case::main_after_prestart_succeeded(MAIN, &[(PRE, false, 'S'), (MAIN, false, 'P')], true)]
    #[case::failed_prestart_blocks_main(MAIN, &[(PRE, false, 'F'), (MAIN, false, 'P')], false)]
    #[case::main_beside_a_running_prestart_sidecar(MAIN, &[(PRE_SIDE, false, 'R'), (MAIN, false, 'P')], true)]
    #[case::main_waits_for_prestart_sidecar(MAIN, &[(PRE_SIDE, false, 'P'), (MAIN, false, 'P')], false)]
    #[case::poststart_waits_for_main(POST_SIDE, &[(MAIN, true, 'P'), (POST_SIDE, false, 'P')], false)]
    #[case::poststart_once_main_runs(POST_SIDE, &[(MAIN, true, 'R'), (POST_SIDE, false, 'P')], true)]
    #[case::poststart_not_after_main_never_started(POST, &[(MAIN, false, 'N'), (POST, false, 'P')], false)]
    #[case::poststart_after_main_exited(POST, &[(MAIN, false, 'S'), (POST, false, 'P')], true)]
    #[case::poststop_waits_for_all(STOP, &[(MAIN, false, 'K'), (POST_SIDE, false, 'R'), (STOP, false, 'P')], false)]
    #[case::poststop_once_all_dead(STOP, &[(MAIN, false, 'K'), (POST_SIDE, false, 'N'), (STOP, false, 'P')], true)]
    fn start_conditions(
        #[case] stage: Stage,
        #[case] all: &[(Stage, bool, char)],
        #[case] open: bool,
    ) {
        assert_eq!(may_start(stage, &alloc(all)), open);
    }

    #[rstest]
    #[case::all_running(&[(MAIN, true, 'R'), (POST_SIDE, false, 'R')], None)]
    #[case::leader_exited(&[(MAIN, true, 'S'), (MAIN, false, 'R'), (POST_SIDE, false, 'R')], Some(KillReason::LeaderDead))]
    #[case::a_sibling_failed(&[(MAIN, true, 'R'), (MAIN, false, 'F')], Some(KillReason::SiblingFailed))]
    #[case::failure_outranks_a_dead_leader(&[(MAIN, true, 'K'), (MAIN, false, 'F')], Some(KillReason::SiblingFailed))]
    #[case::mains_done_sidecar_runs(&[(MAIN, false, 'S'), (POST_SIDE, false, 'R')], Some(KillReason::MainTasksDone))]
    #[case::one_main_still_runs(&[(MAIN, false, 'S'), (MAIN, false, 'R'), (POST_SIDE, false, 'R')], None)]
    #[case::ephemeral_poststart_counts_as_main(&[(MAIN, false, 'S'), (POST, false, 'R'), (PRE_SIDE, false, 'R')], None)]
    #[case::failed_poststop_kills_nothing(&[(MAIN, false, 'S'), (STOP, false, 'F')], Some(KillReason::MainTasksDone))]
    #[case::only_sidecars(&[(PRE_SIDE, false, 'R')], None)]
    fn kill_reasons(#[case] all: &[(Stage, bool, char)], #[case] reason: Option<KillReason>) {
        assert_eq!(kill_reason(&alloc(all)), reason);
    }

    #[rstest]
    #[case::nothing_started(&[(PRE, false, 'P'), (MAIN, false, 'P')], ClientStatus::Pending)]
    #[case::a_prestart_runs(&[(PRE, false, 'R'), (MAIN, false, 'P')], ClientStatus::Running)]
    #[case::restarting_while_the_rest_is_dead(&[(MAIN, false, 'P'), (POST_SIDE, false, 'K')], ClientStatus::Pending)]
    #[case::one_of_many_runs(&[(MAIN, false, 'S'), (MAIN, false, 'R'), (STOP, false, 'P')], ClientStatus::Running)]
    fn live_status(#[case] all: &[(Stage, bool, char)], #[case] status: ClientStatus) {
        assert_eq!(live_client_status(&alloc(all)), status);
    }

    #[rstest]
    #[case::sidecar_goes_when_mains_are_done(KillReason::MainTasksDone, POST_SIDE, true)]
    #[case::main_stays_when_mains_are_done(KillReason::MainTasksDone, MAIN, false)]
    #[case::leader_death_takes_the_mains(KillReason::LeaderDead, MAIN, true)]
    #[case::poststop_is_never_killed(KillReason::SiblingFailed, STOP, false)]
    fn kill_targets(#[case] reason: KillReason, #[case] stage: Stage, #[case] killed: bool) {
        assert_eq!(reason.targets(stage), killed);
    }
}
