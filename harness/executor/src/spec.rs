//! The contract between the engine and an executor process: what to run and
//! how it ended. Serialized as JSON over the executor's Unix socket and into
//! the engine's state database, so every field is plain data.

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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Resources {
    /// Relative CPU weight (Nomad's MHz figure is mapped onto cpu.shares / cpu.weight).
    pub cpu_shares: u64,
    pub memory_mb: u64,
    pub pids_max: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LogConfig {
    pub max_files: u32,
    pub max_file_size_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Rlimits {
    pub nofile: u64,
    pub core: u64,
}

impl Default for Rlimits {
    fn default() -> Self {
        Rlimits {
            nofile: 1024,
            core: 0,
        }
    }
}

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
