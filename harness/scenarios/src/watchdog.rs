//! A hang safety net for child processes: SIGKILLs a process that makes no
//! progress for a whole idle window, so a hung agent or CLI fails its run or
//! test instead of the whole suite. Never a synchronisation device: the
//! caller waits on the process itself; the watchdog only bounds how long
//! that can take, and a process that keeps making progress (as its
//! `progress` probe reports) is never killed however slow the machine.

use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the progress probe is read while the process runs.
const PROBE_EVERY: Duration = Duration::from_millis(500);

pub struct Watchdog {
    done: Sender<()>,
    thread: JoinHandle<bool>,
}

impl Watchdog {
    /// Starts watching process `pid`: it is killed once `progress` has
    /// returned the same value for `idle`.
    pub fn arm(pid: u32, idle: Duration, progress: impl Fn() -> u64 + Send + 'static) -> Watchdog {
        let pid = nix::unistd::Pid::from_raw(pid as i32);
        let (done, wait) = channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut seen = progress();
            let mut deadline = Instant::now() + idle;
            loop {
                match wait.recv_timeout(PROBE_EVERY.min(idle)) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return false,
                }
                let now = progress();
                if now != seen {
                    seen = now;
                    deadline = Instant::now() + idle;
                } else if Instant::now() >= deadline {
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                    return true;
                }
            }
        });
        Watchdog { done, thread }
    }

    /// Call once the process has been waited for: whether it had to be killed.
    pub fn disarm(self) -> bool {
        let _ = self.done.send(());
        self.thread.join().unwrap_or(true)
    }
}
