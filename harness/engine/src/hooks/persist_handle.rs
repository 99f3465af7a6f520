//! Poststart: remember how to reach the task's executor, so an agent restart
//! re-attaches to it instead of starting the task again.

use super::{Hook, HookContext, HookError, PoststartHook};
use crate::driver::RunningTask;

pub struct PersistHandleHook;

impl Hook for PersistHandleHook {
    fn name(&self) -> &'static str {
        "persist_handle"
    }
}

impl PoststartHook for PersistHandleHook {
    fn poststart(&self, ctx: &mut HookContext<'_>, task: &RunningTask) -> Result<(), HookError> {
        ctx.record.handle = Some(task.reattach_info());
        Ok(())
    }
}
