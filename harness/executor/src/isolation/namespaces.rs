//! Creating the task process directly inside its new namespaces.

use crate::error::ExecutorError;
use nix::sched::CloneFlags;
use nix::unistd::Pid;

pub(crate) enum Forked {
    Parent(Pid),
    Child,
}

/// Fork-like clone into new mount, PID, UTS and IPC (and optionally network)
/// namespaces: the child is PID 1 of its PID namespace, so its death takes
/// every process of the task with it.
///
/// # Safety
/// As for `fork`: the caller must be single-threaded, so the child inherits
/// no lock held by another thread.
pub(crate) unsafe fn clone_task(network_isolation: bool) -> Result<Forked, ExecutorError> {
    let mut flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWIPC;
    if network_isolation {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    // A null stack makes clone behave like fork (copy-on-write, same stack).
    let rc = libc::syscall(libc::SYS_clone, flags.bits() as libc::c_ulong | libc::SIGCHLD as libc::c_ulong, 0usize, 0usize, 0usize, 0usize);
    match rc {
        -1 => Err(ExecutorError::Isolation(format!(
            "clone into new namespaces: {}",
            std::io::Error::last_os_error()
        ))),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(Pid::from_raw(pid as i32))),
    }
}
