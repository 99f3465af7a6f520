//! The exec gate: a fanotify group with a `FAN_OPEN_EXEC_PERM` mark on the
//! marked tmpfs's superblock, and a thread that answers every event after
//! asking a judge. The exec'ing process sleeps in the kernel until answered.

use crate::error::OracleError;
use crate::history::{Answer, ExecRecord, StartedVersion};
use crate::identity::ExecIdentity;
use crate::marked_fs::is_marked_fs_root;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::fanotify::{
    EventFFlags, Fanotify, FanotifyEvent, FanotifyResponse, InitFlags, MarkFlags, MaskFlags,
    Response,
};
use std::io::Write as _;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// An exec paused in the kernel, waiting for a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingExec {
    /// The exec'ing process (thread group id, in the gate's pid namespace).
    pub pid: i32,
    /// The file being executed, as the kernel names it for the gate (a path in
    /// the exec'ing process's mount namespace if the gate cannot reach it).
    pub exe: PathBuf,
    pub identity: ExecIdentity,
}

/// A judge's answer; a denial carries its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny(String),
}

/// Decides each exec. Runs on the gate's thread while the exec'ing process
/// waits, so it must not itself exec a file on the marked filesystem.
pub type Judge = Arc<dyn Fn(&PendingExec) -> Verdict + Send + Sync>;

#[derive(Default)]
struct Shared {
    records: Vec<ExecRecord>,
    /// Problems that make the record incomplete; reported by [`ExecGate::stop`].
    failures: Vec<String>,
}

/// A running exec gate. Stopped (every pending exec answered) on drop.
pub struct ExecGate {
    shared: Arc<Mutex<Shared>>,
    /// An eventfd; writing to it tells the gate's thread to stop. (Closing a
    /// pipe would not do: every process forked meanwhile holds a copy of its
    /// write end until it execs, and an exec paused at the gate has not.)
    stop: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panicking judge is caught before it can poison this; be tolerant anyway.
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

impl ExecGate {
    /// Marks the filesystem mounted at `marked`, which must be the root of a
    /// [`crate::MarkedFs`] mount in the calling thread's namespace (so that no
    /// host filesystem can be gated by mistake), and starts answering its execs.
    pub fn start(marked: &Path, judge: Judge) -> Result<ExecGate, OracleError> {
        let marked = marked
            .canonicalize()
            .map_err(OracleError::io("resolving", marked))?;
        if !is_marked_fs_root(&marked)? {
            return Err(OracleError::NotMarkedFs(marked));
        }
        // Unlimited queue: on overflow the kernel drops a permission event and
        // lets the exec through unjudged. Non-blocking: the stop path drains
        // the queue until EAGAIN. Event fds close-on-exec so that processes
        // spawned meanwhile do not inherit open handles on marked files.
        let fan = Fanotify::init(
            InitFlags::FAN_CLASS_CONTENT
                | InitFlags::FAN_CLOEXEC
                | InitFlags::FAN_NONBLOCK
                | InitFlags::FAN_UNLIMITED_QUEUE,
            EventFFlags::O_RDONLY | EventFFlags::O_LARGEFILE | EventFFlags::O_CLOEXEC,
        )
        .map_err(OracleError::sys("fanotify_init"))?;
        fan.mark(
            MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_FILESYSTEM,
            MaskFlags::FAN_OPEN_EXEC_PERM,
            None,
            Some(&marked),
        )
        .map_err(OracleError::sys("fanotify_mark"))?;
        // SAFETY: eventfd returns a new descriptor or -1.
        let stop = Errno::result(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })
            .map(|fd| Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }))
            .map_err(OracleError::sys("eventfd"))?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let worker = Worker {
            fan,
            stop: stop.clone(),
            judge,
            shared: shared.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("taskgate-exec-gate".into())
            .spawn(move || worker.run())
            .map_err(OracleError::io("spawning the gate thread for", &marked))?;
        Ok(ExecGate {
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// Every exec answered so far, in order.
    pub fn decisions(&self) -> Vec<ExecRecord> {
        lock(&self.shared).records.clone()
    }

    /// Stops the gate: the exec being judged gets its verdict, execs already
    /// queued are allowed unjudged (and recorded), then the group is closed,
    /// which removes the mark. Fails if the record is incomplete (the gate
    /// lost or could not answer an event) or the gate's thread died.
    pub fn stop(&mut self) -> Result<(), OracleError> {
        if let Some(thread) = self.thread.take() {
            // Cannot fail: the counter is far from overflowing.
            let _ = nix::unistd::write(&*self.stop, &1u64.to_ne_bytes());
            if thread.join().is_err() {
                lock(&self.shared)
                    .failures
                    .push("the gate thread panicked".into());
            }
        }
        let failures = &lock(&self.shared).failures;
        if failures.is_empty() {
            Ok(())
        } else {
            Err(OracleError::GateFailed(failures.join("; ")))
        }
    }
}

impl Drop for ExecGate {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            let _ = writeln!(std::io::stderr(), "taskgate-oracle: {e}");
        }
    }
}

struct Worker {
    fan: Fanotify,
    stop: Arc<OwnedFd>,
    judge: Judge,
    shared: Arc<Mutex<Shared>>,
}

impl Worker {
    /// Returning drops the group: the kernel then allows whatever is still
    /// pending, so no exec'ing process can be left hanging.
    fn run(self) {
        loop {
            let mut fds = [
                PollFd::new(self.fan.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.stop.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => return self.fail(format!("poll: {e}")),
            }
            if fds[1].any().unwrap_or(true) {
                return self.drain();
            }
            match self.fan.read_events() {
                Ok(events) => {
                    for event in events {
                        if !self.answer(event, true) {
                            return;
                        }
                    }
                }
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(e) => return self.fail(format!("reading fanotify events: {e}")),
            }
        }
    }

    /// Allows, unjudged, every event still queued.
    fn drain(&self) {
        loop {
            match self.fan.read_events() {
                Ok(events) if !events.is_empty() => {
                    for event in events {
                        if !self.answer(event, false) {
                            return;
                        }
                    }
                }
                Ok(_) | Err(Errno::EAGAIN) => return,
                Err(Errno::EINTR) => {}
                Err(e) => return self.fail(format!("draining fanotify events: {e}")),
            }
        }
    }

    /// Judges (or, when stopping, just allows) one event, records it, then
    /// answers. Returns false if the gate cannot go on.
    fn answer(&self, event: FanotifyEvent, judge: bool) -> bool {
        if !event.check_version() {
            self.fail(format!(
                "fanotify metadata version {} unsupported",
                event.version()
            ));
            return false;
        }
        let Some(fd) = event.fd() else {
            // Only a queue overflow comes without a file: execs went through unseen.
            self.fail("fanotify queue overflow: execs were allowed unjudged".into());
            return true;
        };
        if !event.mask().contains(MaskFlags::FAN_OPEN_EXEC_PERM) {
            return true;
        }
        let exe = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .unwrap_or_else(|e| PathBuf::from(format!("<unreadable: {e}>")));
        let pending = PendingExec {
            pid: event.pid(),
            identity: ExecIdentity::of_pid(event.pid()),
            exe,
        };
        let (cgroup_peers, started_version) = match pending.identity {
            ExecIdentity::Task { .. } => (
                crate::identity::cgroup_peers(pending.pid),
                StartedVersion::of_pid(pending.pid),
            ),
            _ => (Vec::new(), None),
        };
        let program = crate::identity::FileId::of_fd(fd.as_fd());
        let executor_peers = match (&pending.identity, program) {
            (executor @ ExecIdentity::Executor { .. }, Some(program)) => {
                // Executors of the task this gate let through: one may not
                // have left its old program yet (its exe still shows it).
                let allowed: Vec<i32> = (lock(&self.shared).records.iter())
                    .filter(|r| r.identity == *executor && r.verdict == Answer::Allow)
                    .map(|r| r.pid)
                    .collect();
                crate::identity::executor_peers(pending.pid, executor, program, &allowed)
            }
            _ => Vec::new(),
        };
        let verdict = if judge {
            catch_unwind(AssertUnwindSafe(|| (self.judge)(&pending))).unwrap_or_else(|panic| {
                Verdict::Deny(format!("judge panicked: {}", panic_message(&*panic)))
            })
        } else {
            Verdict::Allow
        };
        let (answer, reason, response) = match verdict {
            Verdict::Allow if !judge => (
                Answer::Allow,
                "gate stopping: allowed unjudged".to_string(),
                Response::FAN_ALLOW,
            ),
            Verdict::Allow => (Answer::Allow, String::new(), Response::FAN_ALLOW),
            Verdict::Deny(reason) => (Answer::Deny, reason, Response::FAN_DENY),
        };
        // Recorded before answering, so whoever sees the exec's outcome also
        // finds its record.
        {
            let mut shared = lock(&self.shared);
            let seq = shared.records.len() as u64 + 1;
            let PendingExec { pid, exe, identity } = pending;
            shared.records.push(ExecRecord {
                seq,
                pid,
                exe,
                identity,
                verdict: answer,
                reason,
                judged: judge,
                cgroup_peers,
                executor_peers,
                started_version,
            });
        }
        if let Err(e) = self.fan.write_response(FanotifyResponse::new(fd, response)) {
            self.fail(format!("answering exec by pid {}: {e}", event.pid()));
        }
        true
    }

    fn fail(&self, why: String) {
        lock(&self.shared).failures.push(why);
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload")
}
