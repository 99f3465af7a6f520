//! Following a fault log that other processes append to, for an await:
//! each look reads only what was appended since the last one, and a wait
//! ends on the append itself (inotify), never on a timer.

use crate::Hit;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

pub(super) struct LogFollower {
    file: File,
    /// A last line still being written: completed by a later append.
    partial: Vec<u8>,
    appended: Inotify,
}

impl LogFollower {
    /// Follows `path` from its first line. The watch is set before the
    /// first read, so no append between the two goes unseen.
    pub(super) fn open(path: &Path) -> io::Result<LogFollower> {
        let appended = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)?;
        appended.add_watch(path, AddWatchFlags::IN_MODIFY)?;
        Ok(LogFollower {
            file: File::open(path)?,
            partial: Vec::new(),
            appended,
        })
    }

    /// The hits appended since the last call: complete lines only, read
    /// as [`super::read_log`] reads them (a garbled line is an error).
    pub(super) fn new_hits(&mut self) -> io::Result<Vec<Hit>> {
        self.file.read_to_end(&mut self.partial)?;
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else {
            return Ok(Vec::new());
        };
        let rest = self.partial.split_off(end + 1);
        let complete = String::from_utf8(std::mem::replace(&mut self.partial, rest))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        super::parse_log(&complete)
    }

    /// Blocks until the log is appended to (true), or until `idle` passes
    /// with no append (false).
    pub(super) fn wait(&self, idle: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + idle;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let mut fds = [PollFd::new(self.appended.as_fd(), PollFlags::POLLIN)];
            match poll(
                &mut fds,
                PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX),
            ) {
                Ok(0) | Err(Errno::EINTR) => continue,
                Ok(_) => break,
                Err(e) => return Err(e.into()),
            }
        }
        // Drained, so the next wait blocks until the next append.
        loop {
            match self.appended.read_events() {
                Ok(events) if !events.is_empty() => {}
                Ok(_) | Err(Errno::EAGAIN) => return Ok(true),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}
