//! The exec driver: the engine's async face of the blocking executor client.

use std::sync::Arc;
use std::time::Duration;
use taskgate_executor::{
    Executor, ExecutorConfig, ExecutorError, ExitResult, ReattachInfo, TaskSpec,
};

#[derive(Clone)]
pub struct ExecDriver {
    config: Arc<ExecutorConfig>,
}

/// A started task: its executor, reachable from several places at once.
#[derive(Clone)]
pub struct RunningTask {
    executor: Arc<Executor>,
}

impl ExecDriver {
    pub fn new(config: ExecutorConfig) -> Self {
        ExecDriver {
            config: Arc::new(config),
        }
    }

    /// Launches an executor for the task; returns once the task was exec'd.
    pub async fn start(&self, spec: TaskSpec) -> Result<RunningTask, ExecutorError> {
        let config = self.config.clone();
        let executor = blocking(move || taskgate_executor::launch(&config, &spec)).await?;
        Ok(RunningTask {
            executor: Arc::new(executor),
        })
    }

    /// Finds a running executor again after an agent restart.
    pub async fn reattach(&self, info: ReattachInfo) -> Result<RunningTask, ExecutorError> {
        let executor = blocking(move || Executor::reattach(&info)).await?;
        Ok(RunningTask {
            executor: Arc::new(executor),
        })
    }
}

impl RunningTask {
    pub fn reattach_info(&self) -> ReattachInfo {
        self.executor.reattach_info()
    }

    pub async fn wait(&self) -> Result<ExitResult, ExecutorError> {
        let ex = self.executor.clone();
        blocking(move || ex.wait()).await
    }

    pub async fn stop(&self, signal: String, grace: Duration) -> Result<(), ExecutorError> {
        let ex = self.executor.clone();
        blocking(move || ex.stop(&signal, grace)).await
    }

    /// Blocking: used from hooks, which are synchronous.
    pub fn shutdown(&self) -> Result<(), ExecutorError> {
        self.executor.shutdown()
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("executor client call panicked")
}
