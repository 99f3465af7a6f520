//! A hang safety net for child processes: SIGKILLs a process that outlives
//! its timeout, so a hung agent or CLI fails its run or test instead of the
//! whole suite. Never a synchronisation device: the caller waits on the
//! process itself; the watchdog only bounds how long that can take.

use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Watchdog {
    done: Sender<()>,
    thread: JoinHandle<bool>,
}

impl Watchdog {
    /// Starts watching process `pid`.
    pub fn arm(pid: u32, timeout: Duration) -> Watchdog {
        let pid = nix::unistd::Pid::from_raw(pid as i32);
        let (done, wait) = channel::<()>();
        let thread = std::thread::spawn(move || {
            let timed_out = wait.recv_timeout(timeout) == Err(RecvTimeoutError::Timeout);
            if timed_out {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
            timed_out
        });
        Watchdog { done, thread }
    }

    /// Call once the process has been waited for: whether it had to be killed.
    pub fn disarm(self) -> bool {
        let _ = self.done.send(());
        self.thread.join().unwrap_or(true)
    }
}
