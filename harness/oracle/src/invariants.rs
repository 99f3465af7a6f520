//! Invariants over the merged history of one run (one allocation): fault
//! points reached, execs answered by the gate, stop updates delivered and task
//! events, in causal order. They judge the whole history, not single moments.

use crate::gate::{Answer, ExecRecord};
use crate::identity::ExecIdentity;
use serde::{Deserialize, Serialize};
use std::time::Duration;
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
    /// The allocation's final desired status as the engine persisted it:
    /// `stop` once a stop was applied.
    DesiredStop(bool),
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
    /// How long one restart window lasts (`Duration::MAX`: longer than
    /// any run).
    #[serde(default = "forever")]
    pub restart_interval: Duration,
    /// The wait before each restart the policy grants, in turn over the
    /// task's life (from 0): its delay and the jitter the harness's seed
    /// draws for it. Empty when not known.
    #[serde(default)]
    pub restart_waits: Vec<Duration>,
    /// How long its kill signal is held back once it is told to die.
    #[serde(default)]
    pub shutdown_delay: Duration,
    /// The grace between its kill signal and SIGKILL, at the job's first
    /// version (an update's: [`crate::updates::kill_timeout_of`]).
    #[serde(default)]
    pub kill_timeout: Duration,
    /// Its kill signal is SIGKILL itself: no grace follows it.
    #[serde(default)]
    pub killed_by_sigkill: bool,
}

fn forever() -> Duration {
    Duration::MAX
}

impl TaskShape {
    /// A task of `role` whose policy allows `restart_attempts` restarts in
    /// an interval longer than any run, restarted on failure only, killed
    /// at once when told to die.
    pub fn new(name: &str, role: TaskRole, restart_attempts: u32) -> TaskShape {
        TaskShape {
            name: name.to_string(),
            role,
            restart_attempts,
            restarts_forever: false,
            restarts_on_success: false,
            restart_interval: Duration::MAX,
            restart_waits: Vec::new(),
            shutdown_delay: Duration::ZERO,
            kill_timeout: Duration::ZERO,
            killed_by_sigkill: false,
        }
    }
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
    v.extend(crate::policy::check_launches_accounted(history, shapes));
    v.extend(crate::liveness::check_commands_take_effect(history, shapes));
    v.extend(crate::policy::check_restart_windows(history, shapes));
    v.extend(crate::kills::check_kill_grace(history, shapes));
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
#[path = "invariants_tests.rs"]
mod tests;
