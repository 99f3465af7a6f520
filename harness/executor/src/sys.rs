//! Thin wrappers over syscalls that nix does not cover.

use crate::error::ExecutorError;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{SystemTime, UNIX_EPOCH};

/// A pidfd pins a process's identity: signals and polls through it cannot hit a reused pid.
pub(crate) fn pidfd_open(pid: i32) -> Result<OwnedFd, ExecutorError> {
    raw_pidfd_open(pid).map_err(ExecutorError::io(format!("pidfd_open({pid})")))
}

/// [`pidfd_open`], or `None` for a process that has already exited.
pub fn pidfd_open_if_alive(pid: i32) -> Result<Option<OwnedFd>, ExecutorError> {
    match raw_pidfd_open(pid) {
        Ok(fd) => Ok(Some(fd)),
        Err(err) if err.raw_os_error() == Some(libc::ESRCH) => Ok(None),
        Err(err) => Err(ExecutorError::io(format!("pidfd_open({pid})"))(err)),
    }
}

fn raw_pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: plain syscall; on success it returns a new fd that we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: see above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Signals the process behind `pidfd`; a process that already exited is not an error.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, signal: Signal) -> Result<(), ExecutorError> {
    // SAFETY: plain syscall on a valid pidfd, no siginfo.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal as i32,
            0usize,
            0u32,
        )
    };
    let err = std::io::Error::last_os_error();
    if rc < 0 && err.raw_os_error() != Some(libc::ESRCH) {
        return Err(ExecutorError::io(format!("send {signal} to the task"))(err));
    }
    Ok(())
}

/// Blocks until the process behind `pidfd` has exited.
pub(crate) fn wait_exited(pidfd: BorrowedFd<'_>) -> Result<(), ExecutorError> {
    let mut fds = [PollFd::new(pidfd, PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ExecutorError::io("wait for a process to exit")(e)),
            Ok(_) => return Ok(()),
        }
    }
}

/// Wall-clock time in ms since the epoch, as records and exits carry it.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `flock(file, op)` with `LOCK_NB` in `op`: whether the lock was taken
/// (`false`: another open file holds a conflicting one). Without
/// `LOCK_NB` it waits, retrying a wait a signal cut short.
pub(crate) fn flock(file: &std::fs::File, op: libc::c_int) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: plain syscall on an fd the caller owns.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}

/// Whether `path` still names the open `file` (a holder may have removed
/// it between our open and our lock).
pub fn same_file(file: &std::fs::File, path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(held), Ok(named)) => held.dev() == named.dev() && held.ino() == named.ino(),
        _ => false,
    }
}
