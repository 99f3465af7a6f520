//! Creating the task process directly inside its new namespaces, and
//! making them the task's own: its cgroup namespace, its root, its hostname,
//! its loopback.

use super::rootfs;
use super::syscalls::Syscalls;
use crate::error::ExecutorError;
use crate::spec::TaskSpec;
use crate::validate::Credentials;
use nix::sched::CloneFlags;
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
use nix::unistd::Pid;
use std::os::fd::AsRawFd;
use std::path::Path;
use taskgate_faults::{points, Faults};

#[cfg(test)]
mod tests;

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
    let flags = clone_flags(network_isolation);
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

/// The namespaces the task process is cloned into.
fn clone_flags(network_isolation: bool) -> CloneFlags {
    let mut flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWIPC;
    if network_isolation {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    flags
}

/// Run in the task process once it is in its cgroup, before anything of
/// the task's own: roots its cgroup namespace there, builds and enters its
/// root on `root_dir` ([`rootfs::enter_root`]), names its host, and brings
/// up its loopback if it has a network namespace of its own.
pub(crate) fn set_up_namespaces(
    sys: &impl Syscalls,
    faults: &Faults,
    spec: &TaskSpec,
    root_dir: &Path,
    creds: &Credentials,
) -> Result<(), ExecutorError> {
    // The task is in its cgroup by now: its cgroup namespace is rooted
    // there, so /proc/self/cgroup names no host path.
    sys.unshare(CloneFlags::CLONE_NEWCGROUP)
        .map_err(ExecutorError::io("unshare the cgroup namespace"))?;
    rootfs::enter_root(sys, root_dir, spec, creds)?;
    taskgate_faults::fault_point!(
        faults,
        points::EX_AFTER_MOUNTS,
        spec.task_name.as_str(),
        |msg| { Err(ExecutorError::Injected(msg)) }
    );
    sys.sethostname(&spec.task_name)
        .map_err(ExecutorError::io("sethostname"))?;
    if spec.network_isolation {
        sys.bring_up_loopback()?;
    }
    Ok(())
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
