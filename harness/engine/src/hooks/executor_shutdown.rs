//! Exited: once the exit result is in hand, tell the executor to tear down
//! the task's cgroup and go away.

use super::{ExitedHook, Hook, HookContext, HookError};
use crate::driver::RunningTask;
use taskgate_executor::ExitResult;

pub struct ExecutorShutdownHook;

impl Hook for ExecutorShutdownHook {
    fn name(&self) -> &'static str {
        "executor_shutdown"
    }
}

impl ExitedHook for ExecutorShutdownHook {
    fn exited(
        &self,
        _ctx: &mut HookContext<'_>,
        task: &RunningTask,
        _result: Option<&ExitResult>,
    ) -> Result<(), HookError> {
        task.shutdown().map_err(|e| HookError::Failed {
            hook: "executor_shutdown",
            message: e.to_string(),
        })
    }
}
