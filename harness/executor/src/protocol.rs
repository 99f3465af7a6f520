//! What the client and the executor process say to each other: one JSON
//! line for readiness on an inherited pipe, then one request line and one
//! response line per connection on the executor's Unix socket.

use crate::error::ExecutorError;
use crate::spec::{ExitResult, ReattachInfo, StopOutcome, TaskSpec};
use crate::validate::Credentials;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

/// The executor reads its spec from this fd (the oracle relies on it too).
pub const SPEC_FD: RawFd = 3;
/// The executor writes its one [`Ready`] line to this fd.
pub(crate) const READY_FD: RawFd = 4;
/// The task's lock (see `task_lock`), which the executor holds until it exits.
pub(crate) const LOCK_FD: RawFd = 5;

/// The file an executor reads on [`SPEC_FD`]: its task's spec, and beside
/// the spec's fields the host ids its launcher resolved the task's user to
/// (see [`Credentials`]).
///
/// An executor installed beside a running agent of an older release reads
/// that agent's spec files, which have no `run_as`: it refuses them by
/// name ([`SpecFile::run_as`]), not as a garbled file.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SpecFile<S> {
    #[serde(flatten)]
    pub spec: S,
    #[serde(default)]
    pub run_as: Option<Credentials>,
}

impl<S> SpecFile<S> {
    /// The ids the task runs as, which every launcher of this release writes.
    pub fn run_as(&self) -> Result<Credentials, ExecutorError> {
        self.run_as.ok_or_else(|| {
            ExecutorError::Protocol(format!(
                "the spec on fd {SPEC_FD} has no run_as: its launcher is of an older \
                 taskgate release than this executor (restart the agent once both \
                 binaries are installed)"
            ))
        })
    }
}

/// `sun_path` is 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Ready {
    /// First, from the daemon: its pid. Should it fail or die, `launch`
    /// waits for its exit by it, so nothing of it (its place in the
    /// executors' cgroup included) outlives the launch.
    Daemon(i32),
    Started(ReattachInfo),
    /// The executor exits right after this.
    Failed(ExecutorError),
}

/// Why a task is doomed: a runner was told to die (or the executor shuts
/// down, or a kill signal went out), or to restart it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Doom {
    Kill,
    Restart,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Request {
    Info,
    Wait,
    /// Asked by a runner told to die or to restart (`by`): the task's
    /// exit, if it was its own end (reaped before a runner so told found
    /// it running, and before any kill signal); the answer never waits for
    /// one. An answer of none dooms the task, for `by` unless it already
    /// was: whatever ends it from then on is the kill's or the restart's.
    Peek {
        by: Doom,
    },
    /// Whether the task is doomed, and by what: a restored runner takes
    /// up what a dead agent's runner began.
    Doomed,
    /// Signals the task, then kills its cgroup after the grace; dooms it
    /// for `by` unless it already was.
    Stop {
        signal: crate::KillSignal,
        grace_ms: u64,
        by: Doom,
    },
    Shutdown,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Response {
    Info(ReattachInfo),
    Exited(ExitResult),
    Peeked(Option<ExitResult>),
    Doomed(Option<Doom>),
    Stopped(StopOutcome),
    Done,
    Failed(ExecutorError),
}

/// Where one task's executor keeps its files inside the run dir.
#[derive(Debug, Clone)]
pub(crate) struct RunPaths {
    pub spec: PathBuf,
    pub socket: PathBuf,
    /// Held by the one executor of the task (see `task_lock`).
    pub lock: PathBuf,
    /// Empty host directory the task's root tmpfs is mounted on (in the task's namespace only).
    pub root: PathBuf,
}

impl RunPaths {
    pub fn new(run_dir: &Path, spec: &TaskSpec) -> Result<RunPaths, ExecutorError> {
        Self::for_task(run_dir, &spec.alloc_id, &spec.task_name)
    }

    pub fn for_task(
        run_dir: &Path,
        alloc_id: &str,
        task_name: &str,
    ) -> Result<RunPaths, ExecutorError> {
        let stem = format!("{alloc_id}.{task_name}");
        let paths = RunPaths {
            spec: run_dir.join(spec_file_name(alloc_id, task_name)),
            socket: socket_path(run_dir, alloc_id, task_name),
            lock: lock_path(run_dir, alloc_id, task_name),
            root: run_dir.join(format!("{stem}.root")),
        };
        check_socket_path(&paths.socket)?;
        Ok(paths)
    }
}

/// Refuses a socket path a Unix socket address cannot hold: a run dir deep
/// enough for that fails the task's start.
pub fn check_socket_path(socket: &Path) -> Result<(), ExecutorError> {
    if socket.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(ExecutorError::SocketPathTooLong {
            path: socket.to_path_buf(),
        });
    }
    Ok(())
}

/// The name of the spec file an executor holds open on [`SPEC_FD`] for its
/// whole life: `<alloc_id>.<task_name>.spec.json` (the oracle reads it).
pub fn spec_file_name(alloc_id: &str, task_name: &str) -> String {
    format!("{alloc_id}.{task_name}.spec.json")
}

/// Where the executor of `task_name` in `alloc_id` listens: deterministic, so
/// an engine that lost a task's [`ReattachInfo`] can still find its executor.
pub fn socket_path(run_dir: &Path, alloc_id: &str, task_name: &str) -> PathBuf {
    run_dir.join(format!("{alloc_id}.{task_name}.sock"))
}

/// Whether `file_name`, in a run dir, is the socket of one of `alloc_id`'s
/// executors (see [`socket_path`]).
pub fn is_socket_of(file_name: &str, alloc_id: &str) -> bool {
    (file_name.strip_prefix(alloc_id))
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|task| task.ends_with(".sock"))
}

/// The task's lock file (see `task_lock`): one executor of the task at a time.
pub fn lock_path(run_dir: &Path, alloc_id: &str, task_name: &str) -> PathBuf {
    run_dir.join(format!("{alloc_id}.{task_name}.lock"))
}

pub(crate) fn send<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), ExecutorError> {
    let mut line = serde_json::to_vec(msg).map_err(|e| ExecutorError::Protocol(e.to_string()))?;
    line.push(b'\n');
    w.write_all(&line)
        .and_then(|()| w.flush())
        .map_err(ExecutorError::io("send to executor peer"))
}

/// Reads one message; `what` names the peer for the error when it hung up instead.
pub(crate) fn recv<T: DeserializeOwned>(
    r: &mut impl BufRead,
    what: &str,
) -> Result<T, ExecutorError> {
    recv_or_eof(r, what)?.ok_or_else(|| {
        ExecutorError::Protocol(format!("{what} closed the connection without a reply"))
    })
}

/// Reads one message, or `None` if the peer closed without sending one.
pub(crate) fn recv_or_eof<T: DeserializeOwned>(
    r: &mut impl BufRead,
    what: &str,
) -> Result<Option<T>, ExecutorError> {
    let mut line = String::new();
    let n = r
        .read_line(&mut line)
        .map_err(ExecutorError::io(format!("read from {what}")))?;
    if n == 0 {
        return Ok(None);
    }
    serde_json::from_str(&line)
        .map(Some)
        .map_err(|e| ExecutorError::Protocol(format!("bad message from {what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The executor reads back what its launcher wrote; the spec's fields
    /// stay at the top, where the oracle reads the version and kill
    /// timeout of an attempt.
    #[test]
    fn a_spec_file_carries_the_spec_and_its_users_ids() {
        let mut spec = crate::isolation::rootfs::tests::spec();
        spec.env.insert("NOMAD_JOB_VERSION".into(), "3".into());
        let run_as = crate::isolation::rootfs::tests::creds(65534, 65533);
        let json = serde_json::to_vec(&SpecFile {
            spec: &spec,
            run_as: Some(run_as),
        })
        .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(value["env"]["NOMAD_JOB_VERSION"], "3");
        assert_eq!(value["kill_timeout"], 5000);
        assert_eq!(
            value["run_as"],
            serde_json::json!({"uid": 65534, "gid": 65533})
        );
        let read: SpecFile<TaskSpec> = serde_json::from_slice(&json).unwrap();
        assert_eq!(read.run_as().unwrap(), run_as);
        assert_eq!(read.spec, spec);
    }

    /// An older launcher's spec (no ids) is refused by what it lacks; ids
    /// that would leave the executor's own in place are no ids at all.
    #[test]
    fn a_spec_file_without_usable_ids_is_refused() {
        let spec = crate::isolation::rootfs::tests::spec();
        let older = serde_json::to_vec(&spec).unwrap();
        let read: SpecFile<TaskSpec> = serde_json::from_slice(&older).unwrap();
        let refused = read.run_as().unwrap_err().to_string();
        assert!(refused.contains("older taskgate release"), "{refused}");

        let mut value = serde_json::to_value(&spec).unwrap();
        value["run_as"] = serde_json::json!({"uid": u32::MAX, "gid": 0});
        let unchanged = serde_json::from_value::<SpecFile<TaskSpec>>(value);
        assert!(unchanged.is_err(), "{unchanged:?}");
    }

    /// An executor's socket is known as its alloc's, and nothing else is:
    /// not another alloc's whose id it begins with, nor the task's lock.
    #[test]
    fn a_socket_is_known_by_its_alloc() {
        let name = |path: PathBuf| path.file_name().unwrap().to_string_lossy().into_owned();
        let socket = name(socket_path(Path::new("/run"), "a1", "web"));
        assert!(is_socket_of(&socket, "a1"));
        assert!(!is_socket_of(&socket, "a"));
        assert!(!is_socket_of(&socket, "a1.web"));
        assert!(!is_socket_of(
            &name(lock_path(Path::new("/run"), "a1", "web")),
            "a1"
        ));
    }
}
