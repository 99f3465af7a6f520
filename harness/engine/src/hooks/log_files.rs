//! Prestart: create the task's first log files, as Nomad's logmon hook does,
//! so they exist (and can be tailed) before the task's first byte.

use super::{io, HookContext, HookError, PrestartHook, TaskSetup};

pub struct LogFilesHook;

impl PrestartHook for LogFilesHook {
    fn name(&self) -> &'static str {
        "log_files"
    }

    fn prestart(&self, ctx: &mut HookContext<'_>, _setup: &mut TaskSetup) -> Result<(), HookError> {
        for stream in ["stdout", "stderr"] {
            let path = ctx.alloc_dir.log_file(&ctx.task.name, stream);
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(io("log_files"))?;
        }
        Ok(())
    }
}
