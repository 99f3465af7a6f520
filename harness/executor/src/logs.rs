//! The task's stdout/stderr, pumped from pipes into size-rotated files named
//! like Nomad's logmon: `<task>.stdout.0`, `.1`, … with the highest index the
//! current file and the oldest deleted once more than `max_files` exist.

use crate::confined::ConfinedDir;
use crate::error::ExecutorError;
use crate::spec::LogConfig;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};

/// The logs' directory in the alloc's shared dir (the task's `/alloc/logs`).
pub const LOGS_DIR: &str = "logs";

/// A task's two output streams, each logged to files of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    Stdout,
    Stderr,
}

impl LogStream {
    pub const BOTH: [LogStream; 2] = [LogStream::Stdout, LogStream::Stderr];

    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

/// `<task>.<stream>.<index>`: one generation of a task's log.
pub fn log_file_name(task: &str, stream: LogStream, index: u64) -> String {
    format!("{task}.{}.{index}", stream.as_str())
}

/// The bytes `pipe` holds unread.
fn unread(pipe: &File) -> usize {
    let mut bytes: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through a valid pointer.
    let rc = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut bytes) };
    if rc < 0 {
        tracing::error!("FIONREAD: {}", std::io::Error::last_os_error());
        return 0;
    }
    usize::try_from(bytes).unwrap_or(0)
}

/// The indexes of `task`'s `stream` files among `names` (a logs dir's),
/// ascending. Only a name [`log_file_name`] makes counts: a task may plant
/// `web.stdout.01` or `web.stdout.+1`, which name no index.
pub fn log_file_indexes(names: &[std::ffi::OsString], task: &str, stream: LogStream) -> Vec<u64> {
    let prefix = format!("{task}.{}.", stream.as_str());
    let index = |name: &std::ffi::OsString| {
        let digits = name.to_str()?.strip_prefix(&prefix)?;
        let index: u64 = digits.parse().ok()?;
        (index.to_string() == digits).then_some(index)
    };
    let mut indexes: Vec<u64> = names.iter().filter_map(index).collect();
    indexes.sort_unstable();
    indexes
}

/// The logs live in the task-writable `/alloc/logs`: every file there is
/// opened, created and removed beneath the dir's fd, never through a link
/// (see `confined`).
pub(crate) struct RotatingWriter {
    dir: std::sync::Arc<ConfinedDir>,
    task: String,
    stream: LogStream,
    cfg: LogConfig,
    index: u64,
    file: File,
    written: u64,
}

impl RotatingWriter {
    /// Continues the newest existing file, so a restarted task appends to its logs.
    pub fn open(
        dir: std::sync::Arc<ConfinedDir>,
        task: &str,
        stream: LogStream,
        cfg: &LogConfig,
    ) -> Result<RotatingWriter, ExecutorError> {
        let indexes = log_file_indexes(&dir.names()?, task, stream);
        let index = indexes.last().copied().unwrap_or(0);
        let file = dir.open_append(&log_file_name(task, stream, index))?;
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(RotatingWriter {
            dir,
            task: task.to_string(),
            stream,
            cfg: cfg.clone(),
            index,
            file,
            written,
        })
    }

    pub fn write_all(&mut self, mut buf: &[u8]) -> Result<(), ExecutorError> {
        while !buf.is_empty() {
            if self.written >= self.cfg.max_file_size_bytes {
                self.rotate()?;
            }
            let room = self.cfg.max_file_size_bytes - self.written;
            let n = buf.len().min(room.try_into().unwrap_or(usize::MAX));
            self.file
                .write_all(&buf[..n])
                .map_err(ExecutorError::io(format!(
                    "write log {}",
                    self.name(self.index)
                )))?;
            self.written += n as u64;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Blocks until `task_ended` is closed (false), or else `pipe` has data
    /// or every writer closed it (true). The task's end comes first: a
    /// writer outside it that keeps the pipe full must not keep the pump
    /// going.
    fn readable(&self, pipe: &File, task_ended: &impl AsFd) -> bool {
        loop {
            let mut fds = [
                PollFd::new(pipe.as_fd(), PollFlags::POLLIN),
                PollFd::new(task_ended.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    // Reading on blocks as before: no worse than no poll.
                    tracing::error!("polling task output for {}: {e}", self.name(self.index));
                    return true;
                }
            }
            let ready = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
            if ready(&fds[1]) {
                return false;
            }
            if ready(&fds[0]) {
                return true;
            }
        }
    }

    fn name(&self, index: u64) -> String {
        log_file_name(&self.task, self.stream, index)
    }

    fn rotate(&mut self) -> Result<(), ExecutorError> {
        // Only a planted `<task>.<stream>.18446744073709551615` gets here.
        self.index = self.index.checked_add(1).ok_or_else(|| ExecutorError::Io {
            context: format!("rotate log {}", self.name(self.index)),
            message: "no index after it".into(),
        })?;
        self.file = self.dir.create_truncate(&self.name(self.index))?;
        self.written = 0;
        let indexes = log_file_indexes(&self.dir.names()?, &self.task, self.stream);
        let excess = indexes.len().saturating_sub(self.cfg.max_files as usize);
        for &old in &indexes[..excess] {
            self.dir.remove_file(&self.name(old))?;
        }
        Ok(())
    }

    /// Copies `pipe` into the logs until every writer has closed it, or,
    /// once `task_ended` is closed (the task and its PID namespace are
    /// gone), until what is in the pipe then is copied: a process outside
    /// the task may hold a write end (a sibling the task handed it to), and
    /// must not hold up the task's end. A failing log write is reported
    /// once to the executor's log and the rest drained, so the task never
    /// blocks on a full pipe.
    /// `first_output` runs once, after the first bytes were written.
    pub fn pump(mut self, mut pipe: File, task_ended: &impl AsFd, first_output: impl FnOnce()) {
        let mut first_output = Some(first_output);
        let mut buf = vec![0u8; 64 * 1024];
        let mut failed = false;
        // What is left to copy once the task ended.
        let mut left: Option<usize> = None;
        loop {
            if left.is_none() && !self.readable(&pipe, task_ended) {
                left = Some(unread(&pipe));
            }
            let room = left.map_or(buf.len(), |left| left.min(buf.len()));
            if room == 0 {
                return;
            }
            let n = match pipe.read(&mut buf[..room]) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::error!("reading task output for {}: {e}", self.name(self.index));
                    return;
                }
            };
            left = left.map(|left| left - n);
            if let (Err(e), false) = (self.write_all(&buf[..n]), failed) {
                tracing::error!(
                    "{e}; further log write errors for {} are not reported",
                    self.name(self.index)
                );
                failed = true;
            }
            if let Some(first_output) = first_output.take() {
                first_output();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cfg(max_files: u32, max_file_size_bytes: u64) -> LogConfig {
        LogConfig {
            max_files,
            max_file_size_bytes,
        }
    }

    fn read(dir: &Path, i: u64) -> String {
        std::fs::read_to_string(dir.join(format!("t.stdout.{i}"))).unwrap()
    }

    fn confined(dir: &Path) -> std::sync::Arc<ConfinedDir> {
        std::sync::Arc::new(ConfinedDir::open(dir).unwrap())
    }

    #[test]
    fn rotates_at_the_size_and_keeps_the_newest_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut w =
            RotatingWriter::open(confined(dir.path()), "t", LogStream::Stdout, &cfg(2, 4)).unwrap();
        w.write_all(b"abcdefghij").unwrap();
        assert_eq!(
            log_file_indexes(
                &confined(dir.path()).names().unwrap(),
                "t",
                LogStream::Stdout
            ),
            vec![1, 2]
        );
        assert_eq!(
            (read(dir.path(), 1), read(dir.path(), 2)),
            ("efgh".into(), "ij".into())
        );
    }

    /// A task can write `/alloc/logs`: a name it planted that only reads
    /// as an index (`t.stdout.01`) is not a log file, and a planted last
    /// index ends rotation with an error, never a wrapped index.
    #[test]
    fn names_a_task_planted_do_not_steer_rotation() {
        let dir = tempfile::tempdir().unwrap();
        for planted in ["t.stdout.01", "t.stdout.+1", "t.stdout.001"] {
            std::fs::write(dir.path().join(planted), "planted").unwrap();
        }
        let mut w =
            RotatingWriter::open(confined(dir.path()), "t", LogStream::Stdout, &cfg(2, 4)).unwrap();
        let rotated = w.write_all(b"abcdefghij");
        assert!(
            rotated.is_ok()
                && (read(dir.path(), 1), read(dir.path(), 2)) == ("efgh".into(), "ij".into()),
            "planted names steered rotation: {rotated:?}"
        );
        let last = dir.path().join(format!("t.stdout.{}", u64::MAX));
        std::fs::write(&last, "").unwrap();
        let mut w =
            RotatingWriter::open(confined(dir.path()), "t", LogStream::Stdout, &cfg(2, 4)).unwrap();
        let past_the_last =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.write_all(b"abcdefgh")));
        assert!(
            matches!(past_the_last, Ok(Err(_))),
            "rotating past the last index: {past_the_last:?}"
        );
    }

    /// Once the task ended, a pipe whose write end another process holds
    /// is copied to what it holds then, and the pump ends, even while that
    /// process goes on writing.
    #[rstest::rstest]
    #[case::holding(false)]
    #[case::writing_on(true)]
    fn once_the_task_ended_a_held_pipe_is_copied_as_it_stands(#[case] writing_on: bool) {
        let dir = tempfile::tempdir().unwrap();
        let w = RotatingWriter::open(
            confined(dir.path()),
            "t",
            LogStream::Stdout,
            &cfg(2, 1 << 20),
        )
        .unwrap();
        let (pipe, mut held) = std::io::pipe().unwrap();
        held.write_all(b"written before its end").unwrap();
        let (ended, task_ended) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        drop(task_ended);
        // Writes until the pump's end closes the pipe (EPIPE).
        let writer = std::thread::spawn(move || {
            let chunk = [b'+'; 64 * 1024];
            while writing_on && held.write_all(&chunk).is_ok() {}
            held
        });
        let (done_tx, done) = std::sync::mpsc::channel();
        let outputs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&outputs);
        std::thread::spawn(move || {
            let first_output = move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            };
            w.pump(
                File::from(std::os::fd::OwnedFd::from(pipe)),
                &ended,
                first_output,
            );
            let _ = done_tx.send(());
        });
        let ended_in_time = done.recv_timeout(taskgate_faults::patience::step());
        assert!(
            ended_in_time.is_ok(),
            "the pump waited for the held write end"
        );
        drop(writer.join().unwrap());
        assert!(read(dir.path(), 0).starts_with("written before its end"));
        // Told once of the first output, however many writes followed.
        assert_eq!(outputs.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn a_restarted_writer_appends_to_the_newest_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut w =
            RotatingWriter::open(confined(dir.path()), "t", LogStream::Stdout, &cfg(5, 4)).unwrap();
        w.write_all(b"abcdef").unwrap();
        drop(w);
        let mut w =
            RotatingWriter::open(confined(dir.path()), "t", LogStream::Stdout, &cfg(5, 4)).unwrap();
        w.write_all(b"gh").unwrap();
        assert_eq!(
            (read(dir.path(), 0), read(dir.path(), 1)),
            ("abcd".into(), "efgh".into())
        );
    }
}
