//! The engine's side: spawn an executor process and talk to it.

use crate::error::ExecutorError;
use crate::isolation::cgroup::parent::CgroupParent;
use crate::isolation::cgroup::TaskCgroup;
use crate::protocol::{
    self, Doom, Ready, Request, Response, RunPaths, SpecFile, LOCK_FD, READY_FD, SPEC_FD,
};
use crate::spawn::spawn;
use crate::spec::{ExitResult, ReattachInfo, StopOutcome, TaskSpec};
use crate::sys::{pidfd_open, wait_exited};
use crate::task_lock::TaskLock;
use crate::validate::validate;
use crate::KillSignal;
use nix::fcntl::{fcntl, FcntlArg};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::BufReader;
use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;
use taskgate_faults::seeded::SeededBug;
use taskgate_faults::Faults;

/// An agent process's input for [`ExecutorFaults::from_env`]: the fault
/// points of the executors it launches (its own are `TASKGATE_FAULTS`).
pub const FAILPOINTS_ENV: &str = "TASKGATE_EXECUTOR_FAILPOINTS";

/// The fault points of the executors an engine launches (a failpoints
/// build's executor honours them). They travel in the config and reach each
/// executor in its own environment, set on its command: never through the
/// launching process's environment, which other threads read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutorFaults {
    /// `[scope:]point=action` entries separated by `;`.
    pub spec: Option<String>,
    /// The file every hit is appended to.
    pub log: Option<PathBuf>,
}

impl ExecutorFaults {
    /// What a process was given for its executors: [`FAILPOINTS_ENV`] and
    /// the fault log it writes its own hits to. Read once, at the binary's edge.
    pub fn from_env() -> ExecutorFaults {
        ExecutorFaults {
            spec: std::env::var(FAILPOINTS_ENV).ok(),
            log: std::env::var_os(taskgate_faults::FAULT_LOG_ENV).map(PathBuf::from),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// The `taskgate-executor` binary; run as
    /// `<executor_bin> --run-dir <run_dir> --cgroup-parent <cgroup_parent>`.
    pub executor_bin: PathBuf,
    /// Where spec files, sockets and root mount points live.
    pub run_dir: PathBuf,
    /// The subtree task cgroups and executors live in, claimed beforehand
    /// ([`crate::CgroupTree::claim`]).
    pub cgroup_parent: CgroupParent,
    /// The executors' fault points and log (none outside the harness).
    pub faults: ExecutorFaults,
    /// The launching process's own run's fault points: `ex.spawned` is
    /// reached here, between the executor's daemonizing and its report.
    pub launcher_faults: Faults,
}

/// Handle on one running executor. Every call opens its own connection, so
/// one thread can block in [`Executor::wait`] while another calls [`Executor::stop`].
#[derive(Debug, Clone)]
pub struct Executor {
    info: ReattachInfo,
}

/// Starts an executor for `spec` and returns once the task has been exec'd,
/// or with the error that prevented it. Refused while an earlier executor
/// of the task lives (it holds the task's lock, see `task_lock`); whatever a
/// dead one left is destroyed first (B3: a task whose executor was killed
/// kept running, and the next attempt joined it in the same cgroup).
pub fn launch(cfg: &ExecutorConfig, spec: &TaskSpec) -> Result<Executor, ExecutorError> {
    let run_as = validate(spec)?;
    let paths = RunPaths::new(&cfg.run_dir, spec)?;
    std::fs::create_dir_all(&cfg.run_dir).map_err(ExecutorError::io(format!(
        "create run dir {}",
        cfg.run_dir.display()
    )))?;
    let lock = TaskLock::acquire(&paths, &cfg.launcher_faults, &spec.task_name)?.map_err(|_| {
        ExecutorError::AlreadyRunning {
            socket: paths.socket.clone(),
        }
    })?;
    let left = remove_remains(cfg, &spec.alloc_id, &spec.task_name, &paths)?;
    if !left.task_processes.is_empty() {
        tracing::warn!(
            "task {}: killed what a dead executor left: {left}",
            spec.task_name
        );
    }
    let json = serde_json::to_vec_pretty(&SpecFile {
        spec,
        run_as: Some(run_as),
    })
    .map_err(|e| ExecutorError::Protocol(e.to_string()))?;
    std::fs::write(&paths.spec, json)
        .map_err(ExecutorError::io(format!("write {}", paths.spec.display())))?;
    match spawn_executor(cfg, spec, &paths, &lock) {
        Ok(executor) => Ok(executor),
        // A garbled report may come from a live executor: what it made, and
        // the lock, stay its own.
        Err(Failure::Garbled(error)) => {
            let _ = std::fs::remove_file(&paths.spec);
            Err(error)
        }
        // A failed executor removed what it made unless its cleanup failed
        // too; one that died could not. Its spec and lock files are left
        // to this cleanup, under the lock.
        Err(Failure::Gone(error)) => {
            let _ = remove_remains(cfg, &spec.alloc_id, &spec.task_name, &paths);
            lock.remove(&paths.lock);
            Err(error)
        }
    }
}

/// Why [`spawn_executor`] failed, as its cleanup needs to know.
enum Failure {
    /// The executor never started, died, or reported its failure and
    /// exited: its launcher cleans up after it.
    Gone(ExecutorError),
    /// Its report made no sense: it may still live.
    Garbled(ExecutorError),
}

impl From<ExecutorError> for Failure {
    fn from(error: ExecutorError) -> Failure {
        Failure::Gone(error)
    }
}

/// A report that could not be read: garbled if it was not even a report.
fn unread(error: ExecutorError) -> Failure {
    match error {
        ExecutorError::Protocol(_) => Failure::Garbled(error),
        error => Failure::Gone(error),
    }
}

/// What [`destroy_remains`] (or a launch) found of a task's earlier attempts.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Remains {
    /// Executors that still held the task's lock, killed.
    pub executors: Vec<i32>,
    /// Processes left in the task's cgroup, killed.
    pub task_processes: Vec<i32>,
}

impl Remains {
    pub fn is_empty(&self) -> bool {
        self.executors.is_empty() && self.task_processes.is_empty()
    }
}

impl std::fmt::Display for Remains {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "executors {:?}, task processes {:?}",
            self.executors, self.task_processes
        )
    }
}

/// Destroys everything of `task_name`'s earlier attempts: kills any executor
/// that still holds the task's lock (one its agent lost, whether or not it
/// ever answered), then every process in the task's cgroup, and removes the
/// cgroup (under the config's cgroup parent), socket, spec file and root
/// dir. Returns once all of it is dead.
pub fn destroy_remains(
    cfg: &ExecutorConfig,
    alloc_id: &str,
    task_name: &str,
) -> Result<Remains, ExecutorError> {
    let paths = RunPaths::for_task(&cfg.run_dir, alloc_id, task_name)?;
    std::fs::create_dir_all(&cfg.run_dir).map_err(ExecutorError::io(format!(
        "create run dir {}",
        cfg.run_dir.display()
    )))?;
    let mut executors = Vec::new();
    let lock = loop {
        match TaskLock::acquire(&paths, &cfg.launcher_faults, task_name)? {
            Ok(lock) => break lock,
            Err(holders) => {
                for pid in holders {
                    crate::task_lock::kill_executor(&paths, pid)?;
                    executors.push(pid);
                }
            }
        }
    };
    let result = remove_remains(cfg, alloc_id, task_name, &paths);
    lock.remove(&paths.lock);
    let mut remains = result?;
    remains.executors = executors;
    Ok(remains)
}

/// Under the task's lock: kills and removes what an executor that is no
/// longer alive left (its task tree and cgroup, socket, spec file, root dir).
fn remove_remains(
    cfg: &ExecutorConfig,
    alloc_id: &str,
    task_name: &str,
    paths: &RunPaths,
) -> Result<Remains, ExecutorError> {
    let spared = SeededBug::OrphanedTaskTree.active() || SeededBug::RestartBesideLostTask.active();
    let task_processes = match TaskCgroup::existing(&cfg.cgroup_parent, alloc_id, task_name) {
        Some(cg) if !spared => cg.destroy()?,
        _ => Vec::new(),
    };
    for file in [&paths.socket, &paths.spec] {
        let _ = std::fs::remove_file(file);
    }
    let _ = std::fs::remove_dir(&paths.root);
    Ok(Remains {
        executors: Vec::new(),
        task_processes,
    })
}

fn spawn_executor(
    cfg: &ExecutorConfig,
    spec: &TaskSpec,
    paths: &RunPaths,
    lock: &TaskLock,
) -> Result<Executor, Failure> {
    let spec_file = File::open(&paths.spec)
        .map_err(ExecutorError::io(format!("open {}", paths.spec.display())))?;
    let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(ExecutorError::io("ready pipe"))?;
    // Every fd the child is handed is parked above 5, so its dups onto 0 to 5
    // cannot clobber one another. Its stdio is /dev/null.
    let spec_fd = dup_above(&spec_file)?;
    let ready_fd = dup_above(&ready_w)?;
    let lock_fd = dup_above(lock.file())?;
    let null = File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(ExecutorError::io("open /dev/null"))?;
    let null = dup_above(&null)?;

    // An executor never sees the engine's own faults, inherited from an
    // agent's environment: its own come from the config, or none.
    let fault_vars = [
        (
            taskgate_faults::FAULTS_ENV,
            cfg.faults.spec.as_deref().map(OsStr::new),
        ),
        (
            taskgate_faults::FAULT_LOG_ENV,
            cfg.faults.log.as_deref().map(|log| log.as_os_str()),
        ),
    ];
    let env: Vec<(OsString, OsString)> =
        std::env::vars_os()
            .filter(|(key, _)| !fault_vars.iter().any(|(name, _)| key == name))
            .chain(fault_vars.iter().filter_map(|(name, value)| {
                value.map(|v| (OsString::from(name), OsString::from(v)))
            }))
            .collect();
    let args = [
        OsStr::new("--run-dir"),
        cfg.run_dir.as_os_str(),
        OsStr::new("--cgroup-parent"),
        OsStr::new(cfg.cgroup_parent.as_str()),
    ];
    let fds = [
        (null.as_fd(), libc::STDIN_FILENO),
        (null.as_fd(), libc::STDOUT_FILENO),
        (null.as_fd(), libc::STDERR_FILENO),
        (spec_fd.as_fd(), SPEC_FD),
        (ready_fd.as_fd(), READY_FD),
        (lock_fd.as_fd(), LOCK_FD),
    ];
    let child = spawn(&cfg.executor_bin, &args, &env, &fds).map_err(ExecutorError::io(format!(
        "spawn {}",
        cfg.executor_bin.display()
    )))?;
    drop((spec_fd, ready_fd, lock_fd, null, ready_w, spec_file));
    // The first executor process only forks the daemon and exits: reap it here.
    let status = child
        .wait()
        .map_err(ExecutorError::io("wait for the executor to daemonize"))?;
    taskgate_faults::fault_point!(
        cfg.launcher_faults,
        taskgate_faults::points::EX_SPAWNED,
        spec.task_name.as_str()
    );
    let mut ready = BufReader::new(File::from(ready_r));
    let vanished = || ExecutorError::Vanished {
        log: spec.task_dir.join(crate::validate::EXECUTOR_LOG),
        first_exit: status.to_string(),
    };
    let daemon = match protocol::recv_or_eof(&mut ready, "executor").map_err(unread)? {
        Some(Ready::Daemon(pid)) => pid,
        Some(other) => {
            return Err(Failure::Garbled(ExecutorError::Protocol(format!(
                "{other:?} before the pid"
            ))))
        }
        None => return Err(vanished().into()),
    };
    // Opened while the daemon can only just have exited (it reports before
    // anything can fail), so any wait below is on it, never on a reused pid.
    let daemon = pidfd_open(daemon).ok();
    let wait_for_daemon = || match &daemon {
        Some(pidfd) => wait_exited(pidfd.as_fd()),
        None => Ok(()),
    };
    match protocol::recv_or_eof(&mut ready, "executor").map_err(unread)? {
        Some(Ready::Started(info)) => Ok(Executor { info }),
        // Its own error, a protocol one too (a spec it could not read).
        Some(Ready::Failed(error)) => {
            let _ = std::io::copy(&mut ready, &mut std::io::sink());
            wait_for_daemon()?;
            Err(Failure::Gone(error))
        }
        Some(Ready::Daemon(pid)) => Err(Failure::Garbled(ExecutorError::Protocol(format!(
            "a second pid {pid}"
        )))),
        None => {
            wait_for_daemon()?;
            Err(vanished().into())
        }
    }
}

fn dup_above(fd: &impl AsFd) -> Result<OwnedFd, ExecutorError> {
    let raw = fcntl(
        fd.as_fd().as_raw_fd(),
        FcntlArg::F_DUPFD_CLOEXEC(LOCK_FD + 1),
    )
    .map_err(ExecutorError::io("dup fd for the executor"))?;
    // SAFETY: fcntl just returned this new fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl Executor {
    /// Connects to an executor started by an earlier engine process. A pid
    /// of 0 in `info` means "not known" (only the socket path is); any other
    /// must match the executor's, which guards against a reused socket path.
    pub fn reattach(info: &ReattachInfo) -> Result<Executor, ExecutorError> {
        let probe = Executor { info: info.clone() };
        let known = |given: i32, actual: i32| given == 0 || given == actual;
        match probe.request(Request::Info)? {
            Response::Info(actual)
                if actual.socket_path == info.socket_path
                    && known(info.executor_pid, actual.executor_pid)
                    && known(info.task_pid, actual.task_pid) =>
            {
                Ok(Executor { info: actual })
            }
            Response::Info(actual) => Err(ExecutorError::Protocol(format!(
                "socket {} serves executor {} (task pid {}), not {} (task pid {})",
                info.socket_path.display(),
                actual.executor_pid,
                actual.task_pid,
                info.executor_pid,
                info.task_pid
            ))),
            other => Err(unexpected(other)),
        }
    }

    pub fn reattach_info(&self) -> ReattachInfo {
        self.info.clone()
    }

    /// Blocks until the task has exited; answers at once if it already has.
    pub fn wait(&self) -> Result<ExitResult, ExecutorError> {
        match self.request(Request::Wait)? {
            Response::Exited(result) => Ok(result),
            other => Err(unexpected(other)),
        }
    }

    /// For a runner told to die or to restart (`by`): whether the task
    /// ended on its own (see [`ExitPeek`]), without waiting for it; or that
    /// nothing answers on the executor's socket any more. Any other failure
    /// is an error: the executor may still be alive.
    pub fn own_end(&self, by: Doom) -> Result<ExitPeek, ExecutorError> {
        let stream = match UnixStream::connect(&self.info.socket_path) {
            Ok(stream) => stream,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
                return Ok(ExitPeek::ExecutorGone)
            }
            Err(e) => return Err(ExecutorError::io("connect to the executor")(e)),
        };
        match self.exchange(stream, Request::Peek { by })? {
            Response::Peeked(Some(exit)) => Ok(ExitPeek::OwnEnd(exit)),
            Response::Peeked(None) => Ok(ExitPeek::ToKill),
            other => Err(unexpected(other)),
        }
    }

    /// Whether a runner (a dead agent's, as far as a restored one knows)
    /// doomed the task, and by what: its kill or restart is under way.
    pub fn doomed(&self) -> Result<Option<Doom>, ExecutorError> {
        match self.request(Request::Doomed)? {
            Response::Doomed(by) => Ok(by),
            other => Err(unexpected(other)),
        }
    }

    /// Sends `signal`, waits up to `grace` for the task to exit, then kills its whole cgroup.
    /// Returns once the task has exited. Dooms it for `by` unless it already was.
    pub fn stop(
        &self,
        signal: KillSignal,
        grace: Duration,
        by: Doom,
    ) -> Result<StopOutcome, ExecutorError> {
        let grace_ms = grace.as_millis().try_into().unwrap_or(u64::MAX);
        match self.request(Request::Stop {
            signal,
            grace_ms,
            by,
        })? {
            Response::Stopped(outcome) => Ok(outcome),
            other => Err(unexpected(other)),
        }
    }

    /// Kills whatever is left of the task, removes the executor's cgroup,
    /// socket and spec file, and returns once the executor process has exited.
    pub fn shutdown(&self) -> Result<(), ExecutorError> {
        let stream = self.connect()?;
        // The connected peer is the executor itself, so its pid cannot have been reused.
        let peer =
            getsockopt(&stream, PeerCredentials).map_err(ExecutorError::io("SO_PEERCRED"))?;
        let pidfd = pidfd_open(peer.pid())?;
        self.exchange(stream, Request::Shutdown)
            .and_then(expect_done)?;
        wait_exited(pidfd.as_fd())
    }

    fn request(&self, req: Request) -> Result<Response, ExecutorError> {
        self.exchange(self.connect()?, req)
    }

    fn connect(&self) -> Result<UnixStream, ExecutorError> {
        UnixStream::connect(&self.info.socket_path).map_err(ExecutorError::io(format!(
            "connect to executor {} at {}",
            self.info.executor_pid,
            self.info.socket_path.display()
        )))
    }

    fn exchange(&self, mut stream: UnixStream, req: Request) -> Result<Response, ExecutorError> {
        protocol::send(&mut stream, &req)?;
        let what = format!("executor {}", self.info.executor_pid);
        match protocol::recv(&mut BufReader::new(stream), &what)? {
            Response::Failed(e) => Err(e),
            resp => Ok(resp),
        }
    }
}

/// What a runner told to die or to restart found when it asked whose end
/// its task's is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitPeek {
    /// The task ended on its own, before any runner so told asked (and
    /// before any kill signal): this exit.
    OwnEnd(ExitResult),
    /// Running, or ended only once doomed: the kill (or the restart) ends it.
    ToKill,
    /// Nothing answers on the executor's socket: it is dead.
    ExecutorGone,
}

fn expect_done(resp: Response) -> Result<(), ExecutorError> {
    match resp {
        Response::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

fn unexpected(resp: Response) -> ExecutorError {
    ExecutorError::Protocol(format!("unexpected reply {resp:?}"))
}
