//! Prekill: Nomad's `shutdown_delay`. The task is told it is going (an
//! event), and the kill signal waits the task's delay, so whoever talks to
//! it has time to notice before it stops answering.

use super::{Hook, HookContext, HookError, PrekillHook};
use crate::task_state::EventKind;
use std::time::Duration;

pub struct ShutdownDelayHook;

impl Hook for ShutdownDelayHook {
    fn name(&self) -> &'static str {
        "shutdown_delay"
    }
}

impl PrekillHook for ShutdownDelayHook {
    fn prekill(&self, ctx: &mut HookContext<'_>) -> Result<Duration, HookError> {
        let delay = ctx.task.shutdown_delay;
        if !delay.is_zero() {
            ctx.emit(
                EventKind::WaitingShutdownDelay,
                format!("Waiting for shutdown_delay of {delay:?} before killing the task."),
            );
        }
        Ok(delay)
    }
}
