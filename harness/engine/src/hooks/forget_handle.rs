//! Stop: the task runner is done for good; drop the executor handle so a
//! restored agent does not try to re-attach to a task that is gone.

use super::{Hook, HookContext, HookError, StopHook};

pub struct ForgetHandleHook;

impl Hook for ForgetHandleHook {
    fn name(&self) -> &'static str {
        "forget_handle"
    }
}

impl StopHook for ForgetHandleHook {
    fn stop(&self, ctx: &mut HookContext<'_>) -> Result<(), HookError> {
        ctx.record.handle = None;
        Ok(())
    }
}
