//! The restart invariant over recorded histories, holding and broken.

use super::*;
use crate::gate::{Answer, ExecRecord};
use crate::identity::ExecIdentity;
use crate::invariants::TaskExit;
use rstest::rstest;
use taskgate_faults::points::TR_RESTART_SIGNALED;
use taskgate_faults::Hit;

/// Histories as the harness merges them, one call per record.
#[derive(Default, Clone)]
struct H(Vec<Event>);

impl H {
    fn push(mut self, event: Event) -> Self {
        self.0.push(event);
        self
    }
    fn hit(self, name: String, detail: Option<Detail>) -> Self {
        self.push(Event::FaultHit(Hit {
            seq: 0,
            point: name.parse().unwrap(),
            action: None,
            detail,
            at_us: 0,
        }))
    }
    fn exec(self, identity: ExecIdentity) -> Self {
        let seq = self.0.len() as u64;
        self.push(Event::Exec(ExecRecord {
            seq,
            pid: 100 + seq as i32,
            exe: "/marked/bin/busybox".into(),
            identity,
            verdict: Answer::Allow,
            reason: String::new(),
            judged: true,
            cgroup_peers: Vec::new(),
            started_version: None,
            executor_peers: Vec::new(),
        }))
    }
    /// Decided, then its executor and its tree exec'd.
    fn start(self, task: &str) -> Self {
        let (alloc_id, task_name) = ("a".to_string(), task.to_string());
        self.hit(scoped(Some(task), TR_BEFORE_DRIVER_START), None)
            .exec(ExecIdentity::Executor {
                alloc_id: alloc_id.clone(),
                task: task_name.clone(),
            })
            .exec(ExecIdentity::Task {
                alloc_id,
                task: task_name,
            })
    }
    fn exit(self, task: &str, code: i32) -> Self {
        self.push(Event::TaskExited {
            task: task.into(),
            exit: TaskExit::Code(code),
        })
    }
    fn accepted(self, all_tasks: bool) -> Self {
        self.hit(
            AR_RESTART_ACCEPTED.into(),
            Some(Detail::Restart { all_tasks }),
        )
    }
    fn down(self) -> Self {
        self.hit(AR_RESTART_TARGETS_DOWN.into(), None)
    }
    /// Told to restart, and (if it ran) its tree exited by the kill.
    fn restarted(self, task: &str, ran: bool) -> Self {
        let told = self.hit(scoped(Some(task), TR_RESTART_SIGNALED), None);
        if ran {
            told.exit(task, 143)
        } else {
            told
        }
    }
    /// Every task of [`tasks`] up, `init` completed.
    fn running() -> Self {
        H::default()
            .start("init")
            .exit("init", 0)
            .start("proxy")
            .start("leader")
            .start("worker")
            .start("logship")
    }
    /// A restart of the running tasks done right, up to its targets down.
    fn running_restarted() -> Self {
        H::running()
            .accepted(false)
            .restarted("leader", true)
            .restarted("worker", true)
            .restarted("proxy", true)
            .restarted("logship", true)
            .down()
    }
}

fn tasks() -> Vec<TaskShape> {
    let shape = |name: &str, role| TaskShape::new(name, role, 0);
    vec![
        shape("init", TaskRole::Prestart { sidecar: false }),
        shape("proxy", TaskRole::Prestart { sidecar: true }),
        shape("leader", TaskRole::Main { leader: true }),
        shape("worker", TaskRole::Main { leader: false }),
        shape("logship", TaskRole::Poststart { sidecar: true }),
    ]
}

#[rstest]
#[case::running_tasks_in_order(
    H::running_restarted().start("proxy").start("leader").start("worker").start("logship"),
    0
)]
#[case::all_tasks_in_order(
    H::running().accepted(true)
        .restarted("leader", true).restarted("worker", true).restarted("init", false)
        .restarted("proxy", true).restarted("logship", true).down()
        .start("init").exit("init", 0).start("proxy").start("leader").start("worker").start("logship"),
    0
)]
#[case::sidecar_told_before_a_main_task_exited(
    H::running().accepted(false)
        .restarted("leader", true).restarted("proxy", true).restarted("worker", true)
        .restarted("logship", true).down(),
    1
)]
#[case::main_task_told_before_the_leader(
    H::running().accepted(false)
        .restarted("worker", true).restarted("leader", true)
        .restarted("proxy", true).restarted("logship", true).down(),
    1
)]
// Started during the restart: its new tree is also alive when the
// sidecars are told.
#[case::started_while_targets_go_down(
    H::running().accepted(false)
        .restarted("leader", true).start("leader").restarted("worker", true)
        .restarted("proxy", true).restarted("logship", true).down(),
    3
)]
#[case::decided_before_the_restart_taken_down_after(
    H::running().hit(scoped(Some("leader"), TR_BEFORE_DRIVER_START), None).accepted(false)
        .exec(ExecIdentity::Executor { alloc_id: "a".into(), task: "leader".into() })
        .restarted("leader", true).restarted("worker", true)
        .restarted("proxy", true).restarted("logship", true).down(),
    0
)]
#[case::main_before_the_sidecar_came_back(
    H::running_restarted().start("leader").start("proxy").start("worker").start("logship"),
    1
)]
#[case::poststart_before_the_main_tasks(
    H::running_restarted().start("proxy").start("logship").start("leader").start("worker"),
    2
)]
#[case::main_before_the_prestart_completed_again(
    H::running().accepted(true)
        .restarted("leader", true).restarted("worker", true).restarted("init", false)
        .restarted("proxy", true).restarted("logship", true).down()
        .start("init").start("proxy").start("leader").exit("init", 0).start("worker").start("logship"),
    1
)]
#[case::completed_prestart_run_again(
    H::running_restarted().start("init").exit("init", 0).start("proxy").start("leader").start("worker").start("logship"),
    1
)]
fn restart_order(#[case] h: H, #[case] violations: usize) {
    let v = check_restart_order(&h.0, &tasks());
    assert_eq!(v.len(), violations, "{v:#?}");
    assert!(v.iter().all(|v| v.invariant == RESTART_ORDER));
}

/// Without a restart, the invariant has nothing to say, whatever the order.
#[test]
fn no_restart_no_verdict() {
    let h = H::default().start("logship").start("leader").start("init");
    assert!(check_restart_order(&h.0, &tasks()).is_empty());
}

/// A stop is final: a restart delivered after it is refused.
#[rstest]
#[case::before_the_stop(false, 0)]
#[case::after_the_stop(true, 1)]
fn no_restart_is_accepted_after_a_stop(#[case] after: bool, #[case] expected: usize) {
    let stopped = |h: H| h.hit(AR_ALLOC_TERMINAL.into(), None);
    let h = H::running();
    let h = if after { stopped(h) } else { h };
    let h = h.accepted(false).down();
    let h = if after { h } else { stopped(h) };
    let v = check_restart_order(&h.0, &tasks());
    assert_eq!(v.len(), expected, "{v:#?}");
}
