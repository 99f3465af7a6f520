//! A driver without processes, for testing the engine's own logic without
//! root: each task's exits are scripted, and every start, stop, reattach and
//! shutdown is recorded. Its "executors" live in a world that outlives any
//! one engine, as real executors outlive their agent, so a test can drop an
//! engine mid-run and restore a new one against the same world.
//!
//! It keeps the real driver's contract (see [`crate::driver`]), including
//! the symptom in docs/nomad-prestart-race-report.txt: a start whose task dir prestart never built fails,
//! as the real executor's does.

use crate::driver::{Driver, DriverFuture, RunningTask, TaskHandle};
use crate::lock;
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use taskgate_executor::{
    Doom, ExecutorError, ExitPeek, ExitResult, KillSignal, ReattachInfo, Remains, StopOutcome,
    TaskSpec,
};
use taskgate_faults::Faults;
use tokio::sync::watch;

/// How one start of a task ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Exits on its own, at once, with this code.
    Code(i32),
    /// Runs until it is stopped (then reports the stop signal).
    UntilStopped,
}

/// One call the engine made, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Start {
        task: String,
    },
    /// A start the driver refused, and why.
    StartFailed {
        task: String,
        error: String,
    },
    Stop {
        task: String,
        signal: KillSignal,
    },
    Reattach {
        socket: PathBuf,
        found: bool,
    },
    Shutdown {
        task: String,
    },
    /// Remains destroyed: whether a live "executor" was among them.
    DestroyRemains {
        task: String,
        found: bool,
    },
}

struct World {
    /// Where the real executors' sockets would be: reattach looks there.
    run_dir: PathBuf,
    /// Per task: how its next starts end; once used up, [`Exit::UntilStopped`].
    script: BTreeMap<String, VecDeque<Exit>>,
    /// The reachable tasks, by their (fake) socket path.
    live: BTreeMap<PathBuf, Arc<FakeTask>>,
    calls: Vec<Call>,
    /// Each successful start's environment, with its task's name.
    envs: Vec<(String, BTreeMap<String, String>)>,
    next_pid: i32,
}

/// Cheap to clone: clones share one world.
#[derive(Clone)]
pub struct FakeDriver {
    world: Arc<Mutex<World>>,
    /// The run's fault points, reached where a real launch and executor would.
    faults: Faults,
}

/// Where a fake task's attempt stands, as its executor would tell.
#[derive(Debug, Clone)]
enum Life {
    /// `doomed` once a runner told to die or to restart found it running
    /// (or a kill signal was sent): whatever ends it from then on is the
    /// kill's or the restart's.
    Running { doomed: Option<Doom> },
    /// `doomed` as it was when it ended: none, its own end.
    Exited {
        exit: ExitResult,
        doomed: Option<Doom>,
    },
    /// Its executor died and nothing answers for it; its task, the
    /// attempt's remains, may run on until they are destroyed.
    ExecutorGone,
}

struct FakeTask {
    task: String,
    info: ReattachInfo,
    life: watch::Sender<Life>,
    world: Arc<Mutex<World>>,
    faults: Faults,
}

impl FakeDriver {
    /// The fake driver makes no cgroup: an engine config for it names this
    /// parent, which nothing claims ([`crate::Engine::open_with`] does not).
    pub fn cgroup_parent() -> taskgate_executor::CgroupParent {
        taskgate_executor::CgroupParent::new("/taskgate-fake-driver").expect("a valid path")
    }

    /// A driver whose tasks answer at the socket paths real executors in
    /// `run_dir` would have (the engine's `<data dir>/run`), so the engine's
    /// own fallback to the deterministic path works as it does for real.
    /// Its "executors" reach their points in `faults`, the run's.
    pub fn new(run_dir: PathBuf, faults: Faults) -> FakeDriver {
        FakeDriver {
            world: Arc::new(Mutex::new(World {
                run_dir,
                script: BTreeMap::new(),
                live: BTreeMap::new(),
                calls: Vec::new(),
                envs: Vec::new(),
                next_pid: 0,
            })),
            faults,
        }
    }

    /// Scripts how the next starts of `task` end, in order.
    pub fn script(&self, task: &str, exits: impl IntoIterator<Item = Exit>) {
        self.lock()
            .script
            .entry(task.to_string())
            .or_default()
            .extend(exits);
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The environment each of `task`'s starts got, in order.
    pub fn envs(&self, task: &str) -> Vec<BTreeMap<String, String>> {
        (self.lock().envs.iter())
            .filter(|(t, _)| t == task)
            .map(|(_, env)| env.clone())
            .collect()
    }

    /// How many times `task` was started.
    pub fn starts(&self, task: &str) -> usize {
        self.lock()
            .calls
            .iter()
            .filter(|c| matches!(c, Call::Start { task: t } if t == task))
            .count()
    }

    /// Every stop the engine asked for, in order.
    pub fn stops(&self) -> Vec<Call> {
        (self.lock().calls.iter())
            .filter(|c| matches!(c, Call::Stop { .. }))
            .cloned()
            .collect()
    }

    /// Ends `task`'s running process with `code`, as if it exited on its
    /// own now (its "executor" lives on, as a real one does).
    pub fn exit(&self, task: &str, code: i32) {
        self.live_task(task).finish(Some(code), None, None);
    }

    /// A runner told to die or to restart (`by`) found `task` running and
    /// doomed it, then died with its agent before going on.
    pub fn doom(&self, task: &str, by: Doom) {
        self.live_task(task).peek(by);
    }

    /// `task`'s executor dies, its task still running: the attempt is lost,
    /// and what it left stays until its remains are destroyed.
    pub fn lose_executor(&self, task: &str) {
        self.live_task(task).life.send_replace(Life::ExecutorGone);
    }

    fn live_task(&self, task: &str) -> Arc<FakeTask> {
        let running = self.lock().live.values().find(|t| t.task == task).cloned();
        running.unwrap_or_else(|| panic!("{task} has no live executor"))
    }

    /// Tasks started and not shut down or destroyed: their executors, or
    /// a lost executor's remains.
    pub fn live(&self) -> Vec<String> {
        self.lock().live.values().map(|t| t.task.clone()).collect()
    }

    fn lock(&self) -> MutexGuard<'_, World> {
        lock(&self.world)
    }
}

fn result(exit_code: Option<i32>, signal: Option<i32>) -> ExitResult {
    ExitResult {
        exit_code,
        signal,
        oom_killed: false,
        started_at_ms: 0,
        exited_at_ms: 0,
    }
}

impl Driver for FakeDriver {
    fn start(&self, spec: TaskSpec) -> DriverFuture<'_, RunningTask> {
        let (world, faults) = (self.world.clone(), self.faults.clone());
        Box::pin(async move {
            // Where a real launch's executor would be spawned: a harness
            // exploring against the fake takes each hit for one launch.
            taskgate_faults::fault_point!(
                faults,
                taskgate_faults::points::EX_SPAWNED,
                spec.task_name.as_str()
            );
            let mut w = lock(&world);
            let socket =
                taskgate_executor::socket_path(&w.run_dir, &spec.alloc_id, &spec.task_name);
            // A lost executor's remains are destroyed first, as the real
            // launch does (its lock is free).
            if (w.live.get(&socket)).is_some_and(|t| t.is_lost()) {
                w.live.remove(&socket);
            }
            let refused = if !spec.task_dir.is_dir() {
                Some(ExecutorError::TaskDirMissing {
                    path: spec.task_dir.clone(),
                })
            } else if w.live.contains_key(&socket) {
                Some(ExecutorError::AlreadyRunning {
                    socket: socket.clone(),
                })
            } else {
                None
            };
            if let Some(error) = refused {
                w.calls.push(Call::StartFailed {
                    task: spec.task_name.clone(),
                    error: error.to_string(),
                });
                return Err(error);
            }
            let exit = w
                .script
                .get_mut(&spec.task_name)
                .and_then(VecDeque::pop_front)
                .unwrap_or(Exit::UntilStopped);
            w.next_pid += 1;
            let info = ReattachInfo {
                socket_path: socket.clone(),
                executor_pid: w.next_pid,
                task_pid: w.next_pid,
            };
            let (tx, _) = watch::channel(match exit {
                Exit::Code(code) => Life::Exited {
                    exit: result(Some(code), None),
                    doomed: None,
                },
                Exit::UntilStopped => Life::Running { doomed: None },
            });
            let task = Arc::new(FakeTask {
                task: spec.task_name.clone(),
                info,
                life: tx,
                world: world.clone(),
                faults,
            });
            w.live.insert(socket, task.clone());
            w.envs.push((spec.task_name.clone(), spec.env));
            w.calls.push(Call::Start {
                task: spec.task_name,
            });
            drop(w);
            if let Exit::Code(code) = exit {
                task.record_exit(Some(code), None);
            }
            Ok(task as RunningTask)
        })
    }

    fn reattach(&self, info: ReattachInfo) -> DriverFuture<'_, RunningTask> {
        let world = self.world.clone();
        Box::pin(async move {
            let mut w = lock(&world);
            // As the real reattach: a known pid must be the one serving.
            let known = |given: i32, actual: i32| given == 0 || given == actual;
            let found = w.live.get(&info.socket_path).cloned().filter(|t| {
                !t.is_lost()
                    && known(info.executor_pid, t.info.executor_pid)
                    && known(info.task_pid, t.info.task_pid)
            });
            w.calls.push(Call::Reattach {
                socket: info.socket_path.clone(),
                found: found.is_some(),
            });
            found.map(|t| t as RunningTask).ok_or_else(|| {
                ExecutorError::Protocol(format!("no executor at {}", info.socket_path.display()))
            })
        })
    }

    fn destroy_remains(&self, alloc_id: &str, task: &str) -> DriverFuture<'_, Remains> {
        let world = self.world.clone();
        let (alloc_id, task) = (alloc_id.to_string(), task.to_string());
        Box::pin(async move {
            let mut w = lock(&world);
            let socket = taskgate_executor::socket_path(&w.run_dir, &alloc_id, &task);
            let found = w.live.remove(&socket);
            w.calls.push(Call::DestroyRemains {
                task: task.clone(),
                found: found.is_some(),
            });
            drop(w);
            let mut remains = Remains::default();
            if let Some(left) = found {
                left.end(libc::SIGKILL, Doom::Kill);
                remains.executors.push(left.info.executor_pid);
                remains.task_processes.push(left.info.task_pid);
            }
            Ok(remains)
        })
    }
}

impl FakeTask {
    /// Its executor is gone: nothing answers for it any more.
    fn is_lost(&self) -> bool {
        matches!(*self.life.borrow(), Life::ExecutorGone)
    }

    /// Ends a running task by `signal`; an ended one stays as it ended.
    /// One whose executor is gone ends unrecorded, as no executor reaps it.
    fn end(&self, signal: i32, by: Doom) -> StopOutcome {
        if self.finish(None, Some(signal), Some(by)) {
            StopOutcome::Signaled
        } else {
            StopOutcome::AlreadyExited
        }
    }

    /// Ends the running task with this exit (`killed`: by a kill signal,
    /// which dooms it unless a runner already had), recorded as its
    /// executor records it, in one step a peek cannot come between (as the
    /// real executor's lock makes it); false if it was not running.
    fn finish(&self, code: Option<i32>, signal: Option<i32>, killed: Option<Doom>) -> bool {
        self.life.send_if_modified(|life| {
            let Life::Running { doomed } = *life else {
                return false;
            };
            // A kill signal that dooms it is recorded as the executor's
            // stop records it: as a peek.
            if doomed.is_none() && killed.is_some() {
                self.record_peeked();
            }
            *life = Life::Exited {
                exit: result(code, signal),
                doomed: doomed.or(killed),
            };
            self.record_exit(code, signal);
            true
        })
    }

    /// A runner's peek, for a kill or a restart (`by`): whether the task
    /// ended on its own; a running one is doomed.
    fn peek(&self, by: Doom) -> ExitPeek {
        let mut peek = ExitPeek::ExecutorGone;
        // Dooming a running task wakes no waiter: it still runs.
        self.life.send_if_modified(|life| {
            peek = match life {
                Life::Running { doomed } => {
                    doomed.get_or_insert(by);
                    ExitPeek::ToKill
                }
                Life::Exited { exit, doomed: None } => ExitPeek::OwnEnd(exit.clone()),
                Life::Exited {
                    doomed: Some(_), ..
                } => ExitPeek::ToKill,
                Life::ExecutorGone => return false,
            };
            // Only a live executor answers, and records that it did.
            self.record_peeked();
            false
        });
        peek
    }

    /// What a real executor records when it dooms its task (or answers a
    /// peek).
    fn record_peeked(&self) {
        taskgate_faults::record_point!(
            self.faults,
            taskgate_faults::points::EX_PEEKED,
            self.task.as_str()
        );
    }

    /// What a real executor records when it reaps its task.
    fn record_exit(&self, code: Option<i32>, signal: Option<i32>) {
        taskgate_faults::record_point!(
            self.faults,
            taskgate_faults::points::EX_TASK_EXITED,
            self.task.as_str(),
            taskgate_faults::Detail::Exit { code, signal }
        );
    }
}

impl TaskHandle for FakeTask {
    fn reattach_info(&self) -> ReattachInfo {
        self.info.clone()
    }

    fn wait(&self) -> DriverFuture<'_, ExitResult> {
        let mut life = self.life.subscribe();
        Box::pin(async move {
            let ended = life
                .wait_for(|l| !matches!(l, Life::Running { .. }))
                .await
                .expect("the task holds its sender")
                .clone();
            match ended {
                Life::Exited { exit, .. } => Ok(exit),
                _ => Err(gone()),
            }
        })
    }

    fn own_end(&self, by: Doom) -> DriverFuture<'_, ExitPeek> {
        let peek = self.peek(by);
        Box::pin(async move { Ok(peek) })
    }

    fn doomed(&self) -> DriverFuture<'_, Option<Doom>> {
        let doomed = match &*self.life.borrow() {
            Life::Running { doomed } | Life::Exited { doomed, .. } => Ok(*doomed),
            Life::ExecutorGone => Err(gone()),
        };
        Box::pin(async move { doomed })
    }

    fn stop(
        &self,
        signal: KillSignal,
        _grace: Duration,
        by: Doom,
    ) -> DriverFuture<'_, StopOutcome> {
        Box::pin(async move {
            lock(&self.world).calls.push(Call::Stop {
                task: self.task.clone(),
                signal,
            });
            if self.is_lost() {
                return Err(gone());
            }
            Ok(self.end(signal.signal() as i32, by))
        })
    }

    fn shutdown(&self) -> Result<(), ExecutorError> {
        if self.is_lost() {
            return Err(gone());
        }
        // Like the executor's teardown: kill what is left, then go away.
        self.end(libc::SIGKILL, Doom::Kill);
        let mut w = lock(&self.world);
        w.live.remove(&self.info.socket_path);
        w.calls.push(Call::Shutdown {
            task: self.task.clone(),
        });
        Ok(())
    }
}

/// What a real client meets at a dead executor's socket.
fn gone() -> ExecutorError {
    ExecutorError::Protocol("the fake executor is gone".into())
}
