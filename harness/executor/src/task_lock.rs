//! One executor per task at a time. A task's lock file in the run dir is
//! locked (`flock`, exclusive) by the launch before it writes anything, and
//! the lock is handed to the executor it spawns, which holds it until it
//! exits. A second launch for the same task is refused while any earlier
//! executor lives, whether or not that one has bound its socket yet (B4:
//! the socket's check-then-bind was the only guard, and two executors ran).
//!
//! The file is removed only by a holder of the lock; whoever takes the lock
//! checks that the path still names the file it locked, else tries again.

use crate::error::ExecutorError;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use taskgate_faults::seeded::SeededBug;

pub(crate) struct TaskLock {
    file: File,
}

impl TaskLock {
    /// Takes the lock if no live executor holds it; `None` if one does.
    pub fn try_acquire(path: &Path) -> Result<Option<TaskLock>, ExecutorError> {
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(path)
                .map_err(ExecutorError::io(format!("open {}", path.display())))?;
            if SeededBug::UnlockedLaunch.active() {
                return Ok(Some(TaskLock { file }));
            }
            // SAFETY: plain syscall on an fd we own.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let err = std::io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    return Ok(None);
                }
                return Err(ExecutorError::io(format!("lock {}", path.display()))(err));
            }
            if same_file(&file, path) {
                return Ok(Some(TaskLock { file }));
            }
            // Its holder removed the file between our open and our lock.
        }
    }

    /// The lock's open file: an executor inherits it and keeps it open.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Removes the lock file, then lets go of the lock.
    pub fn remove(self, path: &Path) {
        let _ = std::fs::remove_file(path);
    }
}

fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(held), Ok(named)) => held.dev() == named.dev() && held.ino() == named.ino(),
        _ => false,
    }
}

/// The processes that have the lock file open: the executor holding it
/// (and, for an instant, the launch handing it over). Read from the kernel,
/// since the executor's pid may be known to no one (an agent that died
/// before the executor reported ready).
pub(crate) fn holders(path: &Path) -> Vec<i32> {
    let Ok(lock) = std::fs::metadata(path) else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::metadata(fd.path())
                        .is_ok_and(|m| m.dev() == lock.dev() && m.ino() == lock.ino())
                })
            })
        })
        .collect()
}
