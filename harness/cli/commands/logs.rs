//! `taskgate logs ALLOC [TASK] [-f] [--stderr]`: a task's stdout (or
//! stderr), as Nomad's `alloc logs`: every rotated file from the oldest the
//! executor kept, in order. With `-f` it waits for more, across rotations,
//! on inotify events (never a timed poll), until the allocation finishes.

use super::agent_config::ClientArgs;
use super::status::{find_alloc, read_status};
use anyhow::Context;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use taskgate_engine::agent::AllocEntry;
use taskgate_engine::control::{self, ControlAnswer, ControlRequest};
use taskgate_engine::AllocDir;
use taskgate_executor::confined::{ConfinedDir, ConfinedError};
use taskgate_executor::{log_file_indexes, log_file_name, LogStream};

#[derive(clap::Args)]
pub struct Args {
    /// The allocation's id, or a unique prefix of it.
    pub alloc: String,
    /// The task (may be left out when the allocation has one task).
    pub task: Option<String>,
    /// Keep printing what the task writes, until the allocation finishes.
    #[arg(short, long)]
    pub follow: bool,
    /// The task's stderr instead of its stdout.
    #[arg(long)]
    pub stderr: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match print(args) {
        // The reader went away (`logs | head`): the end, as for `cat`.
        Err(err)
            if err
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        printed => printed,
    }
}

fn print(args: Args) -> anyhow::Result<()> {
    let entries = read_status(&args.client)?;
    let entry = find_alloc(&entries, &args.alloc, &args.client.data_dir)?;
    let task = task_name(entry, args.task.as_deref())?;
    let stream = if args.stderr {
        LogStream::Stderr
    } else {
        LogStream::Stdout
    };
    let mut log = LogFiles::new(logs_dir(entry)?, &task, stream);
    let mut out = std::io::stdout().lock();
    if !args.follow || entry.alloc.client.is_terminal() {
        return Ok(log.copy_to(&mut out)?);
    }
    // Watched before the first read, so nothing written after it is missed.
    let run_dir = args.client.data_dir.run();
    let watch = LogWatch::new(log.dir(), &run_dir)?;
    // The agent says when the allocation ends; without one nothing can end
    // it, and the logs are followed until a new agent comes (its control
    // socket appears in the run dir) or the user interrupts.
    let alloc_id = entry.alloc.alloc_id.clone();
    let follow = || {
        let req = ControlRequest::Follow {
            alloc: alloc_id.clone(),
        };
        control::send(&args.client.data_dir, &req).ok()
    };
    // Each time no agent is found to follow, the record says whether an
    // agent finished the allocation first (and exited before it told us).
    // A read that fails (a copy taken as an agent wrote) says not yet:
    // the next time no agent is found, it is read again.
    let finished_on_record = || {
        let entries = read_status(&args.client).ok()?;
        let entry = find_alloc(&entries, &alloc_id, &args.client.data_dir).ok()?;
        Some(entry.alloc.client.is_terminal())
    };
    let mut end = follow();
    let mut look_at_record = end.is_none();
    // Said once each time the agent goes: with none, nothing ends the
    // follow but a new agent's word, and a silent wait looks like a hang.
    let mut said_no_agent = false;
    log.copy_to(&mut out)?;
    loop {
        // The executors drained their pipes before their tasks' exits
        // were reported: once it finished, what is on disk is all there is.
        if std::mem::take(&mut look_at_record) {
            if finished_on_record() == Some(true) {
                return Ok(log.copy_to(&mut out)?);
            }
            if !std::mem::replace(&mut said_no_agent, true) {
                super::say_err!(
                    "taskgate logs: no agent serves {}: following the log until one \
                     does and says the allocation ended (Ctrl-C to stop)",
                    args.client.data_dir.display()
                );
            }
        }
        if end.is_some() {
            said_no_agent = false;
        }
        match watch.wait(end.as_ref().map(|r| r.socket()))? {
            Woke::Agent => match end.as_mut().map(|r| r.next_answer()) {
                Some(Ok(ControlAnswer::Finished(_))) => return Ok(log.copy_to(&mut out)?),
                Some(Ok(_)) | None => {}
                Some(Err(_)) => {
                    end = None;
                    look_at_record = true;
                }
            },
            Woke::RunDir if end.is_none() => {
                end = follow();
                look_at_record = end.is_none();
            }
            Woke::RunDir | Woke::Logs => {}
        }
        log.copy_to(&mut out)?;
    }
}

/// The task the user named, or the alloc's only task.
fn task_name(entry: &AllocEntry, given: Option<&str>) -> anyhow::Result<String> {
    let tasks: Vec<String> = entry.alloc.tasks().into_iter().map(|t| t.name).collect();
    match given {
        Some(task) if tasks.iter().any(|t| t == task) => Ok(task.to_string()),
        Some(task) => anyhow::bail!(
            "allocation {} has no task {task:?} (its tasks: {})",
            entry.alloc.alloc_id,
            tasks.join(", ")
        ),
        None if tasks.len() == 1 => Ok(tasks[0].clone()),
        None => anyhow::bail!(
            "allocation {} has {} tasks: name one ({})",
            entry.alloc.alloc_id,
            tasks.len(),
            tasks.join(", ")
        ),
    }
}

/// `<alloc dir>/alloc/logs`, where the executors write, opened beneath
/// the alloc dir: a task can plant links there, which are never read.
pub fn logs_dir(entry: &AllocEntry) -> anyhow::Result<ConfinedDir> {
    let alloc_dir = AllocDir::new(entry.alloc.alloc_dir.clone());
    Ok(alloc_dir.open_logs()?)
}

/// One stream's rotated files, `<task>.<stream>.0`, `.1`, …: the executor
/// writes the highest index and deletes the oldest beyond its limit.
pub struct LogFiles {
    dir: ConfinedDir,
    task: String,
    stream: LogStream,
    /// The file being read and its index; kept open, so a file rotated away
    /// is still read to its end.
    current: Option<(u64, File)>,
}

impl LogFiles {
    pub fn new(dir: ConfinedDir, task: &str, stream: LogStream) -> LogFiles {
        LogFiles {
            dir,
            task: task.to_string(),
            stream,
            current: None,
        }
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Copies everything written since the last call.
    pub fn copy_to(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        loop {
            if self.current.is_none() {
                let Some(first) = self.open_after(None)? else {
                    return out.flush();
                };
                self.current = Some(first);
            }
            let (index, mut file) = self.current.take().expect("opened above");
            std::io::copy(&mut file, out)?;
            let Some(next) = self.open_after(Some(index))? else {
                self.current = Some((index, file));
                return out.flush();
            };
            // The writer never writes a file again once it made the next:
            // read this one to its end before moving on.
            std::io::copy(&mut file, out)?;
            self.current = Some(next);
        }
    }

    /// The first file after index `after` (the oldest kept if `None`),
    /// opened. One the writer rotated away between the listing and its
    /// open is passed over: the oldest file is the next one it deletes.
    fn open_after(&self, after: Option<u64>) -> std::io::Result<Option<(u64, File)>> {
        loop {
            let indexes = self.indexes()?;
            let Some(index) = indexes.into_iter().find(|i| after.is_none_or(|a| *i > a)) else {
                return Ok(None);
            };
            let name = log_file_name(&self.task, self.stream, index);
            match self.dir.open_read(&name) {
                Ok(file) => return Ok(Some((index, file))),
                // Gone since the listing: the next listing has it no more.
                Err(ConfinedError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(std::io::Error::other(err)),
            }
        }
    }

    /// Indexes of the files there now, ascending.
    fn indexes(&self) -> std::io::Result<Vec<u64>> {
        let names = self.dir.names().map_err(std::io::Error::other)?;
        Ok(log_file_indexes(&names, &self.task, self.stream))
    }
}

/// What woke a follower.
enum Woke {
    /// A write or a new file in the logs dir.
    Logs,
    /// Something new in the run dir, such as an agent's control socket.
    RunDir,
    /// The agent sent a line (or hung up).
    Agent,
}

/// Wakes on every change in the logs dir, on new files in the run dir, and
/// on the agent's word.
struct LogWatch {
    inotify: Inotify,
    run_dir: WatchDescriptor,
}

impl LogWatch {
    fn new(logs: &Path, run_dir: &Path) -> anyhow::Result<LogWatch> {
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC).context("inotify_init")?;
        let changed = AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_CLOSE_WRITE;
        // The logs dir was opened refusing links; the watch must not follow one either.
        let dir_only = AddWatchFlags::IN_DONT_FOLLOW | AddWatchFlags::IN_ONLYDIR;
        inotify
            .add_watch(logs, changed | dir_only)
            .with_context(|| format!("watching {}", logs.display()))?;
        let run_dir = inotify
            .add_watch(
                run_dir,
                AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO,
            )
            .with_context(|| format!("watching {}", run_dir.display()))?;
        Ok(LogWatch { inotify, run_dir })
    }

    /// Blocks until something happens; the agent's word comes first.
    fn wait(&self, agent: Option<&std::os::unix::net::UnixStream>) -> anyhow::Result<Woke> {
        let mut fds = vec![PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN)];
        if let Some(socket) = agent {
            fds.push(PollFd::new(socket.as_fd(), PollFlags::POLLIN));
        }
        loop {
            match poll(&mut fds, PollTimeout::NONE) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e).context("waiting for the logs"),
                Ok(_) => break,
            }
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        if fds.get(1).is_some_and(ready) {
            return Ok(Woke::Agent);
        }
        let events = self
            .inotify
            .read_events()
            .context("reading inotify events")?;
        Ok(if events.iter().any(|e| e.wd == self.run_dir) {
            Woke::RunDir
        } else {
            Woke::Logs
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(dir: &Path, name: &str, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn stdout_of_web(dir: &Path) -> LogFiles {
        LogFiles::new(ConfinedDir::open(dir).unwrap(), "web", LogStream::Stdout)
    }

    fn read(log: &mut LogFiles) -> String {
        let mut out = Vec::new();
        log.copy_to(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// As the executor's writer rotates: a follower reads every byte once,
    /// in order, across new files and a file deleted while it was read.
    #[test]
    fn a_follower_reads_across_rotations_and_deletions() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = stdout_of_web(dir.path());
        assert_eq!(read(&mut log), "", "nothing written yet");
        append(dir.path(), "web.stdout.0", "a");
        assert_eq!(read(&mut log), "a");
        append(dir.path(), "web.stdout.0", "b");
        // The writer fills .0, opens .1 and writes there, before we read.
        append(dir.path(), "web.stdout.1", "c");
        assert_eq!(read(&mut log), "bc");
        append(dir.path(), "web.stdout.1", "d");
        append(dir.path(), "web.stdout.2", "e");
        // The oldest goes, the one being read among them: what it held is
        // still read through the open file.
        std::fs::remove_file(dir.path().join("web.stdout.0")).unwrap();
        std::fs::remove_file(dir.path().join("web.stdout.1")).unwrap();
        assert_eq!(read(&mut log), "de");
        assert_eq!(read(&mut log), "");
        // Another stream's files are not this one's.
        append(dir.path(), "web.stderr.3", "x");
        append(dir.path(), "web.stdout.10", "f");
        assert_eq!(read(&mut log), "f");
    }

    /// A reader that comes late starts at the oldest file kept.
    #[test]
    fn a_late_reader_starts_at_the_oldest_file_kept() {
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), "web.stdout.2", "old ");
        append(dir.path(), "web.stdout.3", "new");
        let mut log = stdout_of_web(dir.path());
        assert_eq!(read(&mut log), "old new");
    }

    /// A task that swapped its log for a link to a host file: the link is
    /// refused, named, and the host file never printed.
    #[test]
    fn a_planted_link_is_never_read_through() {
        let dir = tempfile::tempdir().unwrap();
        let secret = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(secret.path(), "host secret").unwrap();
        std::os::unix::fs::symlink(secret.path(), dir.path().join("web.stdout.0")).unwrap();
        let mut log = stdout_of_web(dir.path());
        let mut out = Vec::new();
        let result = log.copy_to(&mut out);
        assert!(
            !String::from_utf8_lossy(&out).contains("host secret"),
            "ESCAPED: printed a host file through a planted link"
        );
        let err = result.expect_err("the link must be refused").to_string();
        assert!(err.contains("web.stdout.0"), "{err}");
    }
}
