//! The history vocabulary: the records one run's merged history is made
//! of (fault points reached, execs the gate answered, what the harness did,
//! what the executors and the kernel saw), and the shape of the run's tasks
//! that the checks judge them against. It sits at the bottom of the crate:
//! it imports no check, and every check reads it.

use crate::identity::{parse_spec_fd_target, ExecIdentity, SPEC_FD};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use taskgate_faults::Hit;

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
        /// The engine's words, such as a driver failure's error: a failing
        /// run's history shows why, with no data dir to open.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        message: String,
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

impl Event {
    /// A hit of the fault point `name` (scoped: `<task>:<point>`).
    pub fn is_hit(&self, name: &str) -> bool {
        matches!(self, Event::FaultHit(h) if h.point.is_named(name))
    }

    /// An exec of one of `task`'s executors: a launch of an attempt.
    pub fn executor_exec_of(&self, task: &str) -> Option<&ExecRecord> {
        match self {
            Event::Exec(r) if matches!(&r.identity, ExecIdentity::Executor { task: t, .. } if t == task) => {
                Some(r)
            }
            _ => None,
        }
    }

    /// An exec of a process in `task`'s cgroup.
    pub fn is_task_exec_of(&self, task: &str) -> bool {
        matches!(self, Event::Exec(r) if matches!(&r.identity, ExecIdentity::Task { task: t, .. } if t == task))
    }
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

impl TaskRole {
    /// A prestart or poststart task that runs beside the main tasks.
    pub fn is_sidecar(self) -> bool {
        matches!(
            self,
            TaskRole::Prestart { sidecar: true } | TaskRole::Poststart { sidecar: true }
        )
    }
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
    /// version (an update's: `updates::kill_timeout_of`).
    #[serde(default)]
    pub kill_timeout: Duration,
    /// The number of its kill signal (SIGKILL: no grace follows it).
    #[serde(default = "default_kill_signal")]
    pub kill_signal: i32,
    /// It runs [`crate::KILL_SIGNAL_WITNESS`] from its kill signal's trap
    /// and never ends before that signal: whether the signal reached it is
    /// judged.
    #[serde(default)]
    pub reports_kill_signal: bool,
}

fn forever() -> Duration {
    Duration::MAX
}

/// Nomad's default kill signal.
fn default_kill_signal() -> i32 {
    nix::sys::signal::Signal::SIGINT as i32
}

impl TaskShape {
    /// A task of `role` whose policy allows `restart_attempts` restarts in
    /// an interval longer than any run, restarted on failure only, killed
    /// at once when told to die, by SIGINT.
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
            kill_signal: default_kill_signal(),
            reports_kill_signal: false,
        }
    }
}

/// What the kernel was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    Allow,
    Deny,
}

/// One answered exec, in the order the gate answered them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRecord {
    /// 1-based, gap-free.
    pub seq: u64,
    pub pid: i32,
    pub exe: PathBuf,
    pub identity: ExecIdentity,
    pub verdict: Answer,
    /// The denial's reason, or why the judge was bypassed; empty for a plain allow.
    pub reason: String,
    /// False for an exec allowed without asking the judge because the gate was stopping.
    pub judged: bool,
    /// For a task's process: the other processes in its task cgroup while
    /// the exec was held (from the kernel), so a second tree shows.
    #[serde(default)]
    pub cgroup_peers: Vec<i32>,
    /// For an executor: the other live executors of its task while the
    /// exec was held (from `/proc`), so a second launch beside a living
    /// executor shows.
    #[serde(default)]
    pub executor_peers: Vec<i32>,
    /// For a task's first exec: the job version its spec gives it (see
    /// `updates`).
    #[serde(default)]
    pub started_version: Option<StartedVersion>,
}

#[cfg(test)]
impl ExecRecord {
    /// An exec the judge allowed, numbered `seq`, for tests that write
    /// histories by hand.
    pub(crate) fn allowed(seq: u64, identity: ExecIdentity) -> ExecRecord {
        ExecRecord {
            seq,
            pid: 100 + seq as i32,
            exe: "/marked/bin/busybox".into(),
            identity,
            verdict: Answer::Allow,
            reason: String::new(),
            judged: true,
            cgroup_peers: Vec::new(),
            executor_peers: Vec::new(),
            started_version: None,
        }
    }
}

/// The `env` entry the harness's updates set to the job version.
pub const JOB_VERSION_ENV: &str = "TASKGATE_JOB_VERSION";
/// The `meta` entry the harness's updates set to the job version.
pub const JOB_VERSION_META: &str = "job_version";

/// The job version a task was exec'd with, as its two entries say it (a
/// job no update touched has neither), and the kill timeout its spec gives
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedVersion {
    pub env: Option<String>,
    pub meta: Option<String>,
    #[serde(default)]
    pub kill_timeout: Option<Duration>,
}

impl StartedVersion {
    /// The version, if both entries agree on one (neither: version 0).
    pub(crate) fn whole(&self) -> Option<u64> {
        match (&self.env, &self.meta) {
            (None, None) => Some(0),
            (Some(env), Some(meta)) if env == meta => env.parse().ok(),
            _ => None,
        }
    }

    /// Reads the version from the spec `pid` holds on [`SPEC_FD`]: only a
    /// task's first exec still does (close-on-exec fds close after the
    /// permission check). `None` for any other process.
    pub fn of_pid(pid: i32) -> Option<StartedVersion> {
        let fd = format!("/proc/{pid}/fd/{SPEC_FD}");
        parse_spec_fd_target(&std::fs::read_link(&fd).ok()?)?;
        let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&fd).ok()?).ok()?;
        let env = spec.get("env")?;
        let entry = |name: &str| env.get(name).and_then(|v| v.as_str()).map(str::to_string);
        // The executor's spec gives it in milliseconds.
        let kill_timeout = spec
            .get("kill_timeout")
            .and_then(|t| t.as_u64())
            .map(Duration::from_millis);
        Some(StartedVersion {
            env: entry(JOB_VERSION_ENV),
            meta: entry(&format!("NOMAD_META_{JOB_VERSION_META}")),
            kill_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_round_trips_through_json() {
        let hit = |seq, name: &str| {
            Event::FaultHit(Hit {
                detail: None,
                seq,
                point: name.parse().unwrap(),
                action: None,
                at_us: 0,
            })
        };
        let history = vec![
            hit(0, "web:tr.before_driver_start"),
            Event::Exec(ExecRecord::allowed(
                1,
                ExecIdentity::Executor {
                    alloc_id: "a1".into(),
                    task: "web".into(),
                },
            )),
            Event::StopDelivered { seq: 1 },
            Event::TaskEvent {
                task: "web".into(),
                kind: TaskEventKind::Started,
                attempt: 1,
                failed: false,
                message: "Task started by client".into(),
            },
            Event::AgentRestarted { stop: true },
        ];
        let json = serde_json::to_string(&history).unwrap();
        assert_eq!(serde_json::from_str::<Vec<Event>>(&json).unwrap(), history);
    }
}
