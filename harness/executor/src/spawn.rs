//! Starting the executor program without forking the launcher.
//!
//! The launcher is the engine: a large process with many threads. A fork
//! copies its page tables, and every page its threads write before the
//! child's exec takes a copy-on-write fault. `posix_spawn` shares the
//! memory until the exec (glibc clones with `CLONE_VM | CLONE_VFORK`), and
//! places the fds an executor is handed with file actions, where a fork
//! would run code of ours between fork and exec.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

/// A process started by [`spawn`]. Its caller waits for it: one dropped
/// unwaited stays a zombie until the launcher exits.
#[must_use = "a spawned process is reaped by waiting for it"]
pub(crate) struct Spawned {
    pid: libc::pid_t,
}

impl Spawned {
    /// Blocks until the process exits, and reaps it.
    pub(crate) fn wait(self) -> io::Result<ExitStatus> {
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child; `status` is a valid out pointer.
            if unsafe { libc::waitpid(self.pid, &mut status, 0) } >= 0 {
                return Ok(ExitStatus::from_raw(status));
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

/// Runs `program` with `args` and exactly the environment `env`. Each
/// `(from, to)` in `fds` becomes the child's fd `to` (clearing its
/// close-on-exec there only); no other fd of the launcher's reaches the
/// child unless it lacks close-on-exec. The signal mask is emptied and
/// `SIGPIPE` restored to its default, as `std::process::Command` does.
///
/// A `from` must not be another entry's `to`: the dups happen in order.
pub(crate) fn spawn(
    program: &Path,
    args: &[&OsStr],
    env: &[(OsString, OsString)],
    fds: &[(BorrowedFd<'_>, RawFd)],
) -> io::Result<Spawned> {
    let cstring = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a NUL byte in the executor's command",
            )
        })
    };
    let path = cstring(program.as_os_str().as_bytes())?;
    let argv = std::iter::once(Ok(path.clone()))
        .chain(args.iter().map(|a| cstring(a.as_bytes())))
        .collect::<io::Result<Vec<_>>>()?;
    let envp = env
        .iter()
        .map(|(k, v)| cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
        .collect::<io::Result<Vec<_>>>()?;
    let null_terminated = |strings: &[CString]| {
        strings
            .iter()
            .map(|s| s.as_ptr().cast_mut())
            .chain(std::iter::once(std::ptr::null_mut()))
            .collect::<Vec<_>>()
    };
    let (argv_ptrs, envp_ptrs) = (null_terminated(&argv), null_terminated(&envp));

    let mut actions = FileActions::new()?;
    for (from, to) in fds {
        actions.dup2(from.as_raw_fd(), *to)?;
    }
    let attr = Attributes::new()?;
    let mut pid = 0;
    // SAFETY: every pointer is valid for the call: the path and the
    // NULL-terminated argv and envp point into CStrings alive until it
    // returns, and `actions` and `attr` are initialised.
    check(unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            actions.as_ptr(),
            attr.as_ptr(),
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
        )
    })?;
    Ok(Spawned { pid })
}

/// posix_spawn's calls return the error number instead of setting errno.
fn check(rc: libc::c_int) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Owns an initialised `posix_spawn_file_actions_t`, destroyed on drop.
struct FileActions(Box<libc::posix_spawn_file_actions_t>);

impl FileActions {
    fn new() -> io::Result<Self> {
        // SAFETY: zeroed storage, initialised by the call before any use.
        let mut actions = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `actions` points to storage of the right type.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut *actions) })?;
        Ok(FileActions(actions))
    }

    fn dup2(&mut self, from: RawFd, to: RawFd) -> io::Result<()> {
        // SAFETY: initialised in `new`; both are plain fd numbers.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut *self.0, from, to) })
    }

    fn as_ptr(&self) -> *const libc::posix_spawn_file_actions_t {
        &*self.0
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut *self.0) };
    }
}

/// Owns an initialised `posix_spawnattr_t` with the signal state a child
/// starts with, destroyed on drop.
struct Attributes(Box<libc::posix_spawnattr_t>);

impl Attributes {
    fn new() -> io::Result<Self> {
        // SAFETY: zeroed storage, initialised by the call before any use.
        let mut attr = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `attr` points to storage of the right type.
        check(unsafe { libc::posix_spawnattr_init(&mut *attr) })?;
        let mut attr = Attributes(attr);
        let raw: *mut libc::posix_spawnattr_t = &mut *attr.0;
        // SAFETY: the sets are initialised by sigemptyset/sigaddset before
        // they are read; `raw` points to the initialised attributes.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            let mut pipe: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut pipe);
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            check(libc::posix_spawnattr_setsigmask(raw, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(raw, &pipe))?;
            check(libc::posix_spawnattr_setflags(
                raw,
                (libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF) as libc::c_short,
            ))?;
        }
        Ok(attr)
    }

    fn as_ptr(&self) -> *const libc::posix_spawnattr_t {
        &*self.0
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut *self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;

    /// The child gets the fds it is handed at their numbers, the
    /// environment it is given and no other, and its exit status returns.
    #[test]
    fn a_spawned_child_sees_its_fds_and_environment() {
        let (mut read, write) = std::io::pipe().unwrap();
        let script = "echo \"$ONLY_VAR:$HOME\" >&7; exit 3";
        let child = spawn(
            Path::new("/bin/sh"),
            &[OsStr::new("-c"), OsStr::new(script)],
            &[("ONLY_VAR".into(), "set".into())],
            &[(write.as_fd(), 7)],
        )
        .unwrap();
        drop(write);
        let mut out = String::new();
        read.read_to_string(&mut out).unwrap();
        assert_eq!(out, "set:\n");
        assert_eq!(child.wait().unwrap().code(), Some(3));
    }

    #[test]
    fn a_missing_program_is_an_error_at_spawn() {
        let err = spawn(Path::new("/nonexistent/executor"), &[], &[], &[])
            .err()
            .unwrap();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
