//! Creating the task process directly inside its new namespaces.

use crate::error::ExecutorError;
use nix::sched::CloneFlags;
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
use nix::unistd::Pid;
use std::os::fd::AsRawFd;

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
    let rc = libc::syscall(
        libc::SYS_clone,
        flags.bits() as libc::c_ulong | libc::SIGCHLD as libc::c_ulong,
        0usize,
        0usize,
        0usize,
        0usize,
    );
    match rc {
        -1 => Err(ExecutorError::Isolation(format!(
            "clone into new namespaces: {}",
            std::io::Error::last_os_error()
        ))),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(Pid::from_raw(pid as i32))),
    }
}

/// A new network namespace holds only `lo`, and down: bring it up so the
/// task can still talk to itself.
pub(crate) fn bring_up_loopback() -> Result<(), ExecutorError> {
    let fail = |what: &str| {
        let what = format!("{what} on lo");
        move |e: std::io::Error| ExecutorError::Isolation(format!("{what}: {e}"))
    };
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| fail("socket")(e.into()))?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the flags member of `req`, which we own.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(fail("SIOCGIFFLAGS")(std::io::Error::last_os_error()));
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(fail("SIOCSIFFLAGS")(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}
