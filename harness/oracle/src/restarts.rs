//! User restarts (Nomad's `alloc restart`), judged on the kernel's and the
//! harness's records: executor launches and tree roots (execs), exits (the
//! executors' own records), and where each task runner took the restart.
//! The engine's word is used only for where a restart was accepted and
//! where its targets were all down, the window the rules below speak of.
//! Nomad #19403: a restart killed the sidecars with the main tasks, and
//! started the tasks again out of lifecycle order.

use crate::history::{Event, TaskRole, TaskShape};
use crate::invariant::{Invariant, Violation};
use crate::lifecycle::told_in_kill_order;
use crate::timeline::{exits, kept_restarts, launches, positions, restarts, tree_roots};
use taskgate_faults::points::{
    AR_ALLOC_TERMINAL, AR_RESTART_ACCEPTED, AR_RESTART_TARGETS_DOWN, TR_BEFORE_DRIVER_START,
};
use taskgate_faults::{scoped, Detail};

/// One accepted restart: from its acceptance to its targets being down
/// (or, if they never were, the agent's death or the run's end).
#[derive(Debug, Clone, Copy)]
struct Restart {
    accepted: usize,
    down: Option<usize>,
    end: usize,
    all_tasks: bool,
}

impl Restart {
    fn within(&self, at: usize) -> bool {
        at > self.accepted && at < self.down.unwrap_or(self.end)
    }
}

fn accepted_restarts(history: &[Event]) -> Vec<Restart> {
    let agent_deaths = positions(history, |e| matches!(e, Event::AgentRestarted { .. }));
    history
        .iter()
        .enumerate()
        .filter_map(|(at, e)| match e {
            Event::FaultHit(h)
                if h.point.scope().is_none() && h.point.point == AR_RESTART_ACCEPTED =>
            {
                let all_tasks = matches!(h.detail, Some(Detail::Restart { all_tasks: true }));
                let end = (agent_deaths.iter().copied().find(|&d| d > at)).unwrap_or(history.len());
                let down = (at..end).find(|&i| history[i].is_hit(AR_RESTART_TARGETS_DOWN));
                Some(Restart {
                    accepted: at,
                    down,
                    end,
                    all_tasks,
                })
            }
            _ => None,
        })
        .collect()
}

/// Every accepted restart: accepted only before a stop made the alloc
/// terminal (a stop is final), its kill order, its hold on starts, the
/// order its tasks come back in, and a completed prestart task kept
/// completed unless all tasks restart.
pub fn check_restart_order(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let restarts_seen = accepted_restarts(history);
    let terminal = history.iter().position(|e| e.is_hit(AR_ALLOC_TERMINAL));
    let mut out = Vec::new();
    for (n, restart) in restarts_seen.iter().enumerate() {
        if let Some(terminal) = terminal.filter(|&t| t < restart.accepted) {
            out.push(Invariant::RestartOrder.violation(
                None,
                format!(
                    "a restart was accepted at #{} after a stop made the alloc terminal at #{terminal}",
                    restart.accepted
                ),
            ));
        }
        let next = restarts_seen
            .get(n + 1)
            .map_or(history.len(), |r| r.accepted);
        let signaled = |task: &TaskShape| {
            (restarts(history, &task.name).into_iter()).find(|&at| restart.within(at))
        };
        out.extend(told_in_kill_order(
            history,
            tasks,
            &signaled,
            Invariant::RestartOrder,
            "restart",
        ));
        out.extend(starts_held(history, tasks, restart));
        if let Some(down) = restart.down {
            out.extend(lifecycle_order(
                history, tasks, &signaled, restart, down, next,
            ));
        } else if restart.end < history.len() {
            // The agent died before the targets were down: the restored
            // agent carries the restart through, each running task its
            // runner had told to restart (before the death or after it)
            // brought back in lifecycle order from the restore on. A task
            // dead when told (a revival) is not carried: its revival is only
            // written once the running targets are down, so an agent dead
            // before then leaves it dead. A restart kept as owed (the
            // attempt over before the restart reached it) is carried, if
            // the task came back at all (its policy may leave it dead).
            let within = |at: &usize| *at > restart.accepted && *at < next;
            let carried = |task: &TaskShape| {
                (restarts(history, &task.name).into_iter())
                    .find(|&at| within(&at) && !ended_before(history, &task.name, at))
                    .or_else(|| {
                        (kept_restarts(history, &task.name).into_iter()).find(|at| {
                            within(at)
                                && tree_roots(history, &task.name)
                                    .iter()
                                    .any(|r| r > at && *r < next)
                        })
                    })
            };
            out.extend(lifecycle_order(
                history,
                tasks,
                &carried,
                restart,
                restart.end,
                next,
            ));
        }
        if !restart.all_tasks {
            out.extend(completed_prestart_kept(
                history,
                tasks,
                restart.accepted,
                next,
            ));
        }
    }
    out
}

/// Whether `task`'s latest tree launched before `at` had exited by then
/// (or it never ran).
fn ended_before(history: &[Event], task: &str, at: usize) -> bool {
    let Some(last) = launches(history, task).into_iter().rfind(|&l| l < at) else {
        return true;
    };
    (exits(history, task).iter()).any(|&(exited, _)| exited > last && exited < at)
}

/// From the restart's acceptance until its targets are down, no task is
/// launched on a start decided after the acceptance (one decided before
/// may have been committed before the hold: the restart takes it down).
fn starts_held(history: &[Event], tasks: &[TaskShape], restart: &Restart) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks.iter().filter(|t| t.role != TaskRole::Poststop) {
        let decision = scoped(Some(&task.name), TR_BEFORE_DRIVER_START);
        let decided = positions(history, |e| e.is_hit(&decision));
        for launch in launches(history, &task.name)
            .into_iter()
            .filter(|&l| restart.within(l))
        {
            let Some(at) = decided.iter().copied().rfind(|&d| d < launch) else {
                continue;
            };
            if at > restart.accepted {
                out.push(Invariant::RestartOrder.violation(
                    Some(&task.name),
                    format!(
                        "launched at #{launch} on a start decided at #{at}, while the restart accepted at #{} was taking its targets down",
                        restart.accepted
                    ),
                ));
            }
        }
    }
    out
}

/// After the targets are down, each main and poststart task's first tree
/// comes after the restarted prestart tasks completed (ephemeral) or
/// started (sidecars) again, and a poststart task's after the restarted
/// main tasks started again.
fn lifecycle_order(
    history: &[Event],
    tasks: &[TaskShape],
    signaled: &dyn Fn(&TaskShape) -> Option<usize>,
    restart: &Restart,
    down: usize,
    next: usize,
) -> Vec<Violation> {
    let after = |task: &str, from: usize, before: usize| {
        tree_roots(history, task)
            .into_iter()
            .find(|&r| r > from && r < before)
    };
    // Its latest tree before `before` completed since the restart was
    // accepted: run again after it, or (its exit beat the restart's kill)
    // not needed again. An exit from before the restart is no completion
    // again.
    let completed = |task: &str, before: usize| {
        let Some(last) = launches(history, task).into_iter().rfind(|&l| l < before) else {
            return false;
        };
        (exits(history, task).iter())
            .any(|&(at, exit)| at > last.max(restart.accepted) && at < before && exit.successful())
    };
    let mut out = Vec::new();
    for task in tasks {
        let poststart = match task.role {
            TaskRole::Main { .. } => false,
            TaskRole::Poststart { .. } => true,
            TaskRole::Prestart { .. } | TaskRole::Poststop => continue,
        };
        let Some(root) = after(&task.name, down, next) else {
            continue;
        };
        for before in tasks.iter().filter(|b| signaled(b).is_some()) {
            let missing = match before.role {
                TaskRole::Prestart { sidecar: false } if !completed(&before.name, root) => {
                    "completed"
                }
                TaskRole::Prestart { sidecar: true }
                    if after(&before.name, down, root).is_none() =>
                {
                    "started"
                }
                TaskRole::Main { .. } if poststart && after(&before.name, down, root).is_none() => {
                    "started"
                }
                _ => continue,
            };
            out.push(Invariant::RestartOrder.violation(
                Some(&task.name),
                format!(
                    "started at #{root}, after the restart, before {} had {missing} again",
                    before.name
                ),
            ));
        }
    }
    out
}

/// A restart of the running tasks leaves a completed prestart task
/// completed: it is not launched again.
fn completed_prestart_kept(
    history: &[Event],
    tasks: &[TaskShape],
    accepted: usize,
    next: usize,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks
        .iter()
        .filter(|t| t.role == TaskRole::Prestart { sidecar: false })
    {
        // Completed as its latest launch before the restart ended: a
        // revival since an earlier completion runs it again.
        let latest = (launches(history, &task.name).into_iter()).rfind(|&l| l < accepted);
        let done = (exits(history, &task.name).iter())
            .any(|&(at, exit)| at < accepted && latest.is_none_or(|l| at > l) && exit.successful());
        let again = launches(history, &task.name)
            .into_iter()
            .find(|&l| l > accepted && l < next);
        if let (true, Some(again)) = (done, again) {
            out.push(Invariant::RestartOrder.violation(
                Some(&task.name),
                format!(
                    "completed before the restart of the running tasks at #{accepted}, launched again at #{again}"
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! The restart invariant over recorded histories, holding and broken.

    use super::*;
    use crate::history::ExecRecord;
    use crate::history::TaskExit;
    use crate::identity::ExecIdentity;
    use rstest::rstest;
    use taskgate_faults::points::{TR_RESTART_KEPT, TR_RESTART_SIGNALED};
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
            self.push(Event::Exec(ExecRecord::allowed(seq, identity)))
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
        /// The agent died, and a new one restored the alloc.
        fn restored(self) -> Self {
            self.push(Event::AgentRestarted { stop: false })
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
        /// A restart of all tasks done right, up to its targets down: the
        /// completed `init` revived.
        fn all_restarted() -> Self {
            H::running()
                .accepted(true)
                .restarted("leader", true)
                .restarted("worker", true)
                .restarted("proxy", true)
                .restarted("logship", true)
                .restarted("init", false)
                .down()
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
    // The agent dies as the sidecar is told: the restored agent carries the
    // restart through, and brings the main tasks back after the sidecar.
    #[case::carried_across_a_restore_in_order(
        H::running().accepted(false)
            .restarted("leader", true).restarted("worker", true).restarted("logship", true)
            .hit(scoped(Some("proxy"), TR_RESTART_SIGNALED), None).restored()
            .exit("proxy", 143).start("proxy").start("leader").start("worker").start("logship"),
        0
    )]
    // Cut as the completed prestart task is revived: the revival is not
    // written before the running targets are down, so the restored agent
    // leaves it completed, and the others come back without it.
    #[case::all_tasks_cut_at_a_revival(
        H::running().accepted(true)
            .restarted("leader", true).restarted("worker", true)
            .restarted("proxy", true).restarted("logship", true)
            .hit(scoped(Some("init"), TR_RESTART_SIGNALED), None).restored()
            .start("proxy").start("leader").start("worker").start("logship"),
        0
    )]
    // The sidecar's tree had ended, and its next start, decided before the
    // restart, launched after it: it is the one the restart takes down and
    // the restored agent carries through, so it must be back first.
    #[case::carried_after_a_launch_decided_before_the_restart(
        H::running().exit("proxy", 1)
            .hit(scoped(Some("proxy"), TR_BEFORE_DRIVER_START), None).accepted(false)
            .exec(ExecIdentity::Executor { alloc_id: "a".into(), task: "proxy".into() })
            .exec(ExecIdentity::Task { alloc_id: "a".into(), task: "proxy".into() })
            .restarted("leader", true).restarted("worker", true).restarted("logship", true)
            .hit(scoped(Some("proxy"), TR_RESTART_SIGNALED), None).restored()
            .start("leader").exit("proxy", 143).start("proxy").start("worker").start("logship"),
        1
    )]
    #[case::carried_across_a_restore_main_before_the_sidecar(
        H::running().accepted(false)
            .restarted("leader", true).restarted("worker", true).restarted("logship", true)
            .hit(scoped(Some("proxy"), TR_RESTART_SIGNALED), None).restored()
            .start("leader").exit("proxy", 143).start("proxy").start("worker").start("logship"),
        1
    )]
    // The sidecar failed before the restart reached it, which its runner
    // kept as owed; the agent died there. The restored agent owes the
    // sidecar's return before the main tasks', as a restart told to it.
    #[case::kept_across_a_restore_in_order(
        H::running().accepted(false)
            .restarted("leader", true).restarted("worker", true).restarted("logship", true)
            .exit("proxy", 1).hit(scoped(Some("proxy"), TR_RESTART_KEPT), None).restored()
            .start("proxy").start("leader").start("worker").start("logship"),
        0
    )]
    #[case::kept_across_a_restore_main_before_the_sidecar(
        H::running().accepted(false)
            .restarted("leader", true).restarted("worker", true).restarted("logship", true)
            .exit("proxy", 1).hit(scoped(Some("proxy"), TR_RESTART_KEPT), None).restored()
            .start("leader").start("proxy").start("worker").start("logship"),
        1
    )]
    // Its policy left it dead: nothing of it is owed back, and nothing
    // waits for it.
    #[case::kept_across_a_restore_never_back(
        H::running().accepted(false)
            .restarted("leader", true).restarted("worker", true).restarted("logship", true)
            .exit("proxy", 1).hit(scoped(Some("proxy"), TR_RESTART_KEPT), None).restored()
            .start("leader").start("worker").start("logship"),
        0
    )]
    // Kept before this restart was accepted: another restart's, owed
    // nothing back by this one.
    #[case::kept_before_the_restart(
        H::running().exit("proxy", 1).hit(scoped(Some("proxy"), TR_RESTART_KEPT), None)
            .accepted(false)
            .restarted("leader", true).restarted("worker", true).restarted("logship", true)
            .restored()
            .start("leader").start("proxy").start("worker").start("logship"),
        0
    )]
    // Back only after the next restart was accepted: not this one's return.
    #[case::kept_back_only_after_the_next_restart(
        H::running().accepted(false)
            .restarted("leader", true).restarted("worker", true).restarted("logship", true)
            .exit("proxy", 1).hit(scoped(Some("proxy"), TR_RESTART_KEPT), None).restored()
            .start("leader").start("worker").start("logship").accepted(false).down().start("proxy"),
        0
    )]
    fn restart_order(#[case] h: H, #[case] violations: usize) {
        let v = check_restart_order(&h.0, &tasks());
        assert_eq!(v.len(), violations, "{v:#?}");
        assert!(v.iter().all(|v| v.invariant == Invariant::RestartOrder));
    }

    /// A restart of all tasks runs the completed prestart task again before
    /// the main and poststart tasks: its exit from before the restart is not
    /// a completion again.
    #[test]
    fn tasks_started_before_the_revived_prestart_ran_again() {
        let h = H::all_restarted()
            .start("proxy")
            .start("leader")
            .start("worker")
            .start("logship");
        let v = check_restart_order(&h.0, &tasks());
        assert_eq!(v.len(), 3, "leader, worker and logship: {v:#?}");
    }

    /// A prestart task a restart of all tasks revived, still running when
    /// a restart of the running tasks comes, is one of its targets: its
    /// completion before the first restart is no completion of this run.
    #[test]
    fn a_revived_prestart_task_still_running_is_restarted() {
        let h = H::all_restarted()
            .start("init")
            .start("proxy")
            .accepted(false)
            .restarted("init", true)
            .restarted("proxy", true)
            .down()
            .start("init")
            .start("proxy")
            .exit("init", 0)
            .start("leader")
            .start("worker")
            .start("logship");
        let v = check_restart_order(&h.0, &tasks());
        assert!(v.is_empty(), "{v:#?}");
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
}
