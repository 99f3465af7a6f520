//! Prestart: create the task's first log files, as Nomad's logmon hook does,
//! so they exist (and can be tailed) before the task's first byte.

use super::{confined, Hook, HookContext, HookError, PrestartHook, TaskSetup};
use taskgate_executor::{log_file_name, LogStream};

pub struct LogFilesHook;

impl Hook for LogFilesHook {
    fn name(&self) -> &'static str {
        "log_files"
    }
}

impl PrestartHook for LogFilesHook {
    fn prestart(&self, ctx: &mut HookContext<'_>, _setup: &mut TaskSetup) -> Result<(), HookError> {
        // Beneath the alloc dir, never through a link a task planted in /alloc.
        let logs = ctx
            .alloc_dir
            .build_shared()
            .map_err(confined("log_files"))?;
        for stream in LogStream::BOTH {
            logs.open_append(&log_file_name(&ctx.task.name, stream, 0))
                .map_err(confined("log_files"))?;
        }
        Ok(())
    }
}
