//! The executor process: daemonize, start the task, then supervise it and
//! answer requests on its Unix socket until told to shut down.

use crate::confined::ConfinedDir;
use crate::error::ExecutorError;
use crate::isolation::cgroup::parent::{self, CgroupParent};
use crate::isolation::cgroup::TaskCgroup;
use crate::isolation::{spawn_task, TaskLaunch};
use crate::logs::{LogStream, RotatingWriter, LOGS_DIR};
use crate::protocol::{
    self, Doom, Ready, Request, Response, RunPaths, SpecFile, LOCK_FD, READY_FD, SPEC_FD,
};
use crate::spec::{ExitResult, ReattachInfo, TaskSpec};
use crate::sys::{now_ms, pidfd_send_signal};
use crate::validate::{check_spec, check_task_dir, Credentials, EXECUTOR_LOG};
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{ForkResult, Pid};
use std::fs::File;
use std::io::BufReader;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use taskgate_faults::seeded::SeededBug;
use taskgate_faults::{points, Faults};

/// Entry point of `taskgate-executor`: the spec is on fd 3, readiness goes to fd 4.
/// Returns only on a startup failure (after reporting it) or a broken socket.
pub fn run(run_dir: &Path, cgroup_parent: &CgroupParent) -> Result<(), ExecutorError> {
    for fd in [SPEC_FD, READY_FD, LOCK_FD] {
        // Keeps fd 3 open for the process's life (the oracle reads it) but out of the task.
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(ExecutorError::io(format!(
            "fd {fd} (the executor is started by launch(), not by hand)"
        )))?;
    }
    // SAFETY: launch() handed us these fds and nothing else in this process owns them.
    let spec_file = unsafe { File::from_raw_fd(SPEC_FD) };
    // Closed early only after a successful start: on a failure or a panic the
    // exit itself closes it, and that EOF tells launch() this process is gone.
    let mut ready = ManuallyDrop::new(unsafe { File::from_raw_fd(READY_FD) });
    // The task's lock, taken by launch(): held until this process exits, so
    // no other executor of the task can start meanwhile (see `task_lock`).
    let _lock = unsafe { File::from_raw_fd(LOCK_FD) };
    daemonize()?;
    let me = Ready::Daemon(std::process::id() as i32);
    if let Err(e) = protocol::send(&mut *ready, &me) {
        tracing::warn!("the launching engine is gone: {e}");
    }
    // Out of the agent's cgroup (a login session's, a unit's) into the
    // parent's executors leaf: the executor outlives the agent, whoever
    // started it.
    let started = parent::join_executors(cgroup_parent)
        .and_then(|()| Supervisor::start(run_dir, cgroup_parent, &spec_file));
    match started {
        Ok((sup, listener)) => {
            if let Err(e) = protocol::send(&mut *ready, &Ready::Started(sup.info.clone())) {
                tracing::warn!("the launching engine is gone, serving anyway: {e}");
            }
            drop(ManuallyDrop::into_inner(ready));
            sup.serve(listener)
        }
        Err(e) => {
            let _ = protocol::send(&mut *ready, &Ready::Failed(e.clone()));
            Err(e)
        }
    }
}

/// Forks once and lets the first process exit (launch() reaps it), so the
/// executor is orphaned into its own session and outlives the engine.
fn daemonize() -> Result<(), ExecutorError> {
    // SAFETY: still single-threaded; the parent only calls _exit.
    match unsafe { nix::unistd::fork() }.map_err(ExecutorError::io("fork"))? {
        ForkResult::Parent { .. } => unsafe { libc::_exit(0) },
        ForkResult::Child => nix::unistd::setsid()
            .map(drop)
            .map_err(ExecutorError::io("setsid")),
    }
}

/// What this executor created, so every way out removes exactly that.
struct Leftovers {
    paths: RunPaths,
    cgroup: Option<TaskCgroup>,
    socket: bool,
    root: bool,
}

impl Leftovers {
    /// The cgroup goes first: if it cannot be removed, the socket stays for
    /// a retry. The spec and lock files are not among them: after a failed
    /// start the launcher removes them once its own cleanup is done, under
    /// the lock (removed here, a second launch could lock a new file while
    /// that cleanup ran); at a shutdown, [`Supervisor::teardown`] does.
    fn remove(&mut self) -> Result<(), ExecutorError> {
        if let Some(cg) = &self.cgroup {
            cg.delete()?;
            self.cgroup = None;
        }
        if std::mem::take(&mut self.socket) {
            remove(&self.paths.socket, |p| std::fs::remove_file(p))?;
        }
        if std::mem::take(&mut self.root) {
            remove(&self.paths.root, |p| std::fs::remove_dir(p))?;
        }
        Ok(())
    }
}

fn remove(path: &Path, op: fn(&Path) -> std::io::Result<()>) -> Result<(), ExecutorError> {
    match op(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(ExecutorError::io(format!("remove {}", path.display()))(e))
        }
        _ => Ok(()),
    }
}

/// Where the task stands, as the exit's recording and a runner's peek
/// see it (both under the state's lock).
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Life {
    #[default]
    Running,
    /// A runner told to die or to restart found it running, or a kill
    /// signal went out: it is killed, and whatever ends it from here is
    /// the kill's end (or the restart's). Reaped, it keeps the reason for
    /// a restored runner.
    Doomed(Doom),
    /// Reaped (its exit recorded); `doomed` if it was before then, else
    /// its exit is the task's own end.
    Reaped { doomed: Option<Doom> },
}

impl Life {
    fn doomed(self) -> Option<Doom> {
        match self {
            Life::Running => None,
            Life::Doomed(by) => Some(by),
            Life::Reaped { doomed } => doomed,
        }
    }
}

#[derive(Default)]
struct State {
    /// `exit` follows `Life::Reaped` once the task's logs are drained.
    life: Life,
    exit: Option<ExitResult>,
    /// Wait replies being written; shutdown lets them finish before exiting.
    replying: usize,
}

impl State {
    /// A kill is on its way: whatever ends a task still running is the
    /// kill's (or the restart's, `by`).
    fn doom(&mut self, by: Doom) {
        if self.life == Life::Running {
            self.life = Life::Doomed(by);
        }
    }
}

/// The task's two log pumps, and what tells them the task ended: closing
/// `task_ended` (see [`RotatingWriter::pump`]).
struct Pumps {
    threads: [JoinHandle<()>; 2],
    task_ended: OwnedFd,
}

struct Supervisor {
    /// The task's name: the scope of this executor's fault points.
    task_name: String,
    /// This executor's fault points: the process is one task's run.
    faults: Faults,
    info: ReattachInfo,
    pidfd: OwnedFd,
    leftovers: Mutex<Leftovers>,
    state: Mutex<State>,
    changed: Condvar,
}

impl Supervisor {
    fn start(
        run_dir: &Path,
        cgroup_parent: &CgroupParent,
        spec_file: &File,
    ) -> Result<(Arc<Supervisor>, UnixListener), ExecutorError> {
        let file: SpecFile<TaskSpec> = serde_json::from_reader(BufReader::new(spec_file))
            .map_err(|e| ExecutorError::Protocol(format!("bad spec on fd {SPEC_FD}: {e}")))?;
        let run_as = file.run_as()?;
        let spec = file.spec;
        let faults = configured_faults()?;
        check_spec(&spec)?;
        check_task_dir(&spec)?;
        log_to_task_dir(&spec.task_dir)?;
        let paths = RunPaths::new(run_dir, &spec)?;
        let mut made = Leftovers {
            paths,
            cgroup: None,
            socket: false,
            root: false,
        };
        match Self::setup(&spec, cgroup_parent, run_as, &faults, &mut made) {
            Ok((task_pid, pidfd, listener, pumps)) => {
                tracing::info!("task {} started as pid {task_pid}", spec.task_name);
                let info = ReattachInfo {
                    socket_path: made.paths.socket.clone(),
                    executor_pid: std::process::id() as i32,
                    task_pid: task_pid.as_raw(),
                };
                let sup = Arc::new(Supervisor {
                    task_name: spec.task_name.clone(),
                    faults,
                    info,
                    pidfd,
                    leftovers: Mutex::new(made),
                    state: Mutex::new(State::default()),
                    changed: Condvar::new(),
                });
                let started_at_ms = now_ms();
                let reaper = Arc::clone(&sup);
                std::thread::spawn(move || reaper.reap(task_pid, started_at_ms, pumps));
                Ok((sup, listener))
            }
            Err(e) => {
                tracing::error!("task {} not started: {e}", spec.task_name);
                if let Err(cleanup) = made.remove() {
                    tracing::error!("cleaning up after the failed start: {cleanup}");
                }
                Err(e)
            }
        }
    }

    /// Everything up to the exec, recording what it creates in `made`. Must
    /// stay single-threaded until the task is cloned.
    fn setup(
        spec: &TaskSpec,
        cgroup_parent: &CgroupParent,
        creds: Credentials,
        faults: &Faults,
        made: &mut Leftovers,
    ) -> Result<(Pid, OwnedFd, UnixListener, Pumps), ExecutorError> {
        let cgroup = made.cgroup.insert(TaskCgroup::create(spec, cgroup_parent)?);
        taskgate_faults::fault_point!(
            faults,
            points::EX_AFTER_CGROUP,
            spec.task_name.as_str(),
            |msg| Err(ExecutorError::Injected(msg))
        );

        let logs_dir = std::sync::Arc::new(
            ConfinedDir::open(&spec.shared_alloc_dir)?.create_dir(LOGS_DIR, 0o755)?,
        );
        let mut pipes = Vec::new();
        for stream in LogStream::BOTH {
            let writer =
                RotatingWriter::open(logs_dir.clone(), &spec.task_name, stream, &spec.logs)?;
            let (r, w) =
                nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(ExecutorError::io("log pipe"))?;
            pipes.push((writer, File::from(r), w));
        }

        // Under the task's lock, a socket file here is a dead executor's.
        let socket = &made.paths.socket;
        taskgate_faults::fault_point!(
            faults,
            points::EX_BEFORE_BIND,
            spec.task_name.as_str(),
            |msg| Err(ExecutorError::Injected(msg))
        );
        remove(socket, |p| std::fs::remove_file(p))?;
        // Whoever can connect can stop the task: root only, from its
        // creation on (the umask is the process's, which is one thread yet).
        let umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
        let bound = UnixListener::bind(socket);
        nix::sys::stat::umask(umask);
        let listener = bound.map_err(ExecutorError::io(format!("bind {}", socket.display())))?;
        made.socket = true;
        match std::fs::create_dir(&made.paths.root) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(ExecutorError::io(format!(
                    "create {}",
                    made.paths.root.display()
                ))(e))
            }
            _ => made.root = true,
        }

        let [(out_log, out_r, out_w), (err_log, err_r, err_w)] =
            <[_; 2]>::try_from(pipes).unwrap_or_else(|_| unreachable!("two streams"));
        let launch = TaskLaunch {
            spec,
            creds,
            root_dir: &made.paths.root,
            cgroup,
            faults,
            stdout: out_w,
            stderr: err_w,
        };
        // SAFETY: no thread has been started yet; the pumps start below.
        let (pid, pidfd) = unsafe { spawn_task(launch)? };
        // Made after the task, so only this process holds its write end.
        let (ended_r, ended_w) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(ExecutorError::io("task-ended pipe"))?;
        let ended_r = Arc::new(ended_r);
        let err_ended = Arc::clone(&ended_r);
        let output_seen = |faults: Faults, task: String| {
            move || taskgate_faults::record_point!(faults, points::EX_TASK_OUTPUT, task.as_str())
        };
        let out_seen = output_seen(faults.clone(), spec.task_name.clone());
        let err_seen = output_seen(faults.clone(), spec.task_name.clone());
        let pumps = Pumps {
            threads: [
                std::thread::spawn(move || out_log.pump(out_r, &*ended_r, out_seen)),
                std::thread::spawn(move || err_log.pump(err_r, &*err_ended, err_seen)),
            ],
            task_ended: ended_w,
        };
        Ok((pid, pidfd, listener, pumps))
    }

    /// Waits for the task, lets the log pumps drain, and publishes the result.
    fn reap(&self, pid: Pid, started_at_ms: u64, pumps: Pumps) {
        let (exit_code, signal) = loop {
            match waitpid(pid, None) {
                Ok(WaitStatus::Exited(_, code)) => break (Some(code), None),
                Ok(WaitStatus::Signaled(_, sig, _)) => break (None, Some(sig as i32)),
                Err(nix::errno::Errno::EINTR) | Ok(_) => continue,
                Err(e) => {
                    tracing::error!("waitpid({pid}): {e}");
                    break (None, None);
                }
            }
        };
        let exited_at_ms = now_ms();
        {
            // Recorded and marked in one step: a stop answers by the mark.
            let mut st = self.lock();
            taskgate_faults::record_point!(
                self.faults,
                points::EX_TASK_EXITED,
                self.task_name.as_str(),
                taskgate_faults::Detail::Exit {
                    code: exit_code,
                    signal,
                }
            );
            st.life = Life::Reaped {
                doomed: st.life.doomed(),
            };
        }
        // The task's PID namespace is gone, and with it every writer of the
        // pipes inside it: the pumps copy what is left, and end.
        drop(pumps.task_ended);
        for pump in pumps.threads {
            let _ = pump.join();
        }
        let oom_killed = self
            .lock_leftovers()
            .cgroup
            .as_ref()
            .is_some_and(TaskCgroup::oom_killed);
        let result = ExitResult {
            exit_code,
            signal,
            oom_killed,
            started_at_ms,
            exited_at_ms,
        };
        tracing::info!("task exited: {result:?}");
        self.lock().exit = Some(result);
        self.changed.notify_all();
    }

    fn serve(self: Arc<Self>, listener: UnixListener) -> Result<(), ExecutorError> {
        for stream in listener.incoming() {
            let stream = stream.map_err(ExecutorError::io("accept on the executor socket"))?;
            let sup = Arc::clone(&self);
            std::thread::spawn(move || {
                if let Err(e) = sup.handle(stream) {
                    tracing::warn!("request failed: {e}");
                }
            });
        }
        Ok(())
    }

    fn handle(&self, stream: UnixStream) -> Result<(), ExecutorError> {
        let req: Request = protocol::recv(&mut BufReader::new(&stream), "engine")?;
        let mut out = &stream;
        let resp = match req {
            Request::Info => Response::Info(self.info.clone()),
            Request::Wait => {
                self.lock().replying += 1;
                let sent = protocol::send(&mut out, &Response::Exited(self.wait_exit()));
                self.lock().replying -= 1;
                self.changed.notify_all();
                return sent;
            }
            Request::Doomed => Response::Doomed(self.lock().life.doomed()),
            // The task's own end: reaped before any runner told to die or
            // to restart found it running, or any kill signal was sent. Its
            // result follows once the log pumps drained, which takes no
            // longer than they need.
            Request::Peek { by } => {
                let own_end = {
                    // Under the lock an exit is recorded under: the peek's
                    // record orders it against the exit's.
                    let mut st = self.lock();
                    taskgate_faults::record_point!(
                        self.faults,
                        points::EX_PEEKED,
                        self.task_name.as_str()
                    );
                    st.doom(by);
                    st.life == Life::Reaped { doomed: None }
                };
                Response::Peeked(own_end.then(|| self.wait_exit()))
            }
            Request::Stop {
                signal,
                grace_ms,
                by,
            } => match self.stop(signal, Duration::from_millis(grace_ms), by) {
                Ok(outcome) => Response::Stopped(outcome),
                Err(e) => Response::Failed(e),
            },
            Request::Shutdown => match self.teardown() {
                Ok(()) => {
                    protocol::send(&mut out, &Response::Done)?;
                    tracing::info!("shut down");
                    std::process::exit(0)
                }
                Err(e) => Response::Failed(e),
            },
        };
        protocol::send(&mut out, &resp)
    }

    /// Dooms a task still running without a peek first (a stop's signal,
    /// the teardown): the decision a peek would have recorded, recorded as
    /// one, so the history orders the task's end after it.
    fn doom(&self, st: &mut State, by: Doom) {
        if st.life == Life::Running {
            taskgate_faults::record_point!(self.faults, points::EX_PEEKED, self.task_name.as_str());
        }
        st.doom(by);
    }

    fn wait_exit(&self) -> ExitResult {
        let mut st = self.lock();
        loop {
            if let Some(exit) = &st.exit {
                return exit.clone();
            }
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Whether the task exits within `timeout`.
    fn exits_within(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        while st.exit.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = self
                .changed
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    fn stop(
        &self,
        signal: crate::KillSignal,
        grace: Duration,
        by: Doom,
    ) -> Result<crate::StopOutcome, ExecutorError> {
        {
            // Under the lock the exit is recorded with (see `reap`): an
            // exit recorded before this point is answered as such.
            let mut st = self.lock();
            if matches!(st.life, Life::Reaped { .. }) {
                return Ok(crate::StopOutcome::AlreadyExited);
            }
            self.doom(&mut st, by);
            if !SeededBug::KillSignalSkipped.active() {
                pidfd_send_signal(self.pidfd.as_fd(), signal.signal())?;
            }
        }
        if !self.exits_within(grace) {
            tracing::info!("task outlived its {grace:?} grace after {signal}: killing its cgroup");
            self.kill_all()?;
            self.wait_exit();
        }
        Ok(crate::StopOutcome::Signaled)
    }

    fn kill_all(&self) -> Result<(), ExecutorError> {
        if let Some(cg) = &self.lock_leftovers().cgroup {
            // The init's kill below ends the task all the same: a failed
            // freeze must not spare it.
            if let Err(err) = cg.kill_all() {
                tracing::warn!("killing the task's cgroup: {err}; killing its init");
            }
        }
        // SIGKILL from outside reaches the namespace's init whatever it handles,
        // and its death takes the rest of the namespace along.
        pidfd_send_signal(self.pidfd.as_fd(), Signal::SIGKILL)
    }

    /// Kills what is left, lets pending wait replies go out, removes every file and the cgroup.
    fn teardown(&self) -> Result<(), ExecutorError> {
        let unfinished = {
            let mut st = self.lock();
            self.doom(&mut st, Doom::Kill);
            st.exit.is_none()
        };
        if unfinished {
            self.kill_all()?;
            self.wait_exit();
        }
        let mut st = self.lock();
        while st.replying > 0 {
            st = self.changed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        drop(st);
        let mut made = self.lock_leftovers();
        made.remove()?;
        // The lock file last, while this executor still holds it: with it
        // gone, the next launch may begin, and this one's files are gone.
        remove(&made.paths.spec, |p| std::fs::remove_file(p))?;
        remove(&made.paths.lock, |p| std::fs::remove_file(p))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_leftovers(&self) -> MutexGuard<'_, Leftovers> {
        self.leftovers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The executor's own log is `executor.out` in the task dir; stderr goes there.
fn log_to_task_dir(task_dir: &Path) -> Result<(), ExecutorError> {
    let file = ConfinedDir::open(task_dir)?.open_append(EXECUTOR_LOG)?;
    nix::unistd::dup2(file.as_raw_fd(), libc::STDERR_FILENO)
        .map(drop)
        .map_err(ExecutorError::io("redirect stderr to executor.out"))
}

/// The executor honours the faults launch() set in its environment from its
/// config's [`crate::ExecutorFaults`] (launch() clears the engine's own).
/// Nothing can release a park across processes, so only park-free actions
/// make sense here.
#[cfg(feature = "failpoints")]
fn configured_faults() -> Result<Faults, ExecutorError> {
    Faults::from_env().map_err(|e| ExecutorError::Failpoints(e.to_string()))
}

/// A build without fault points has none to configure. (`Faults` is a unit
/// struct only when no crate of the build turns fault points on, so it is
/// named by `default()`, which builds it either way.)
#[cfg(not(feature = "failpoints"))]
#[allow(clippy::default_constructed_unit_structs)]
fn configured_faults() -> Result<Faults, ExecutorError> {
    Ok(Faults::default())
}
