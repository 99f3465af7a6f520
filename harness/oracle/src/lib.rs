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
//!
//! After the run, its whole recorded history is judged:
//!
//! - [`history`]: the records a history is made of (the vocabulary every
//!   check reads), and the shape of the run's tasks.
//! - [`invariant`]: the registry, every invariant by id and statement
//!   ([`ALL`]); [`check()`] judges a history by all of them.
//! - the checks, by concern: [`execs`], [`lifecycle`], [`updates`],
//!   [`restarts`], [`policy`], [`liveness`], [`kills`] (`timeline` and
//!   `attempts` find what they reason over in a history).
//!
//! Modules import only downwards: `history` and `invariant` import no
//! check, `check` imports every check and nothing imports it.

mod attempts;
mod check;
mod error;
pub mod execs;
pub mod gate;
pub mod history;
pub mod identity;
pub mod invariant;
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
mod timeline;
pub mod updates;

pub use check::{check, check_settled, check_with};
pub use error::OracleError;
pub use execs::InvariantConfig;
pub use gate::{ExecGate, Judge, PendingExec, Verdict};
pub use history::{
    AllocStatus, Answer, Event, ExecRecord, StartedVersion, TaskEventKind, TaskExit, TaskRole,
    TaskShape,
};
pub use identity::ExecIdentity;
pub use invariant::{Invariant, UnknownInvariant, Violation, ALL};
pub use judge::{judge, RunFacts, DENY_LAYOUT, DENY_TERMINAL};
pub use kills::KILL_SIGNAL_WITNESS;
pub use layout::check_task_layout;
pub use marked_fs::{enter_private_mount_namespace, MarkedFs, MARKED_FS_SOURCE};
