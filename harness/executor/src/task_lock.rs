//! One executor per task at a time. A task's lock file in the run dir is
//! locked (`flock`, exclusive) by the launch before it writes anything, and
//! the lock is handed to the executor it spawns, which holds it until it
//! exits. A second launch for the same task is refused while any earlier
//! executor lives, whether or not that one has bound its socket yet (B4:
//! the socket's check-then-bind was the only guard, and two executors ran).
//!
//! The file is removed only by a holder of the lock; whoever takes the lock
//! checks that the path still names the file it locked, else tries again.
//!
//! Only the task's executors count as holders. Any process forked by a
//! multi-threaded launcher holds a copy of the lock for as long as it takes
//! to exec; such a holder is waited for, never killed nor refused as a
//! running executor.

use crate::error::ExecutorError;
use crate::protocol::{RunPaths, LOCK_FD, SPEC_FD};
use crate::sys::{flock, pidfd_open, pidfd_send_signal, same_file, wait_exited};
use nix::sys::signal::Signal;
use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};
use taskgate_faults::seeded::SeededBug;
use taskgate_faults::{points, Faults};

/// How long a process that is no executor of the task may keep its lock
/// before taking it fails: such a holder lets go at its exec, within
/// milliseconds, so this only turns a hang into an error.
const NO_EXECUTOR_HOLD: Duration = Duration::from_secs(60);
/// The longest pause between two tries while the lock is waited for; the
/// holders are looked at again at each (an executor may have been missed
/// while it daemonized).
const MAX_PAUSE: Duration = Duration::from_millis(20);

pub(crate) struct TaskLock {
    file: File,
}

impl TaskLock {
    /// Takes the lock, or returns the pids of the task's executors that
    /// hold it. Any other holder is waited for: a process forked by a
    /// launcher (another task's launch, in a multi-threaded agent) holds a
    /// copy of every fd its launcher had, this lock among them, until its
    /// exec closes them, and the kernel lets go of the lock only once that
    /// exec is done, after the fd has left /proc. Such a holder is never
    /// killed, nor taken for a live executor. `faults` are the launching
    /// process's, `scope` the task's name.
    pub fn acquire(
        paths: &RunPaths,
        faults: &Faults,
        scope: &str,
    ) -> Result<Result<TaskLock, Vec<i32>>, ExecutorError> {
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&paths.lock)
                .map_err(ExecutorError::io(format!("open {}", paths.lock.display())))?;
            if SeededBug::UnlockedLaunch.active() {
                return Ok(Ok(TaskLock { file }));
            }
            if !try_lock(&file, &paths.lock)? {
                if let Err(executors) = wait_unless_executors(&file, paths, faults, scope)? {
                    return Ok(Err(executors));
                }
            }
            if same_file(&file, &paths.lock) {
                return Ok(Ok(TaskLock { file }));
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

/// `flock(LOCK_EX | LOCK_NB)`: whether the lock was taken.
fn try_lock(file: &File, path: &Path) -> Result<bool, ExecutorError> {
    flock(file, libc::LOCK_EX | libc::LOCK_NB)
        .map_err(ExecutorError::io(format!("lock {}", path.display())))
}

/// Waits until `file` holds the lock, unless the task's executors hold it
/// (their pids), for at most [`NO_EXECUTOR_HOLD`]. It tries again at
/// growing intervals rather than blocking in `flock`: a blocking `flock`
/// has no timeout, and a thread left blocked in one could not be called
/// back when an executor turns out to hold the lock for good.
fn wait_unless_executors(
    file: &File,
    paths: &RunPaths,
    faults: &Faults,
    scope: &str,
) -> Result<Result<(), Vec<i32>>, ExecutorError> {
    let held_by = executors(paths);
    if !held_by.is_empty() {
        return Ok(Err(held_by));
    }
    taskgate_faults::fault_point!(faults, points::EX_LOCK_WAITED, scope);
    let deadline = Instant::now() + NO_EXECUTOR_HOLD;
    let mut pause = Duration::from_millis(1);
    loop {
        if try_lock(file, &paths.lock)? {
            return Ok(Ok(()));
        }
        let held_by = executors(paths);
        if !held_by.is_empty() {
            return Ok(Err(held_by));
        }
        if Instant::now() >= deadline {
            return Err(ExecutorError::Protocol(format!(
                "{} was held for {NO_EXECUTOR_HOLD:?} by no executor of the task",
                paths.lock.display()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// The task's executors that hold its lock: the processes with the lock on
/// [`LOCK_FD`] and the task's spec on [`SPEC_FD`], as `launch()` starts an
/// executor (and as its task process is until its exec). Read from the
/// kernel, since an executor's pid may be known to no one (an agent that
/// died before the executor reported ready). A launcher's fork child with
/// a copy of the lock is none of them.
fn executors(paths: &RunPaths) -> Vec<i32> {
    let Some(marks) = ExecutorMarks::of(paths) else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me && marks.held_by(pid))
        .collect()
}

/// What a process holds if it is one of the task's executors (see
/// [`executors`]): the lock's file, the spec's name. Read once per look.
struct ExecutorMarks<'a> {
    lock: std::fs::Metadata,
    spec_name: &'a std::ffi::OsStr,
}

impl<'a> ExecutorMarks<'a> {
    /// None while there is no lock file: then no executor holds it.
    fn of(paths: &'a RunPaths) -> Option<Self> {
        Some(ExecutorMarks {
            lock: std::fs::metadata(&paths.lock).ok()?,
            spec_name: paths.spec.file_name()?,
        })
    }

    fn held_by(&self, pid: i32) -> bool {
        let holds_lock = || {
            std::fs::metadata(format!("/proc/{pid}/fd/{LOCK_FD}"))
                .is_ok_and(|m| m.dev() == self.lock.dev() && m.ino() == self.lock.ino())
        };
        let holds_spec = || {
            std::fs::read_link(format!("/proc/{pid}/fd/{SPEC_FD}")).is_ok_and(|target| {
                let target = target.to_string_lossy();
                let target = target.strip_suffix(" (deleted)").unwrap_or(&target);
                Path::new(target).file_name() == Some(self.spec_name)
            })
        };
        holds_lock() && holds_spec()
    }
}

/// SIGKILLs `pid`, one of the task's executors when [`TaskLock::acquire`]
/// named it, and waits until it has exited. It is pinned (a pidfd) before
/// it is checked again: one that exited since may have left its pid to
/// another process, which is not killed.
pub(crate) fn kill_executor(paths: &RunPaths, pid: i32) -> Result<(), ExecutorError> {
    let Ok(pidfd) = pidfd_open(pid) else {
        return Ok(());
    };
    if !ExecutorMarks::of(paths).is_some_and(|marks| marks.held_by(pid)) {
        return Ok(());
    }
    pidfd_send_signal(pidfd.as_fd(), Signal::SIGKILL)?;
    wait_exited(pidfd.as_fd())
}
