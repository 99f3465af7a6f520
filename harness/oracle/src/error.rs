//! The oracle's errors.

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
    pub(crate) fn sys(what: &'static str) -> impl FnOnce(Errno) -> OracleError {
        move |errno| OracleError::Sys { what, errno }
    }

    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> OracleError {
        let path = path.into();
        move |source| OracleError::Io { what, path, source }
    }
}
