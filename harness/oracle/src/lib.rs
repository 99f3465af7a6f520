//! The exec oracle: every exec of a file on a dedicated tmpfs pauses in the
//! kernel (fanotify `FAN_OPEN_EXEC_PERM`) until the harness has checked facts
//! on the filesystem and answered allow or deny. The engine under test cannot
//! bypass it: the check happens in the exec'ing process's own `execve`.
//!
//! - [`marked_fs`]: the tmpfs whose superblock is marked, and the private
//!   mount namespace it must be mounted in.
//! - [`gate`]: the fanotify group and the thread answering its events.
//! - [`identity`]: which executor or task an exec'ing process belongs to.
//! - [`layout`]: the task directory layout that must exist before an exec.
//! - [`judge`]: the rule each pending exec is answered by.
//! - [`invariants`], [`lifecycle`], [`updates`], [`restarts`], [`policy`],
//!   [`liveness`], [`kills`]: checks over a whole recorded history of a run
//!   ([`attempts`] reads each task's attempts from it).

mod attempts;
pub mod gate;
pub mod identity;
pub mod invariants;
pub mod judge;
pub mod kills;
pub mod layout;
pub mod lifecycle;
pub mod liveness;
pub mod marked_fs;
pub mod policy;
pub mod restarts;
#[cfg(test)]
mod timed_history;
pub mod updates;

pub use gate::{Answer, ExecGate, ExecRecord, Judge, PendingExec, Verdict};
pub use identity::ExecIdentity;
pub use invariants::{
    check, check_with, AllocStatus, Event, InvariantConfig, TaskEventKind, TaskExit, TaskRole,
    TaskShape, Violation,
};
/// Every invariant's name, as violations and known-violation markers name them.
pub const INVARIANTS: &[&str] = &[
    invariants::LAYOUT_BEFORE_EXEC,
    invariants::NO_EXEC_AFTER_TERMINAL,
    invariants::ONE_EXEC_PER_ATTEMPT,
    invariants::STARTED_TASKS_END,
    lifecycle::NO_RESTART_AFTER_COMPLETION,
    lifecycle::NO_EXEC_AFTER_KILL,
    lifecycle::ONE_LIVE_TREE,
    lifecycle::KILL_ORDER,
    lifecycle::POSTSTOP_ONCE,
    lifecycle::STATUS_MATCHES_EXITS,
    lifecycle::NO_SURVIVORS,
    lifecycle::RESTARTS_MONOTONIC,
    lifecycle::START_ORDER,
    lifecycle::ATTEMPTS_WITHIN_POLICY,
    lifecycle::EXITS_OBSERVED,
    updates::UPDATES_WHOLE,
    restarts::RESTART_ORDER,
    policy::LAUNCHES_ACCOUNTED,
    liveness::COMMANDS_TAKE_EFFECT,
    policy::RESTART_WINDOWS,
    kills::KILL_GRACE,
];

pub use judge::{judge, RunFacts, DENY_LAYOUT, DENY_TERMINAL};
pub use layout::check_task_layout;
pub use marked_fs::{enter_private_mount_namespace, MarkedFs, MARKED_FS_SOURCE};

use nix::errno::Errno;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    /// A system call failed; `what` names the step.
    #[error("{what}: {errno}")]
    Sys { what: &'static str, errno: Errno },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the calling thread shares init's mount namespace; enter a private one first")]
    HostNamespace,
    #[error("{0} is not empty: mounting over it would hide its contents")]
    NotEmpty(PathBuf),
    /// Refused so that a wrong path can never gate execs of the host's own filesystems.
    #[error("{0} is not the root of a marked tmpfs mount; refusing to mark its filesystem")]
    NotMarkedFs(PathBuf),
    #[error("exec gate failed: {0}")]
    GateFailed(String),
}

impl OracleError {
    fn sys(what: &'static str) -> impl FnOnce(Errno) -> OracleError {
        move |errno| OracleError::Sys { what, errno }
    }

    fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> OracleError {
        let path = path.into();
        move |source| OracleError::Io { what, path, source }
    }
}
