//! Invariants over the merged history of one run (one allocation): fault
//! points reached, execs answered by the gate, stop updates delivered and task
//! events, in causal order. They judge the whole history, not single moments.

use crate::gate::{Answer, ExecRecord};
use crate::identity::ExecIdentity;
use serde::{Deserialize, Serialize};
use taskgate_faults::{points, scoped, Hit};

/// One entry of the merged history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A fault point passed, by the engine, an executor or the harness.
    FaultHit(Hit),
    Exec(ExecRecord),
    /// The harness delivered the alloc stop update to the engine.
    StopDelivered {
        seq: u64,
    },
    /// A task event as the engine reported it (used only for liveness).
    TaskEvent {
        task: String,
        kind: TaskEventKind,
        attempt: u32,
        /// Nomad's `Failed` flag: the event ends the task in failure.
        failed: bool,
    },
    /// The agent was killed and started again (fault hits continue from
    /// the new process); `stop` when the new agent stopped the alloc at once.
    AgentRestarted {
        stop: bool,
    },
    /// An executor saw its task's process exit (the executor's own record,
    /// not the engine's).
    TaskExited {
        task: String,
        exit: TaskExit,
    },
    /// After the run: the processes still alive of a task, its executors
    /// and everything in its cgroup, as the kernel lists them.
    Survivors {
        task: String,
        pids: Vec<i32>,
    },
    /// A task's restart count as its state recorded it when an agent
    /// process ended (the killed one, then the restored one).
    RestartCount {
        task: String,
        restarts: u32,
    },
    /// The allocation's final client status as the engine reported it.
    AllocStatus(AllocStatus),
}

/// How a task's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskExit {
    Code(i32),
    Signal(i32),
}

impl TaskExit {
    pub fn successful(self) -> bool {
        self == TaskExit::Code(0)
    }
}

/// The task event kinds the oracle knows, one per engine kind: the harness
/// maps the engine's with an exhaustive `match`, so a new kind is a compile
/// error there, not a silently weaker invariant here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskEventKind {
    Updated,
    Received,
    TaskSetup,
    Started,
    WaitingShutdownDelay,
    Killing,
    Killed,
    Terminated,
    Restarting,
    NotRestarting,
    DriverFailure,
    SetupFailure,
    HookFailed,
    Restored,
    NotStarted,
    Lost,
    RestartSignaled,
}

/// Nomad's alloc client status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AllocStatus {
    Pending,
    Running,
    Complete,
    Failed,
}

/// A task's place in the alloc's lifecycle, which the kill-order and
/// poststop invariants need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskRole {
    Main { leader: bool },
    Prestart { sidecar: bool },
    Poststart { sidecar: bool },
    Poststop,
}

/// A task of the run's alloc, as the invariants need to know it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskShape {
    pub name: String,
    pub role: TaskRole,
    /// Restart attempts its policy allows (a failed attempt may be retried).
    pub restart_attempts: u32,
    /// Its policy restarts without end (Nomad's delay mode): no failed exit
    /// is its last by the policy's choice.
    pub restarts_forever: bool,
    /// An exit 0 is restarted like a failure (a service's task, a sidecar):
    /// it is no completion, and a last exit 0 the policy gave up on fails it.
    pub restarts_on_success: bool,
}

/// The fault points the invariants anchor on, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvariantConfig {
    /// Per-task point (reached as `<task>:<point>`) passed once per start
    /// attempt, after the last "should I shut down?" check and before the driver starts the task.
    pub start_decision: String,
    /// Alloc-runner point where a stop made the alloc terminal; its first
    /// hit after a stop was delivered is when the alloc became terminal.
    pub alloc_terminal: String,
    /// Per-task point where the task runner has seen the alloc terminal and
    /// will not start the task again; `None` skips that half of invariant (b).
    pub observed_terminal: Option<String>,
}

impl Default for InvariantConfig {
    fn default() -> Self {
        InvariantConfig {
            start_decision: points::TR_BEFORE_DRIVER_START.to_string(),
            alloc_terminal: points::AR_ALLOC_TERMINAL.to_string(),
            observed_terminal: Some(points::TR_OBSERVED_TERMINAL.to_string()),
        }
    }
}

pub const LAYOUT_BEFORE_EXEC: &str = "task dir + logs exist before every exec";
pub const NO_EXEC_AFTER_TERMINAL: &str =
    "no exec after the task runner observed the alloc terminal";
pub const ONE_EXEC_PER_ATTEMPT: &str = "at most one executor exec per start attempt";
pub const STARTED_TASKS_END: &str = "every started task is eventually killed or exits";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub invariant: &'static str,
    pub task: Option<String>,
    pub detail: String,
}

/// Every invariant, with the engine's default point names.
pub fn check(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    check_with(history, tasks, &InvariantConfig::default())
}

pub fn check_with(
    history: &[Event],
    shapes: &[TaskShape],
    config: &InvariantConfig,
) -> Vec<Violation> {
    let tasks: Vec<String> = shapes.iter().map(|t| t.name.clone()).collect();
    // Poststop tasks start after terminal, by design.
    let must_not_start_late: Vec<String> = shapes
        .iter()
        .filter(|t| t.role != TaskRole::Poststop)
        .map(|t| t.name.clone())
        .collect();
    let mut v = check_layout_before_exec(history);
    v.extend(check_no_exec_after_terminal(
        history,
        &must_not_start_late,
        config,
    ));
    v.extend(check_one_exec_per_attempt(history, &tasks, config));
    v.extend(check_started_tasks_end(history));
    v.extend(crate::lifecycle::check(history, shapes));
    v.extend(crate::updates::check_updates_whole(history, shapes));
    v.extend(crate::restarts::check_restart_order(history, shapes));
    v
}

fn violation(invariant: &'static str, task: &str, detail: String) -> Violation {
    Violation {
        invariant,
        task: Some(task.to_string()),
        detail,
    }
}

fn is_hit(event: &Event, name: &str) -> bool {
    matches!(event, Event::FaultHit(h) if h.name() == name)
}

fn executor_exec_of<'a>(event: &'a Event, task: &str) -> Option<&'a ExecRecord> {
    match event {
        Event::Exec(r) if matches!(&r.identity, ExecIdentity::Executor { task: t, .. } if t == task) => {
            Some(r)
        }
        _ => None,
    }
}

fn describe(r: &ExecRecord) -> String {
    format!(
        "exec #{} of {} by pid {} ({:?})",
        r.seq,
        r.exe.display(),
        r.pid,
        r.identity
    )
}

/// (a) The judge checked the layout at every exec of a task's process: a
/// denial (other than for a start after terminal, which (b) reports) means
/// the layout was missing or the judge itself failed.
pub fn check_layout_before_exec(history: &[Event]) -> Vec<Violation> {
    history
        .iter()
        .filter_map(|e| match e {
            Event::Exec(r)
                if r.verdict == Answer::Deny
                    && !r.reason.starts_with(crate::judge::DENY_TERMINAL) =>
            {
                let task = r.identity.task()?;
                Some(violation(
                    LAYOUT_BEFORE_EXEC,
                    task,
                    format!("{} denied: {}", describe(r), r.reason),
                ))
            }
            _ => None,
        })
        .collect()
}

/// (b) No task is started once its runner has seen the alloc terminal: an
/// executor exec must not follow the task's observed-terminal point, nor
/// follow a start decision taken after the alloc became terminal (the Nomad
/// bug: the stop landed between the check and the start). A process of an
/// already running task may still exec while being killed; a task-identity
/// exec is flagged only if no executor exec of the task preceded the observation.
pub fn check_no_exec_after_terminal(
    history: &[Event],
    tasks: &[String],
    config: &InvariantConfig,
) -> Vec<Violation> {
    let stop = history
        .iter()
        .position(|e| matches!(e, Event::StopDelivered { .. }));
    let terminal = stop.and_then(|s| {
        history[s..]
            .iter()
            .position(|e| is_hit(e, &config.alloc_terminal))
            .map(|i| s + i)
    });
    let mut out = Vec::new();
    for task in tasks {
        let decision = scoped(Some(task), &config.start_decision);
        let observed = config
            .observed_terminal
            .as_deref()
            .map(|p| scoped(Some(task), p));
        let (mut last_decision, mut observed_at, mut started) = (None, None, false);
        for (i, e) in history.iter().enumerate() {
            if is_hit(e, &decision) {
                last_decision = Some(i);
            } else if observed_at.is_none() && observed.as_deref().is_some_and(|o| is_hit(e, o)) {
                observed_at = Some(i);
            } else if let Some(r) = executor_exec_of(e, task) {
                if let Some(o) = observed_at {
                    out.push(violation(
                        NO_EXEC_AFTER_TERMINAL,
                        task,
                        format!(
                            "{} at #{i} after the runner observed the alloc terminal at #{o}",
                            describe(r)
                        ),
                    ));
                } else if let (Some(d), Some(t)) = (last_decision, terminal) {
                    if d > t {
                        out.push(violation(
                            NO_EXEC_AFTER_TERMINAL,
                            task,
                            format!("{} at #{i}: its start decision at #{d} came after the alloc became terminal at #{t}", describe(r)),
                        ));
                    }
                }
                started = true;
            } else if let (Event::Exec(r), Some(o), false) = (e, observed_at, started) {
                if matches!(&r.identity, ExecIdentity::Task { task: t, .. } if t == task) {
                    out.push(violation(
                        NO_EXEC_AFTER_TERMINAL,
                        task,
                        format!("{} at #{i}, never started by an executor, after the runner observed the alloc terminal at #{o}", describe(r)),
                    ));
                }
            }
        }
    }
    out
}

/// (c) Each start attempt (one start-decision hit) execs the task at most
/// once, and never without a start decision.
pub fn check_one_exec_per_attempt(
    history: &[Event],
    tasks: &[String],
    config: &InvariantConfig,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks {
        let decision = scoped(Some(task), &config.start_decision);
        let (mut attempt, mut execs_this_attempt) = (0u32, 0u32);
        for (i, e) in history.iter().enumerate() {
            if is_hit(e, &decision) {
                attempt += 1;
                execs_this_attempt = 0;
            } else if let Some(r) = executor_exec_of(e, task) {
                execs_this_attempt += 1;
                if attempt == 0 {
                    out.push(violation(
                        ONE_EXEC_PER_ATTEMPT,
                        task,
                        format!(
                            "{} at #{i} without any start decision ({decision})",
                            describe(r)
                        ),
                    ));
                } else if execs_this_attempt > 1 {
                    out.push(violation(
                        ONE_EXEC_PER_ATTEMPT,
                        task,
                        format!(
                            "{} at #{i} is exec number {execs_this_attempt} of attempt {attempt}",
                            describe(r)
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// (d) Every "Started" task event is followed by a "Terminated" or "Killed"
/// event of the same task.
pub fn check_started_tasks_end(history: &[Event]) -> Vec<Violation> {
    let ends = |task: &str, from: usize| {
        history[from..].iter().any(|e| {
            matches!(e, Event::TaskEvent { task: t, kind, .. }
                if t == task && matches!(kind, TaskEventKind::Terminated | TaskEventKind::Killed))
        })
    };
    history
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::TaskEvent {
                task,
                kind,
                attempt,
                ..
            } if *kind == TaskEventKind::Started && !ends(task, i + 1) => Some(violation(
                STARTED_TASKS_END,
                task,
                format!("started at #{i} (attempt {attempt}) but never terminated or killed"),
            )),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Builds histories; sequence numbers are only labels here.
    #[derive(Default)]
    struct H(Vec<Event>);

    impl H {
        fn hit(mut self, name: &str) -> Self {
            let seq = self.0.len() as u64;
            self.0.push(Event::FaultHit(Hit {
                detail: None,
                seq,
                point: name.parse().unwrap(),
                action: None,
            }));
            self
        }
        fn exec(mut self, identity: ExecIdentity, verdict: Answer) -> Self {
            let seq = self.0.len() as u64;
            let reason = if verdict == Answer::Deny {
                "missing alloc/logs".into()
            } else {
                String::new()
            };
            self.0.push(Event::Exec(ExecRecord {
                seq,
                pid: 100 + seq as i32,
                exe: PathBuf::from("/marked/bin/busybox"),
                identity,
                verdict,
                reason,
                judged: true,
                cgroup_peers: Vec::new(),
                started_version: None,
            }));
            self
        }
        fn executor(self, task: &str) -> Self {
            self.exec(
                ExecIdentity::Executor {
                    alloc_id: "a1".into(),
                    task: task.into(),
                },
                Answer::Allow,
            )
        }
        fn task_exec(self, task: &str) -> Self {
            self.exec(
                ExecIdentity::Task {
                    alloc_id: "a1".into(),
                    task: task.into(),
                },
                Answer::Allow,
            )
        }
        fn stop(mut self) -> Self {
            self.0.push(Event::StopDelivered { seq: 1 });
            self
        }
        fn task_event(mut self, task: &str, kind: TaskEventKind, attempt: u32) -> Self {
            self.0.push(Event::TaskEvent {
                task: task.into(),
                kind,
                attempt,
                failed: false,
            });
            self
        }
    }

    fn tasks(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn shapes(names: &[&str]) -> Vec<TaskShape> {
        names
            .iter()
            .map(|name| TaskShape {
                name: name.to_string(),
                role: TaskRole::Main { leader: false },
                restart_attempts: 0,
                restarts_forever: false,
                restarts_on_success: false,
            })
            .collect()
    }

    fn observed_cfg() -> InvariantConfig {
        InvariantConfig {
            observed_terminal: Some("tr.observed_terminal".into()),
            ..Default::default()
        }
    }

    fn invariants(v: &[Violation]) -> Vec<(&'static str, Option<&str>)> {
        v.iter().map(|v| (v.invariant, v.task.as_deref())).collect()
    }

    #[test]
    fn layout_denial_of_a_task_exec_is_a_violation() {
        let web = ExecIdentity::Executor {
            alloc_id: "a1".into(),
            task: "web".into(),
        };
        let h = H::default()
            .exec(web.clone(), Answer::Deny)
            .exec(ExecIdentity::Unknown, Answer::Deny);
        let v = check_layout_before_exec(&h.0);
        assert_eq!(invariants(&v), [(LAYOUT_BEFORE_EXEC, Some("web"))]);
        assert!(
            v[0].detail.contains("missing alloc/logs"),
            "{}",
            v[0].detail
        );

        let db = ExecIdentity::Task {
            alloc_id: "a1".into(),
            task: "db".into(),
        };
        let h = H::default().exec(db, Answer::Deny);
        assert_eq!(
            invariants(&check_layout_before_exec(&h.0)),
            [(LAYOUT_BEFORE_EXEC, Some("db"))]
        );

        let h = H::default().exec(web, Answer::Allow);
        assert_eq!(check_layout_before_exec(&h.0), []);
    }

    #[test]
    fn start_decided_after_alloc_terminal_is_a_violation() {
        // The Nomad bug: the stop lands between the check and the driver start.
        let h = H::default()
            .hit("web:tr.start_condition_met")
            .stop()
            .hit("ar.update_received")
            .hit("ar.alloc_terminal")
            .hit("ar.alloc_state_set")
            .hit("web:tr.before_driver_start")
            .executor("web");
        let v = check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &InvariantConfig::default());
        assert_eq!(invariants(&v), [(NO_EXEC_AFTER_TERMINAL, Some("web"))]);
        assert_eq!(
            invariants(&check(&h.0, &shapes(&["web"]))),
            [(NO_EXEC_AFTER_TERMINAL, Some("web"))]
        );
    }

    /// An in-place update delivered before the stop is handled first: its
    /// state change is not the stop's.
    #[test]
    fn an_updates_state_change_before_the_stops_is_not_terminal() {
        let h = H::default()
            .stop()
            .hit("ar.alloc_state_set")
            .hit("web:tr.before_driver_start")
            .executor("web")
            .hit("ar.alloc_terminal")
            .hit("ar.alloc_state_set");
        let cfg = InvariantConfig::default();
        assert_eq!(
            check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &cfg),
            []
        );
    }

    #[test]
    fn start_decided_before_alloc_terminal_is_fine() {
        let h = H::default()
            .hit("ar.alloc_state_set") // an earlier, non-stop update: not terminal
            .hit("web:tr.before_driver_start")
            .stop()
            .hit("ar.alloc_terminal")
            .hit("ar.alloc_state_set")
            .hit("db:tr.before_driver_start") // another task's decision
            .executor("web");
        let cfg = InvariantConfig::default();
        assert_eq!(
            check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &cfg),
            []
        );
        // The other task did decide after terminal, and its exec is flagged.
        let h = h.executor("db");
        let v = check_no_exec_after_terminal(&h.0, &tasks(&["web", "db"]), &cfg);
        assert_eq!(invariants(&v), [(NO_EXEC_AFTER_TERMINAL, Some("db"))]);
    }

    #[test]
    fn exec_after_observed_terminal_is_a_violation() {
        let h = H::default()
            .hit("web:tr.before_driver_start")
            .hit("web:tr.observed_terminal")
            .executor("web");
        let v = check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &observed_cfg());
        assert_eq!(invariants(&v), [(NO_EXEC_AFTER_TERMINAL, Some("web"))]);
        // Without the point configured the same history passes this check.
        let without = InvariantConfig {
            observed_terminal: None,
            ..Default::default()
        };
        assert_eq!(
            check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &without),
            []
        );
        // A task process that no executor ever started, exec'ing after the observation.
        let h = H::default()
            .hit("web:tr.observed_terminal")
            .task_exec("web");
        let v = check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &observed_cfg());
        assert_eq!(invariants(&v), [(NO_EXEC_AFTER_TERMINAL, Some("web"))]);
    }

    #[test]
    fn running_task_exec_while_being_killed_is_fine() {
        let h = H::default()
            .hit("web:tr.before_driver_start")
            .executor("web")
            .task_exec("web")
            .hit("web:tr.observed_terminal")
            .task_exec("web")
            .hit("db:tr.observed_terminal")
            .task_exec("db2");
        assert_eq!(
            check_no_exec_after_terminal(&h.0, &tasks(&["web", "db"]), &observed_cfg()),
            []
        );
    }

    #[test]
    fn second_exec_in_one_attempt_is_a_violation() {
        let h = H::default()
            .hit("web:tr.before_driver_start")
            .executor("web")
            .executor("web");
        let v = check_one_exec_per_attempt(&h.0, &tasks(&["web"]), &InvariantConfig::default());
        assert_eq!(invariants(&v), [(ONE_EXEC_PER_ATTEMPT, Some("web"))]);
        assert!(v[0].detail.contains("attempt 1"), "{}", v[0].detail);
    }

    #[test]
    fn exec_without_start_decision_is_a_violation() {
        let h = H::default()
            .executor("web")
            .hit("web:tr.before_driver_start");
        let v = check_one_exec_per_attempt(&h.0, &tasks(&["web"]), &InvariantConfig::default());
        assert_eq!(invariants(&v), [(ONE_EXEC_PER_ATTEMPT, Some("web"))]);
    }

    #[test]
    fn one_exec_per_attempt_is_fine() {
        let h = H::default()
            .hit("web:tr.before_driver_start")
            .executor("web")
            .task_exec("web")
            .task_exec("web")
            .hit("web:tr.before_driver_start")
            .executor("web")
            .hit("db:tr.before_driver_start")
            .executor("db");
        let cfg = InvariantConfig::default();
        assert_eq!(
            check_one_exec_per_attempt(&h.0, &tasks(&["web", "db"]), &cfg),
            []
        );
        // A decision of another task does not open an attempt for this one.
        let h = H::default()
            .hit("db:tr.before_driver_start")
            .executor("web");
        assert_eq!(
            check_one_exec_per_attempt(&h.0, &tasks(&["web", "db"]), &cfg).len(),
            1
        );
    }

    #[test]
    fn started_task_that_never_ends_is_a_violation() {
        let h = H::default()
            .task_event("web", TaskEventKind::Started, 1)
            .task_event("db", TaskEventKind::Killed, 1);
        assert_eq!(
            invariants(&check_started_tasks_end(&h.0)),
            [(STARTED_TASKS_END, Some("web"))]
        );
        // The restart's Started needs its own end.
        let h = H::default()
            .task_event("web", TaskEventKind::Started, 1)
            .task_event("web", TaskEventKind::Terminated, 1)
            .task_event("web", TaskEventKind::Started, 2);
        let v = check_started_tasks_end(&h.0);
        assert_eq!(invariants(&v), [(STARTED_TASKS_END, Some("web"))]);
        assert!(v[0].detail.contains("attempt 2"), "{}", v[0].detail);
    }

    #[test]
    fn started_tasks_that_end_are_fine() {
        let h = H::default()
            .task_event("web", TaskEventKind::Started, 1)
            .task_event("db", TaskEventKind::Started, 1)
            .task_event("web", TaskEventKind::Terminated, 1)
            .task_event("web", TaskEventKind::Started, 2)
            .task_event("web", TaskEventKind::Killing, 2)
            .task_event("web", TaskEventKind::Killed, 2)
            .task_event("db", TaskEventKind::Terminated, 1);
        assert_eq!(check_started_tasks_end(&h.0), []);
    }

    #[test]
    fn clean_history_passes_everything() {
        let h = H::default()
            .hit("web:tr.before_driver_start")
            .executor("web")
            .task_event("web", TaskEventKind::Started, 1)
            .stop()
            .hit("ar.alloc_terminal")
            .hit("ar.alloc_state_set")
            .hit("web:tr.observed_terminal")
            .task_exec("web")
            .task_event("web", TaskEventKind::Killed, 1);
        let mut h = h.0;
        h.push(Event::TaskExited {
            task: "web".into(),
            exit: TaskExit::Signal(15),
        });
        assert_eq!(check_with(&h, &shapes(&["web"]), &observed_cfg()), []);
    }

    #[test]
    fn history_round_trips_through_json() {
        let mut h = H::default()
            .hit("web:tr.before_driver_start")
            .executor("web")
            .stop()
            .task_event("web", TaskEventKind::Started, 1);
        h.0.push(Event::AgentRestarted { stop: true });
        let json = serde_json::to_string(&h.0).unwrap();
        assert_eq!(serde_json::from_str::<Vec<Event>>(&json).unwrap(), h.0);
    }
}
