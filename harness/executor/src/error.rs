//! Every way launching or supervising a task can fail. The enum is plain data
//! (serializable) because the executor process reports its errors to the
//! client over a pipe or socket, and the client must see the same variant.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum ExecutorError {
    #[error("task directory {path} does not exist")]
    TaskDirMissing { path: PathBuf },
    #[error("{what} path {path} must be absolute")]
    RelativePath { what: String, path: PathBuf },
    #[error("{what} path {path} does not exist")]
    PathMissing { what: String, path: PathBuf },
    #[error("{what} path {path} must not contain `..` or be `/`")]
    UnsafePath { what: String, path: PathBuf },
    #[error("invalid task name {name:?}: {reason}")]
    InvalidTaskName { name: String, reason: String },
    #[error("invalid alloc id {id:?}: {reason}")]
    InvalidAllocId { id: String, reason: String },
    #[error("the task has no command")]
    MissingCommand,
    #[error("invalid limit {name} = {value}: {reason}")]
    InvalidLimit {
        name: String,
        value: u64,
        reason: String,
    },
    #[error("unknown user {user:?}: not in the host's /etc/passwd")]
    UnknownUser { user: String },
    #[error("unknown signal {signal:?}")]
    InvalidSignal { signal: String },
    #[error("an executor for this task is already serving {socket}")]
    AlreadyRunning { socket: PathBuf },
    #[error("socket path {path} is longer than a Unix socket address allows")]
    SocketPathTooLong { path: PathBuf },
    #[error("cgroup: {0}")]
    Cgroup(String),
    #[error("mount {target}: {message}")]
    Mount { target: PathBuf, message: String },
    #[error("task isolation: {0}")]
    Isolation(String),
    #[error("exec {command}: {message}")]
    Exec { command: String, message: String },
    #[error("{context}: {message}")]
    Io { context: String, message: String },
    /// Something a task may have planted where the host side opens a file.
    #[error(transparent)]
    Refused(#[from] crate::confined::Refusal),
    #[error(
        "the executor died before reporting readiness (its first process: {first_exit}); see {log}"
    )]
    Vanished { log: PathBuf, first_exit: String },
    #[error("executor protocol: {0}")]
    Protocol(String),
    #[error("bad executor faults (TASKGATE_FAULTS): {0}")]
    Failpoints(String),
    #[error("{0}")]
    Injected(String),
}

impl ExecutorError {
    /// Adapter for `map_err`: an I/O or errno failure with what was being done.
    pub(crate) fn io<E: std::fmt::Display>(context: impl Into<String>) -> impl FnOnce(E) -> Self {
        let context = context.into();
        move |e| ExecutorError::Io {
            context,
            message: e.to_string(),
        }
    }
}

impl From<crate::confined::ConfinedError> for ExecutorError {
    fn from(e: crate::confined::ConfinedError) -> Self {
        use crate::confined::ConfinedError;
        match e {
            ConfinedError::Refused(refusal) => ExecutorError::Refused(refusal),
            ConfinedError::Io { what, path, source } => ExecutorError::Io {
                context: format!("{what} {}", path.display()),
                message: source.to_string(),
            },
        }
    }
}
