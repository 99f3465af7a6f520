//! The driver seam: how the engine starts a task's process, finds it again
//! after an agent restart, waits for it and stops it. [`ExecDriver`] is the
//! real one (an isolating executor process per task);
//! [`crate::fake_driver::FakeDriver`] scripts exits and records every call,
//! so the engine's lifecycle and restore logic can be tested without root.
//!
//! Contract, for any driver:
//! - `start` resolves once the task's process was exec'd, or with why not
//!   (a task dir that prestart never built is the driver's error to report);
//!   it refuses a second start while the task's previous process is reachable.
//! - `reattach` finds a running task from its [`ReattachInfo`], or fails;
//!   it never starts anything.
//! - `wait` resolves with the exit, at once if the task already exited.
//! - `own_end`, asked by a runner told to die or to restart, resolves at
//!   once: with the exit if the task ended on its own (recorded before any
//!   runner so told asked, and before any kill signal); else that the kill
//!   ends it, which dooms it (any later end is the kill's or the restart's,
//!   whichever agent asks); or that its executor is gone (nothing answers).
//!   An error leaves the executor possibly alive.
//! - `doomed` says whether the task is doomed, and for what: by a runner's
//!   peek or stop (for a restored runner, what a dead agent's runner
//!   began), or for a kill by the executor's teardown. It dooms nothing.
//! - `stop` sends the signal, waits up to the grace, then kills; it resolves
//!   once the task has exited. It dooms the task for its kill or restart
//!   (`by`) unless a peek already had or the task had already exited.
//! - `shutdown` (blocking, for hooks) removes whatever reaches the task; a
//!   later `reattach` fails.
//! - `destroy_remains` kills whatever is left of a task's earlier attempts:
//!   an executor the engine cannot reach (answering or not yet), and every
//!   process of the task; it resolves once all of it is dead, after which a
//!   `start` is not refused.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use taskgate_executor::{
    Doom, Executor, ExecutorConfig, ExecutorError, ExitPeek, ExitResult, KillSignal, ReattachInfo,
    Remains, StopOutcome, TaskSpec,
};

pub type DriverFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ExecutorError>> + Send + 'a>>;

/// A started task, reachable from several places at once.
pub type RunningTask = Arc<dyn TaskHandle>;

pub trait Driver: Send + Sync {
    /// Refuses, as its job is placed, a task this driver could never start
    /// (the real driver: one whose executor socket cannot fit a socket
    /// address); by default, none.
    fn check_placeable(&self, _alloc_id: &str, _task: &str) -> Result<(), ExecutorError> {
        Ok(())
    }
    fn start(&self, spec: TaskSpec) -> DriverFuture<'_, RunningTask>;
    fn reattach(&self, info: ReattachInfo) -> DriverFuture<'_, RunningTask>;
    fn destroy_remains(&self, alloc_id: &str, task: &str) -> DriverFuture<'_, Remains>;
}

pub trait TaskHandle: Send + Sync {
    fn reattach_info(&self) -> ReattachInfo;
    fn wait(&self) -> DriverFuture<'_, ExitResult>;
    fn own_end(&self, by: Doom) -> DriverFuture<'_, ExitPeek>;
    fn doomed(&self) -> DriverFuture<'_, Option<Doom>>;
    fn stop(&self, signal: KillSignal, grace: Duration, by: Doom) -> DriverFuture<'_, StopOutcome>;
    fn shutdown(&self) -> Result<(), ExecutorError>;
}

/// The real driver: one `taskgate-executor` process per task.
pub struct ExecDriver {
    config: Arc<ExecutorConfig>,
}

/// A task started by an executor process.
struct ExecTask {
    executor: Arc<Executor>,
}

impl ExecDriver {
    /// `config.cgroup_parent` must be claimed ([`taskgate_executor::CgroupTree::claim`]).
    pub fn new(config: ExecutorConfig) -> Self {
        ExecDriver {
            config: Arc::new(config),
        }
    }
}

impl Driver for ExecDriver {
    fn check_placeable(&self, alloc_id: &str, task: &str) -> Result<(), ExecutorError> {
        let socket = taskgate_executor::socket_path(&self.config.run_dir, alloc_id, task);
        taskgate_executor::check_socket_path(&socket)
    }

    fn start(&self, spec: TaskSpec) -> DriverFuture<'_, RunningTask> {
        let config = self.config.clone();
        Box::pin(async move {
            let executor = blocking(move || taskgate_executor::launch(&config, &spec)).await?;
            Ok(exec_task(executor))
        })
    }

    fn reattach(&self, info: ReattachInfo) -> DriverFuture<'_, RunningTask> {
        Box::pin(async move {
            let executor = blocking(move || Executor::reattach(&info)).await?;
            Ok(exec_task(executor))
        })
    }

    fn destroy_remains(&self, alloc_id: &str, task: &str) -> DriverFuture<'_, Remains> {
        let config = self.config.clone();
        let (alloc_id, task) = (alloc_id.to_string(), task.to_string());
        Box::pin(blocking(move || {
            taskgate_executor::destroy_remains(&config, &alloc_id, &task)
        }))
    }
}

fn exec_task(executor: Executor) -> RunningTask {
    Arc::new(ExecTask {
        executor: Arc::new(executor),
    })
}

impl TaskHandle for ExecTask {
    fn reattach_info(&self) -> ReattachInfo {
        self.executor.reattach_info()
    }

    fn wait(&self) -> DriverFuture<'_, ExitResult> {
        let ex = self.executor.clone();
        Box::pin(blocking(move || ex.wait()))
    }

    fn own_end(&self, by: Doom) -> DriverFuture<'_, ExitPeek> {
        let ex = self.executor.clone();
        Box::pin(blocking(move || ex.own_end(by)))
    }

    fn doomed(&self) -> DriverFuture<'_, Option<Doom>> {
        let ex = self.executor.clone();
        Box::pin(blocking(move || ex.doomed()))
    }

    fn stop(&self, signal: KillSignal, grace: Duration, by: Doom) -> DriverFuture<'_, StopOutcome> {
        let ex = self.executor.clone();
        Box::pin(blocking(move || ex.stop(signal, grace, by)))
    }

    fn shutdown(&self) -> Result<(), ExecutorError> {
        self.executor.shutdown()
    }
}

/// The executor client blocks; keep it off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("executor client call panicked")
}
