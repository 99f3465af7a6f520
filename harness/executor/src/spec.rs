//! The contract between the engine and an executor process: what to run and
//! how it ended. Serialized as JSON over the executor's Unix socket and into
//! the engine's state database, so every field is plain data.

use nix::sys::resource::Resource;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Nomad's exec-driver default `chroot_env`: host path -> path inside the task root.
pub fn default_chroot_env() -> BTreeMap<PathBuf, PathBuf> {
    ["/bin", "/etc", "/lib", "/lib64", "/sbin", "/usr"]
        .iter()
        .map(|p| (PathBuf::from(p), PathBuf::from(p)))
        .collect()
}

/// Everything an executor needs to start one task.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskSpec {
    pub alloc_id: String,
    pub task_name: String,
    /// `<alloc dir>/<task>`: holds `local/`, `secrets/`, `tmp/` and `executor.out`.
    pub task_dir: PathBuf,
    /// `<alloc dir>/alloc`: the directory shared by all tasks of the allocation (holds `logs/`).
    pub shared_alloc_dir: PathBuf,
    /// Host directories bind-mounted read-only into the task root (host path -> task path).
    pub chroot_env: BTreeMap<PathBuf, PathBuf>,
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// User name (from the host's /etc/passwd) the task runs as.
    pub user: String,
    pub resources: Resources,
    /// Give the task its own (empty, loopback-only) network namespace.
    pub network_isolation: bool,
    pub logs: LogConfig,
    /// Signal sent first on stop, e.g. "SIGTERM" or "SIGINT".
    pub kill_signal: crate::KillSignal,
    #[serde(with = "duration_ms")]
    pub kill_timeout: Duration,
    pub rlimits: Rlimits,
    /// Written to the task's `/proc/self/oom_score_adj` (-1000..=1000).
    pub oom_score_adj: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Resources {
    /// Relative CPU weight (Nomad's MHz figure is mapped onto cpu.shares / cpu.weight).
    pub cpu_shares: u64,
    /// At most [`MAX_MEMORY_MB`].
    pub memory_mb: u64,
    /// At most [`MAX_PIDS`].
    pub pids_max: u64,
}

/// The largest memory limit a cgroup takes: its byte count must fit an `i64`.
pub const MAX_MEMORY_MB: u64 = (i64::MAX as u64) >> 20;

/// The largest `pids.max` the kernel takes: its pid limit on 64-bit
/// (`PID_MAX_LIMIT`, 4M).
pub const MAX_PIDS: u64 = 4 * 1024 * 1024;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LogConfig {
    pub max_files: u32,
    pub max_file_size_bytes: u64,
}

/// One resource limit: what the task may use (soft), and how far it may
/// raise that (hard). `u64::MAX` is unlimited.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Limit {
    pub soft: u64,
    pub hard: u64,
}

impl Limit {
    pub const UNLIMITED: Limit = Limit::both(u64::MAX);

    pub const fn both(value: u64) -> Limit {
        Limit {
            soft: value,
            hard: value,
        }
    }
}

/// Every resource limit a task has, each set when it starts: none is
/// inherited from the agent (whose own limits a unit's `Limit*=` may have
/// raised or cut). The defaults are what a task gets unless its spec says
/// otherwise; the executor lowers one to its own hard limit when it lacks
/// the privilege (CAP_SYS_RESOURCE) to go above it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Rlimits {
    /// RLIMIT_AS: unlimited; the memory cgroup is the task's memory limit.
    pub address_space: Limit,
    /// RLIMIT_CORE: 0, no core dumps (they would land in the task's root).
    pub core: Limit,
    /// RLIMIT_CPU: unlimited.
    pub cpu: Limit,
    /// RLIMIT_DATA: unlimited.
    pub data: Limit,
    /// RLIMIT_FSIZE: unlimited.
    pub file_size: Limit,
    /// RLIMIT_LOCKS: unlimited.
    pub locks: Limit,
    /// RLIMIT_MEMLOCK: 8 MiB, the kernel's default.
    pub memlock: Limit,
    /// RLIMIT_MSGQUEUE: 800 KiB, the kernel's default.
    pub msgqueue: Limit,
    /// RLIMIT_NICE: 0, no priority above the default.
    pub nice: Limit,
    /// RLIMIT_NOFILE: 1024, as runc's default spec has it.
    pub nofile: Limit,
    /// RLIMIT_NPROC: unlimited; it counts every process of the user on the
    /// host, and the pids cgroup limits the task's own.
    pub nproc: Limit,
    /// RLIMIT_RSS: unlimited (the kernel ignores it).
    pub rss: Limit,
    /// RLIMIT_RTPRIO: 0, no real-time scheduling.
    pub rtprio: Limit,
    /// RLIMIT_RTTIME: unlimited.
    pub rttime: Limit,
    /// RLIMIT_SIGPENDING: 16384 queued signals.
    pub sigpending: Limit,
    /// RLIMIT_STACK: 8 MiB, raisable.
    pub stack: Limit,
}

impl Default for Rlimits {
    fn default() -> Self {
        Rlimits {
            address_space: Limit::UNLIMITED,
            core: Limit::both(0),
            cpu: Limit::UNLIMITED,
            data: Limit::UNLIMITED,
            file_size: Limit::UNLIMITED,
            locks: Limit::UNLIMITED,
            memlock: Limit::both(8 << 20),
            msgqueue: Limit::both(819_200),
            nice: Limit::both(0),
            nofile: Limit::both(1024),
            nproc: Limit::UNLIMITED,
            rss: Limit::UNLIMITED,
            rtprio: Limit::both(0),
            rttime: Limit::UNLIMITED,
            sigpending: Limit::both(16_384),
            stack: Limit {
                soft: 8 << 20,
                hard: u64::MAX,
            },
        }
    }
}

impl Rlimits {
    /// Every limit with its resource (whose `Debug` is the name `setrlimit`
    /// and the OCI runtime spec give it, e.g. `RLIMIT_NOFILE`).
    pub fn each(&self) -> [(Resource, Limit); 16] {
        [
            (Resource::RLIMIT_AS, self.address_space),
            (Resource::RLIMIT_CORE, self.core),
            (Resource::RLIMIT_CPU, self.cpu),
            (Resource::RLIMIT_DATA, self.data),
            (Resource::RLIMIT_FSIZE, self.file_size),
            (Resource::RLIMIT_LOCKS, self.locks),
            (Resource::RLIMIT_MEMLOCK, self.memlock),
            (Resource::RLIMIT_MSGQUEUE, self.msgqueue),
            (Resource::RLIMIT_NICE, self.nice),
            (Resource::RLIMIT_NOFILE, self.nofile),
            (Resource::RLIMIT_NPROC, self.nproc),
            (Resource::RLIMIT_RSS, self.rss),
            (Resource::RLIMIT_RTPRIO, self.rtprio),
            (Resource::RLIMIT_RTTIME, self.rttime),
            (Resource::RLIMIT_SIGPENDING, self.sigpending),
            (Resource::RLIMIT_STACK, self.stack),
        ]
    }
}

/// The task's `oom_score_adj` unless its spec says otherwise: neutral,
/// whatever the agent's own (a unit's `OOMScoreAdjust=`).
pub const DEFAULT_OOM_SCORE_ADJ: i32 = 0;

/// What a stop found: the executor decides, under the lock its reaper
/// records the exit with, so the answer and the exit's record agree.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum StopOutcome {
    /// The task was alive and got the signal (and, past the grace, SIGKILL).
    Signaled,
    /// The task had already exited on its own: nothing was sent.
    AlreadyExited,
}

/// How a task process ended, as reported by its executor.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitResult {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub oom_killed: bool,
    /// Milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    pub exited_at_ms: u64,
}

impl ExitResult {
    /// An exit with `code` whose times are not known (0).
    pub fn with_code(code: i32) -> ExitResult {
        ExitResult {
            exit_code: Some(code),
            signal: None,
            oom_killed: false,
            started_at_ms: 0,
            exited_at_ms: 0,
        }
    }

    pub fn successful(&self) -> bool {
        self.exit_code == Some(0) && self.signal.is_none() && !self.oom_killed
    }
}

/// What an engine must persist to find a running executor again after it restarts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReattachInfo {
    pub socket_path: PathBuf,
    pub executor_pid: i32,
    pub task_pid: i32,
}

mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}
