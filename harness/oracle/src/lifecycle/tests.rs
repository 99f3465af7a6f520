//! Each lifecycle invariant over recorded histories, holding and broken.

use super::*;
use crate::history::{ExecRecord, TaskExit};
use crate::identity::ExecIdentity;
use rstest::rstest;
use std::time::Duration;
use taskgate_faults::points::{
    AR_ALLOC_TERMINAL, TR_BEFORE_DRIVER_START, TR_BEFORE_PRESTART, TR_KILLING, TR_KILL_ASKED,
    TR_MAIN_EXITED,
};
use taskgate_faults::{Action, Hit, Intervention};

/// Builds histories the way the harness merges them.
#[derive(Default, Clone)]
struct H(Vec<Event>);

impl H {
    fn exec(mut self, identity: ExecIdentity, peers: &[i32]) -> Self {
        let seq = self.0.len() as u64 + 1;
        self.0.push(Event::Exec(ExecRecord {
            cgroup_peers: peers.to_vec(),
            ..ExecRecord::allowed(seq, identity)
        }));
        self
    }
    /// An executor launched for `task`, then its task's tree root exec'd.
    fn start(self, task: &str) -> Self {
        self.start_beside(task, &[])
    }
    fn start_beside(self, task: &str, peers: &[i32]) -> Self {
        let ids = |task: &str| {
            (
                ExecIdentity::Executor {
                    alloc_id: "a".into(),
                    task: task.into(),
                },
                ExecIdentity::Task {
                    alloc_id: "a".into(),
                    task: task.into(),
                },
            )
        };
        let (executor, tree) = ids(task);
        self.exec(executor, &[]).exec(tree, peers)
    }
    /// An executor of `task` launched while `peers` (executors of the
    /// same task) lived.
    fn executor_beside(mut self, task: &str, peers: &[i32]) -> Self {
        self = self.exec(
            ExecIdentity::Executor {
                alloc_id: "a".into(),
                task: task.into(),
            },
            &[],
        );
        if let Some(Event::Exec(r)) = self.0.last_mut() {
            r.executor_peers = peers.to_vec();
        }
        self
    }
    fn hit(mut self, name: String) -> Self {
        self.0.push(Event::FaultHit(Hit {
            seq: 0,
            point: name.parse().unwrap(),
            action: None,
            detail: None,
            at_us: 0,
        }));
        self
    }
    /// A hit stamped `at_us` into the run.
    fn timed(mut self, name: &str, at_us: u64) -> Self {
        self.0.push(Event::FaultHit(Hit {
            seq: 0,
            point: name.parse().unwrap(),
            action: None,
            detail: None,
            at_us,
        }));
        self
    }
    fn hit_with(mut self, name: &str, action: Action) -> Self {
        self.0.push(Event::FaultHit(Hit {
            seq: 0,
            point: name.parse().unwrap(),
            action: Some(action),
            detail: None,
            at_us: 0,
        }));
        self
    }
    fn kill(self, task: &str) -> Self {
        self.hit(scoped(Some(task), TR_KILLING))
    }
    fn kill_asked(self, task: &str) -> Self {
        self.hit(scoped(Some(task), TR_KILL_ASKED))
    }
    fn decided(self, task: &str) -> Self {
        self.hit(scoped(Some(task), TR_BEFORE_DRIVER_START))
    }
    fn user_restart(self, task: &str) -> Self {
        self.hit(scoped(
            Some(task),
            taskgate_faults::points::TR_RESTART_SIGNALED,
        ))
    }
    fn gave_up(self, task: &str) -> Self {
        self.hit(scoped(Some(task), TR_MAIN_EXITED))
    }
    fn exit(mut self, task: &str, exit: TaskExit) -> Self {
        self.0.push(Event::TaskExited {
            task: task.into(),
            exit,
        });
        self
    }
    fn restart(mut self, stop: bool) -> Self {
        self.0.push(Event::AgentRestarted { stop });
        self
    }
    fn stop(mut self) -> Self {
        self.0.push(Event::StopDelivered { seq: 0 });
        self
    }
    fn status(mut self, status: AllocStatus) -> Self {
        self.0.push(Event::AllocStatus(status));
        self
    }
    fn survivors(mut self, task: &str, pids: &[i32]) -> Self {
        self.0.push(Event::Survivors {
            task: task.into(),
            pids: pids.to_vec(),
        });
        self
    }
    fn count(mut self, task: &str, restarts: u32) -> Self {
        self.0.push(Event::RestartCount {
            task: task.into(),
            restarts,
        });
        self
    }
}

fn shape(name: &str, role: TaskRole, restart_attempts: u32) -> TaskShape {
    TaskShape::new(name, role, restart_attempts)
}

fn main_task(name: &str) -> TaskShape {
    shape(name, TaskRole::Main { leader: false }, 0)
}

fn names(v: &[Violation]) -> Vec<Invariant> {
    v.iter().map(|v| v.invariant).collect()
}

const OK: TaskExit = TaskExit::Code(0);
const FAILED: TaskExit = TaskExit::Code(1);

#[rstest]
#[case::completed_then_rerun(H::default().start("web").exit("web", OK).restart(false).start("web"), 1)]
#[case::completed_not_rerun(H::default().start("web").exit("web", OK).restart(false), 0)]
#[case::failed_then_retried(H::default().start("web").exit("web", FAILED).restart(false).start("web"), 0)]
#[case::retried_before_the_crash(H::default().start("web").exit("web", OK).start("web").restart(false).start("web"), 0)]
#[case::exit_0_a_restart_caused(H::default().start("web").hit("web:ex.peeked".into()).exit("web", OK).restart(false).start("web"), 0)]
#[case::completed_before_a_restart_peeked(H::default().start("web").exit("web", OK).hit("web:ex.peeked".into()).restart(false).start("web"), 1)]
#[case::peeked_on_an_earlier_attempt(H::default().start("web").hit("web:ex.peeked".into()).exit("web", FAILED).start("web").exit("web", OK).restart(false).start("web"), 1)]
fn no_restart_after_completion(#[case] h: H, #[case] expected: usize) {
    let v = check_no_restart_after_completion(&h.0, &[main_task("web")]);
    assert_eq!(v.len(), expected, "{v:#?}");
}

/// A user restart of all tasks after the restore brings a completed
/// prestart task back, as it must (`restart-order` requires it): its
/// launch is the restart's, not a re-run of a completed task.
#[test]
fn a_completed_task_a_user_restart_brings_back_is_not_rerun() {
    let init = shape("init", TaskRole::Prestart { sidecar: false }, 0);
    let h = H::default()
        .start("init")
        .exit("init", OK)
        .restart(false)
        .user_restart("init")
        .start("init");
    let v = check_no_restart_after_completion(&h.0, &[init]);
    assert!(v.is_empty(), "{v:#?}");
    // Without the restart, the same launch is a re-run.
    let h = H::default()
        .start("init")
        .exit("init", OK)
        .restart(false)
        .start("init");
    let init = shape("init", TaskRole::Prestart { sidecar: false }, 0);
    assert_eq!(check_no_restart_after_completion(&h.0, &[init]).len(), 1);
}

fn restarted_on_success(name: &str, role: TaskRole, restart_attempts: u32) -> TaskShape {
    TaskShape {
        restarts_on_success: true,
        ..shape(name, role, restart_attempts)
    }
}

/// A sidecar's or a service task's exit 0 is no completion: starting it
/// again after a restore is its restart.
#[rstest]
#[case::sidecar(TaskRole::Poststart { sidecar: true })]
#[case::service_main(TaskRole::Main { leader: false })]
fn a_task_restarted_on_success_is_not_judged_as_completed(#[case] role: TaskRole) {
    let h = H::default()
        .start("proxy")
        .exit("proxy", OK)
        .restart(false)
        .start("proxy");
    let task = restarted_on_success("proxy", role, 1);
    assert!(check_no_restart_after_completion(&h.0, &[task]).is_empty());
}

/// A service task's exits 0 use up its policy like failures: the one the
/// policy gave up on fails the alloc; one with attempts left that a stop
/// ended does not.
#[rstest]
#[case::policy_gave_up(1, AllocStatus::Failed, true)]
#[case::policy_gave_up_reported_complete(1, AllocStatus::Complete, false)]
#[case::attempts_left(2, AllocStatus::Complete, true)]
#[case::attempts_left_reported_failed(2, AllocStatus::Failed, false)]
fn a_service_tasks_last_success_fails_it_when_the_policy_gives_up(
    #[case] attempts: u32,
    #[case] reported: AllocStatus,
    #[case] holds: bool,
) {
    let h = H::default()
        .start("web")
        .exit("web", OK)
        .start("web")
        .exit("web", OK)
        .stop()
        .status(reported);
    let web = restarted_on_success("web", TaskRole::Main { leader: false }, attempts);
    let v = check_status_matches_exits(&h.0, &[web]);
    assert_eq!(v.is_empty(), holds, "{v:#?}");
}

#[rstest]
#[case::launched_after_kill(H::default().start("web").kill("web").start("web"), 1)]
#[case::killed_while_running(H::default().start("web").kill("web").exit("web", TaskExit::Signal(15)), 0)]
#[case::brought_back_by_a_restart_of_all_tasks(
    H::default().start("web").kill("web").exit("web", TaskExit::Signal(15)).user_restart("web").start("web"),
    0
)]
#[case::killed_again_after_it_came_back(
    H::default().start("web").kill("web").user_restart("web").start("web").kill("web").start("web"),
    1
)]
fn no_exec_after_kill(#[case] h: H, #[case] expected: usize) {
    assert_eq!(
        check_no_exec_after_kill(&h.0, &[main_task("web")]).len(),
        expected
    );
}

/// A runner told to die between attempts (in its restart delay, or waiting
/// for its start condition) never reaches `tr.killing`: the alloc runner's
/// `tr.kill_asked` tells when it was told, and a start it decided after
/// that never launches.
#[test]
fn no_exec_after_a_kill_asked_between_attempts() {
    let h = H::default()
        .start("web")
        .exit("web", FAILED)
        .kill_asked("web")
        .decided("web")
        .start("web");
    let v = check_no_exec_after_kill(&h.0, &[main_task("web")]);
    assert_eq!(v.len(), 1, "{v:#?}");
}

/// A start decided before the task was told may have been committed
/// first, and the kill path then kills it; one after an agent restart is
/// the new agent's, and one after a restart of all tasks is that
/// restart's.
#[rstest]
#[case::decided_before_it_was_told(
    H::default().start("web").exit("web", FAILED).decided("web").kill_asked("web").start("web")
)]
#[case::brought_back_by_a_restart_of_all_tasks(
    H::default().start("web").exit("web", FAILED).kill_asked("web").user_restart("web")
        .decided("web").start("web")
)]
#[case::told_by_an_agent_that_died(
    H::default().start("web").exit("web", FAILED).kill_asked("web").restart(false)
        .decided("web").start("web")
)]
fn a_launch_a_kill_asked_let_through(#[case] h: H) {
    let v = check_no_exec_after_kill(&h.0, &[main_task("web")]);
    assert!(v.is_empty(), "{v:#?}");
}

#[rstest]
#[case::second_tree_beside_the_first(H::default().start("web").start_beside("web", &[102]), 1)]
#[case::one_tree_at_a_time(H::default().start("web").exit("web", FAILED).start("web"), 0)]
#[case::a_second_executor_beside_the_first(H::default().start("web").executor_beside("web", &[101]), 1)]
#[case::one_executor_at_a_time(H::default().start("web").exit("web", FAILED).executor_beside("web", &[]), 0)]
fn one_live_tree(#[case] h: H, #[case] expected: usize) {
    let v = check_one_live_tree(&h.0, &[main_task("web")]);
    assert_eq!(v.len(), expected, "{v:#?}");
}

#[test]
fn a_child_exec_beside_its_own_tree_root_is_one_tree() {
    let tree = ExecIdentity::Task {
        alloc_id: "a".into(),
        task: "web".into(),
    };
    let h = H::default().start("web").exec(tree, &[102]);
    assert!(check_one_live_tree(&h.0, &[main_task("web")]).is_empty());
}

fn report_tasks() -> Vec<TaskShape> {
    vec![
        shape("leader", TaskRole::Main { leader: true }, 0),
        main_task("worker"),
        shape("proxy", TaskRole::Poststart { sidecar: true }, 0),
        shape("cleanup", TaskRole::Poststop, 0),
    ]
}

fn started() -> H {
    H::default().start("leader").start("worker").start("proxy")
}

#[rstest]
#[case::nomads_order(
    started().kill("leader").kill("worker").exit("leader", OK).exit("worker", OK)
        .kill("proxy").exit("proxy", OK).start("cleanup"),
    vec![]
)]
#[case::worker_before_leader(
    started().kill("worker").kill("leader").exit("leader", OK).exit("worker", OK)
        .kill("proxy").exit("proxy", OK).start("cleanup"),
    vec![Invariant::KillOrder]
)]
#[case::sidecar_with_the_mains(
    started().kill("leader").kill("worker").kill("proxy").exit("proxy", OK)
        .exit("leader", OK).exit("worker", OK).start("cleanup"),
    vec![Invariant::KillOrder, Invariant::KillOrder]
)]
#[case::poststop_too_early(
    started().kill("leader").kill("worker").exit("leader", OK).exit("worker", OK)
        .kill("proxy").start("cleanup").exit("proxy", OK),
    vec![Invariant::KillOrder]
)]
#[case::main_dead_before_the_restored_agent_kills_it(
    started().kill("leader").exit("leader", OK).restart(true).kill("leader").kill("worker")
        .exit("worker", OK).kill("proxy").exit("proxy", OK).start("cleanup"),
    vec![]
)]
#[case::each_agent_lifetime_on_its_own(
    started().kill("leader").restart(true).kill("worker").exit("leader", OK).exit("worker", OK)
        .kill("proxy").exit("proxy", OK).start("cleanup"),
    vec![]
)]
// The poststop task waits for every task's current tree: the exit of one a
// user restart's kill ended does not stand for the tree that replaced it.
#[case::poststop_before_a_restarted_tree_exited(
    started().user_restart("worker").exit("worker", OK).start("worker").kill("leader")
        .exit("leader", OK).kill("proxy").exit("proxy", OK).start("cleanup"),
    vec![Invariant::KillOrder]
)]
fn kill_order(#[case] h: H, #[case] expected: Vec<Invariant>) {
    let v = check_kill_order(&h.0, &report_tasks());
    assert_eq!(names(&v), expected, "{v:#?}");
}

/// A restored agent that is stopping takes no restart: a restart one of
/// its runners carries through (a dead agent's runner's) ends the task as
/// a kill does, so it keeps the stop's kill order.
#[test]
fn a_restart_carried_into_a_stop_keeps_the_kill_order() {
    let h = started()
        .restart(true)
        .user_restart("worker")
        .exit("worker", OK)
        .kill("leader")
        .exit("leader", OK)
        .kill("proxy")
        .exit("proxy", OK)
        .start("cleanup");
    let v = check_kill_order(&h.0, &report_tasks());
    assert_eq!(names(&v), [Invariant::KillOrder], "{v:#?}");
    let no_stop = started()
        .restart(false)
        .user_restart("worker")
        .exit("worker", OK)
        .kill("leader")
        .exit("leader", OK);
    assert_eq!(check_kill_order(&no_stop.0, &report_tasks()), []);
}

#[rstest]
#[case::once(H::default().start("web").exit("web", OK).start("cleanup").status(AllocStatus::Complete), 0)]
#[case::twice(
    H::default().start("web").exit("web", OK).start("cleanup").restart(true).start("cleanup")
        .status(AllocStatus::Complete),
    1
)]
#[case::never(H::default().start("web").exit("web", OK).status(AllocStatus::Complete), 1)]
#[case::nothing_ran(H::default().stop().status(AllocStatus::Complete), 0)]
fn poststop_once(#[case] h: H, #[case] expected: usize) {
    let tasks = [main_task("web"), shape("cleanup", TaskRole::Poststop, 0)];
    let v = check_poststop_once(&h.0, &tasks);
    assert_eq!(v.len(), expected, "{v:#?}");
}

#[rstest]
#[case::success_complete(H::default().start("web").exit("web", OK).status(AllocStatus::Complete), true)]
#[case::failure_reported_complete(H::default().start("web").exit("web", FAILED).status(AllocStatus::Complete), false)]
#[case::failure_failed(H::default().start("web").exit("web", FAILED).status(AllocStatus::Failed), true)]
#[case::retried_to_success(
    H::default().start("web").exit("web", FAILED).start("web").exit("web", OK).status(AllocStatus::Complete),
    true
)]
#[case::killed_is_not_failed(
    H::default().start("web").stop().kill("web").exit("web", TaskExit::Signal(15)).status(AllocStatus::Complete),
    true
)]
#[case::gave_up_before_the_stop(H::default().gave_up("web").stop().status(AllocStatus::Failed), true)]
#[case::gave_up_reported_complete(H::default().gave_up("web").stop().status(AllocStatus::Complete), false)]
#[case::stopped_before_it_ran(H::default().stop().gave_up("web").status(AllocStatus::Complete), true)]
#[case::executor_lost(
    H::default().start("web").hit_with("web:p", Action::Intervene(Intervention::KillExecutor))
        .status(AllocStatus::Failed),
    true
)]
#[case::executor_lost_reported_complete(
    H::default().start("web").hit_with("web:p", Action::Intervene(Intervention::KillExecutor))
        .status(AllocStatus::Complete),
    false
)]
#[case::executor_lost_then_restarted(
    H::default().start("web").hit_with("web:p", Action::Intervene(Intervention::KillExecutor))
        .start("web").stop().kill("web").exit("web", OK).status(AllocStatus::Complete),
    true
)]
#[case::died_after_the_peek_found_it_running(
    H::default().start("web").stop().hit("web:ex.peeked".into()).exit("web", FAILED).kill("web")
        .status(AllocStatus::Complete),
    true
)]
#[case::executor_lost_after_the_peek(
    H::default().start("web").stop().hit("web:ex.peeked".into())
        .hit_with("web:tr.killing", Action::Intervene(Intervention::KillExecutor))
        .status(AllocStatus::Complete),
    true
)]
#[case::failed_before_the_peek_reported_complete(
    H::default().start("web").stop().exit("web", FAILED).hit("web:ex.peeked".into()).kill("web")
        .status(AllocStatus::Complete),
    false
)]
#[case::not_finished(H::default().start("web").exit("web", FAILED).status(AllocStatus::Running), true)]
#[case::restarted_by_a_user_then_stopped_before_it_came_back(
    H::default().start("web").user_restart("web").exit("web", TaskExit::Signal(15)).stop()
        .status(AllocStatus::Complete),
    true
)]
// The restart's attempt is judged by what told it: its own kill or peek,
// not the restart that brought it on.
#[case::the_restarts_attempt_failed_on_its_own(
    restarted_by_a_user().exit("web", FAILED).status(AllocStatus::Failed),
    true
)]
#[case::the_restarts_attempt_killed(
    restarted_by_a_user().stop().kill("web").exit("web", FAILED).status(AllocStatus::Complete),
    true
)]
#[case::the_restarts_attempt_peeked(
    restarted_by_a_user().stop().hit("web:ex.peeked".into()).exit("web", FAILED)
        .status(AllocStatus::Complete),
    true
)]
#[case::the_restarts_attempt_lost(
    restarted_by_a_user().hit_with("web:p", Action::Intervene(Intervention::KillExecutor))
        .status(AllocStatus::Failed),
    true
)]
fn status_matches_exits(#[case] h: H, #[case] holds: bool) {
    let v = check_status_matches_exits(&h.0, &[main_task("web")]);
    assert_eq!(v.is_empty(), holds, "{v:#?}");
}

/// An executor the harness killed after its task's exit was recorded (in
/// the task's exited hooks) took no result with it: the engine had the
/// exit 0, and the alloc is complete. Killed before any exit, it is lost.
#[test]
fn an_executor_killed_after_its_tasks_exit_loses_nothing() {
    let kill = Action::Intervene(Intervention::KillExecutor);
    let h = H::default()
        .start("web")
        .exit("web", OK)
        .hit_with("web:hook.exited.before.executor_shutdown", kill.clone())
        .gave_up("web")
        .status(AllocStatus::Complete);
    let v = check_status_matches_exits(&h.0, &[main_task("web")]);
    assert!(v.is_empty(), "{v:#?}");
    let lost = H::default()
        .start("web")
        .hit_with("web:hook.exited.before.executor_shutdown", kill.clone())
        .gave_up("web")
        .status(AllocStatus::Complete);
    let v = check_status_matches_exits(&lost.0, &[main_task("web")]);
    assert_eq!(v.len(), 1, "an executor lost before any exit: {v:#?}");
    // An exit while no agent ran, its executor killed before the restored
    // agent took it: lost to the engine, which rightly fails the alloc.
    let untaken = |status| {
        H::default()
            .start("web")
            .restart(false)
            .exit("web", OK)
            .hit_with("web:tr.restoring", kill.clone())
            .gave_up("web")
            .status(status)
    };
    let failed = untaken(AllocStatus::Failed);
    assert_eq!(
        check_status_matches_exits(&failed.0, &[main_task("web")]),
        []
    );
    let complete = untaken(AllocStatus::Complete);
    let v = check_status_matches_exits(&complete.0, &[main_task("web")]);
    assert_eq!(v.len(), 1, "an exit the engine never took: {v:#?}");
}

/// A poststart sidecar told to die before its start condition was met,
/// the batch alloc's main task having completed first: it never ran, and
/// that is no failure (the engine reports the alloc complete, as Nomad
/// does). One that gave up untold is still a failure.
#[rstest]
#[case::told_to_die_unstarted(
    H::default().start("web").exit("web", OK).kill_asked("logship").gave_up("logship")
        .status(AllocStatus::Complete),
    true
)]
#[case::gave_up_untold(
    H::default().start("web").exit("web", OK).gave_up("logship").status(AllocStatus::Complete),
    false
)]
#[case::told_after_it_gave_up(
    H::default().start("web").exit("web", OK).gave_up("logship").kill_asked("logship")
        .status(AllocStatus::Complete),
    false
)]
fn a_sidecar_killed_before_its_start_fails_nothing(#[case] h: H, #[case] holds: bool) {
    let tasks = [
        main_task("web"),
        shape("logship", TaskRole::Poststart { sidecar: true }, 0),
    ];
    let v = check_status_matches_exits(&h.0, &tasks);
    assert_eq!(v.is_empty(), holds, "{v:#?}");
}

/// web's first attempt taken down by a user restart, and the restart's
/// attempt launched (outside the policy, which has no attempt to give).
fn restarted_by_a_user() -> H {
    H::default()
        .start("web")
        .user_restart("web")
        .exit("web", TaskExit::Signal(15))
        .start("web")
}

/// A kill, a restart or a peek tells only the attempt it reached: the
/// restart's attempt failed on its own, so the alloc failed, and a
/// Complete hides it.
#[test]
fn an_earlier_attempts_restart_excuses_no_later_failure() {
    let h = restarted_by_a_user()
        .exit("web", FAILED)
        .status(AllocStatus::Complete);
    let v = check_status_matches_exits(&h.0, &[main_task("web")]);
    assert_eq!(
        v.len(),
        1,
        "the restart of attempt 1 excused attempt 2's failure: {v:#?}"
    );
}

/// An executor lost with an attempt left in the policy, then a stop: the
/// stop ended the task (in its restart delay), no failure; with none
/// left, the loss failed it.
#[rstest]
#[case::an_attempt_left(1, false, AllocStatus::Complete)]
#[case::none_left(0, false, AllocStatus::Failed)]
#[case::found_by_an_agent_restored_to_stop(0, true, AllocStatus::Complete)]
fn a_lost_executor_fails_the_alloc_only_when_the_policy_gives_up(
    #[case] attempts: u32,
    #[case] restored_to_stop: bool,
    #[case] reported: AllocStatus,
) {
    let h = H::default()
        .start("web")
        .hit_with("web:p", Action::Intervene(Intervention::KillExecutor));
    let h = if restored_to_stop {
        h.restart(true)
    } else {
        h.stop()
    };
    let h = h.status(reported);
    let web = shape("web", TaskRole::Main { leader: false }, attempts);
    let v = check_status_matches_exits(&h.0, &[web]);
    assert!(v.is_empty(), "{v:#?}");
}

/// web's runner decides on an attempt: its driver start.
fn decided(h: H) -> H {
    h.hit(scoped(Some("web"), TR_BEFORE_DRIVER_START))
}

/// web's executor launched; it never exec'd the task.
fn launched(h: H) -> H {
    h.executor_beside("web", &[])
}

/// An attempt of web decided, whose executor never exec'd the task.
fn launch_failed(h: H) -> H {
    launched(decided(h))
}

/// A stop delivered and made the alloc terminal.
fn stopped(h: H) -> H {
    h.stop().hit(AR_ALLOC_TERMINAL.into())
}

/// A start that failed (its executor never exec'd the task, or its setup
/// failed) is the policy's to judge, stop or no stop: with no attempt left
/// it fails the alloc, as Nomad's does; with one left, a stop ends the task
/// between attempts. Not a start decided once the alloc was terminal: a
/// correct engine never makes it, so its end is the stop's.
#[rstest]
#[case::after_the_stop_none_left(
    0,
    launched(stopped(decided(H::default()))),
    AllocStatus::Failed,
    true
)]
#[case::after_the_stop_reported_complete(
    0,
    launched(stopped(decided(H::default()))),
    AllocStatus::Complete,
    false
)]
#[case::after_the_stop_one_left(
    1,
    launched(stopped(decided(H::default()))),
    AllocStatus::Complete,
    true
)]
#[case::after_the_stop_one_left_reported_failed(
    1,
    launched(stopped(decided(H::default()))),
    AllocStatus::Failed,
    false
)]
#[case::the_second_of_two_none_left(
    1,
    launched(stopped(decided(launch_failed(H::default())))),
    AllocStatus::Failed,
    true
)]
#[case::the_second_of_two_reported_complete(
    1,
    launched(stopped(decided(launch_failed(H::default())))),
    AllocStatus::Complete,
    false
)]
#[case::no_stop_after_a_failed_exit(
    1,
    launch_failed(H::default().start("web").exit("web", FAILED)),
    AllocStatus::Failed,
    true
)]
#[case::setup_failed_after_the_stop(
    0,
    stopped(H::default().hit(scoped(Some("web"), TR_BEFORE_PRESTART)))
        .hit_with("web:hook.prestart.before.task_dir", Action::Error),
    AllocStatus::Failed,
    true
)]
#[case::decided_after_the_alloc_was_terminal(
    0,
    launch_failed(stopped(H::default())),
    AllocStatus::Complete,
    true
)]
#[case::decided_after_the_alloc_was_terminal_reported_failed(
    0,
    launch_failed(stopped(H::default())),
    AllocStatus::Failed,
    false
)]
#[case::its_task_ran_and_was_killed(
    0,
    stopped(decided(H::default()).start("web")).kill("web").exit("web", TaskExit::Signal(15)),
    AllocStatus::Complete,
    true
)]
#[case::its_exit_recorded_without_an_exec(
    0,
    stopped(launch_failed(H::default())).kill("web").exit("web", TaskExit::Signal(2)),
    AllocStatus::Complete,
    true
)]
#[case::brought_on_by_a_user_restart(
    0,
    launch_failed(H::default().start("web").user_restart("web").exit("web", TaskExit::Signal(15))),
    AllocStatus::Failed,
    true
)]
#[case::found_by_an_agent_restored_to_stop(
    0,
    launch_failed(decided(H::default())).restart(true),
    AllocStatus::Complete,
    true
)]
fn a_start_that_failed_is_the_policys(
    #[case] attempts: u32,
    #[case] h: H,
    #[case] reported: AllocStatus,
    #[case] holds: bool,
) {
    let h = h.gave_up("web").status(reported);
    let web = shape("web", TaskRole::Main { leader: false }, attempts);
    let v = check_status_matches_exits(&h.0, &[web]);
    assert_eq!(v.is_empty(), holds, "{v:#?}");
}

/// A runner the harness panicked fails its task, stop or no stop and
/// whatever its policy; a panic the runner never meets (an update hook's,
/// inside the hooks' guard; a point the alloc runner reaches) does not.
#[rstest]
#[case::at_a_prekill_hook("web:hook.prekill.before.shutdown_delay", AllocStatus::Failed)]
#[case::at_a_boundary("web:tr.before_prestart", AllocStatus::Failed)]
#[case::inside_the_update_guard("web:hook.update.before.task_env", AllocStatus::Complete)]
#[case::at_the_alloc_runners_point("web:tr.kill_asked", AllocStatus::Complete)]
fn a_runner_the_harness_panicked_fails_its_task(#[case] point: &str, #[case] status: AllocStatus) {
    let h = H::default()
        .start("web")
        .stop()
        .hit_with(point, Action::Panic)
        .kill("web")
        .exit("web", TaskExit::Signal(9))
        .status(status);
    let web = shape("web", TaskRole::Main { leader: false }, 3);
    let v = check_status_matches_exits(&h.0, &[web]);
    assert!(v.is_empty(), "{v:#?}");
}

/// web ran and failed, and its next attempt was committed by an agent
/// killed before it launched it: the next agent finds it lost.
fn committed_by_a_killed_agent() -> H {
    H::default().start("web").exit("web", FAILED).hit(scoped(
        Some("web"),
        taskgate_faults::points::TR_START_COMMITTED,
    ))
}

/// An attempt a killed agent committed, lost at restore, used a restart
/// of the policy: the next failure is the last.
#[rstest]
#[case::reported_failed(AllocStatus::Failed, true)]
#[case::reported_complete(AllocStatus::Complete, false)]
fn a_lost_commit_uses_a_restart(#[case] reported: AllocStatus, #[case] holds: bool) {
    let h = committed_by_a_killed_agent()
        .restart(false)
        .start("web")
        .exit("web", FAILED)
        .status(reported);
    let web = shape("web", TaskRole::Main { leader: false }, 2);
    let v = check_status_matches_exits(&h.0, &[web]);
    assert_eq!(v.is_empty(), holds, "{v:#?}");
}

/// The restored agent counts an attempt lost at its commit, like any
/// failed start: the policy's last fails the alloc, an earlier run or not;
/// one with an attempt left, or found by an agent restored to stop, or
/// after a stop, fails nothing; one the agent that found it told to die
/// (maybe first) may have failed or not.
#[rstest]
#[case::the_policys_last(1, committed_by_a_killed_agent().restart(false), AllocStatus::Failed, true)]
#[case::the_policys_last_reported_complete(
    1,
    committed_by_a_killed_agent().restart(false),
    AllocStatus::Complete,
    false
)]
#[case::attempts_left(2, committed_by_a_killed_agent().restart(false), AllocStatus::Complete, true)]
#[case::found_by_an_agent_restored_to_stop(
    1,
    committed_by_a_killed_agent().restart(true),
    AllocStatus::Complete,
    true
)]
#[case::found_after_a_stop(
    1,
    committed_by_a_killed_agent().stop().restart(false),
    AllocStatus::Complete,
    true
)]
#[case::told_to_die_by_the_restored_agent(
    1,
    committed_by_a_killed_agent().restart(false).kill_asked("web"),
    AllocStatus::Complete,
    true
)]
#[case::told_to_die_by_the_restored_agent_reported_failed(
    1,
    committed_by_a_killed_agent().restart(false).kill_asked("web"),
    AllocStatus::Failed,
    true
)]
fn an_attempt_lost_at_its_commit_is_a_failed_start(
    #[case] attempts: u32,
    #[case] h: H,
    #[case] reported: AllocStatus,
    #[case] holds: bool,
) {
    let h = h.status(reported);
    let web = shape("web", TaskRole::Main { leader: false }, attempts);
    let v = check_status_matches_exits(&h.0, &[web]);
    assert_eq!(v.is_empty(), holds, "{v:#?}");
}

#[rstest]
#[case::fail_mode_last_attempt(shape("web", TaskRole::Main { leader: false }, 1), AllocStatus::Failed)]
#[case::fail_mode_attempts_left(shape("web", TaskRole::Main { leader: false }, 2), AllocStatus::Complete)]
#[case::delay_mode(TaskShape { restarts_forever: true, ..shape("web", TaskRole::Main { leader: false }, 1) }, AllocStatus::Complete)]
fn a_failed_exit_fails_the_alloc_only_when_the_policy_gives_up(
    #[case] task: TaskShape,
    #[case] reported: AllocStatus,
) {
    let h = H::default()
        .start("web")
        .exit("web", FAILED)
        .start("web")
        .exit("web", FAILED)
        .stop()
        .status(reported);
    let v = check_status_matches_exits(&h.0, &[task]);
    assert!(v.is_empty(), "{v:#?}");
}

#[rstest]
#[case::nothing_left(H::default().survivors("web", &[]), 0)]
#[case::a_tree_left(H::default().survivors("web", &[7, 8]).survivors("db", &[]), 1)]
fn no_survivors(#[case] h: H, #[case] expected: usize) {
    assert_eq!(check_no_survivors(&h.0).len(), expected);
}

#[rstest]
#[case::grows(H::default().count("web", 1).count("web", 2).count("db", 0), 0)]
#[case::forgotten(H::default().count("web", 2).count("web", 0), 1)]
fn restarts_monotonic(#[case] h: H, #[case] expected: usize) {
    assert_eq!(check_restarts_monotonic(&h.0).len(), expected);
}

fn init_job() -> Vec<TaskShape> {
    vec![
        shape("init", TaskRole::Prestart { sidecar: false }, 0),
        shape("proxy", TaskRole::Prestart { sidecar: true }, 0),
        main_task("web"),
        shape("logs", TaskRole::Poststart { sidecar: true }, 0),
    ]
}

#[rstest]
#[case::in_order(
    H::default().start("init").exit("init", OK).start("proxy").start("web").start("logs"),
    vec![])]
#[case::main_before_init_exited(
    H::default().start("init").start("proxy").start("web").exit("init", OK).start("logs"),
    vec!["web"])]
#[case::init_failed(
    H::default().start("init").exit("init", FAILED).start("proxy").start("web").start("logs"),
    vec!["web", "logs"])]
#[case::init_skipped_after_a_restore(
    H::default().restart(false).start("proxy").start("web").start("logs"),
    vec!["web", "logs"])]
#[case::main_before_its_prestart_sidecar(
    H::default().start("init").exit("init", OK).start("web").start("proxy").start("logs"),
    vec!["web"])]
#[case::poststart_before_main(
    H::default().start("init").exit("init", OK).start("proxy").start("logs").start("web"),
    vec!["logs"])]
#[case::restarted_main_after_init(
    H::default().start("init").exit("init", OK).start("proxy").start("web").start("logs")
        .exit("web", FAILED).start("web"),
    vec![])]
fn start_order(#[case] h: H, #[case] early: Vec<&str>) {
    let v = check_start_order(&h.0, &init_job());
    let mut tasks: Vec<&str> = v.iter().filter_map(|v| v.task.as_deref()).collect();
    tasks.dedup();
    assert_eq!(tasks, early, "{v:?}");
}

#[rstest]
#[case::within(shape("web", TaskRole::Main { leader: false }, 1), 2, 0)]
#[case::one_too_many(shape("web", TaskRole::Main { leader: false }, 1), 3, 1)]
#[case::delay_mode_is_unbounded(TaskShape { restarts_forever: true, ..shape("web", TaskRole::Main { leader: false }, 1) }, 5, 0)]
#[case::poststop_is_bounded_elsewhere(shape("web", TaskRole::Poststop, 0), 2, 0)]
fn attempts_within_policy(#[case] task: TaskShape, #[case] runs: usize, #[case] expected: usize) {
    let mut h = H::default();
    for _ in 0..runs {
        h = h.start("web").exit("web", FAILED);
    }
    assert_eq!(check_attempts_within_policy(&h.0, &[task]).len(), expected);
}

/// A restart window that passed within the run grants the policy's
/// attempts again (the runs here are a second apart).
#[rstest]
#[case::one_window(Duration::MAX, 3, 1)]
#[case::two_windows(Duration::from_millis(1500), 3, 0)]
#[case::too_many_for_three(Duration::from_millis(1500), 5, 1)]
fn attempts_within_policy_per_window(
    #[case] interval: Duration,
    #[case] runs: u64,
    #[case] expected: usize,
) {
    let mut h = H::default().timed(taskgate_faults::points::AR_STARTED, 0);
    for n in 0..runs {
        h = h
            .timed("web:tr.start_condition_met", n * 1_000_000)
            .start("web")
            .exit("web", FAILED);
    }
    let web = TaskShape {
        restart_interval: interval,
        ..shape("web", TaskRole::Main { leader: false }, 1)
    };
    assert_eq!(check_attempts_within_policy(&h.0, &[web]).len(), expected);
}

/// A user restart is not counted against the policy: each one grants a run.
#[rstest]
#[case::one_restart_one_run_more(1, 0)]
#[case::a_run_beyond_it(0, 1)]
fn a_user_restart_grants_a_run(#[case] restarts: usize, #[case] expected: usize) {
    let mut h = H::default().start("web");
    for _ in 0..restarts {
        h = h.user_restart("web");
    }
    h = h
        .exit("web", TaskExit::Signal(15))
        .start("web")
        .exit("web", FAILED);
    let web = shape("web", TaskRole::Main { leader: false }, 0);
    assert_eq!(check_attempts_within_policy(&h.0, &[web]).len(), expected);
}

#[rstest]
#[case::each_exit_recorded(H::default().start("web").exit("web", FAILED).start("web").exit("web", OK), 0)]
#[case::destroyed_behind_its_executor(H::default().start("web").start("web").exit("web", OK), 1)]
#[case::never_reaped(H::default().start("web"), 1)]
#[case::the_harness_killed_its_executor(
    H::default().start("web").hit_with("web:ex.after_mounts", Action::Intervene(Intervention::KillExecutor)).start("web").exit("web", OK),
    0)]
#[case::executor_died_before_the_task(
    H::default().exec(ExecIdentity::Executor { alloc_id: "a".into(), task: "web".into() }, &[]).start("web").exit("web", OK),
    0)]
fn exits_observed(#[case] h: H, #[case] expected: usize) {
    assert_eq!(
        check_exits_observed(&h.0, &[main_task("web")]).len(),
        expected
    );
}
