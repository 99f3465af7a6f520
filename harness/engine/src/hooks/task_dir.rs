//! Prestart: build the task directory (Nomad's task_dir hook).

use super::{io, HookContext, HookError, PrestartHook, TaskSetup};
use crate::task_state::EventKind;
use std::os::unix::fs::PermissionsExt;

pub struct TaskDirHook;

impl PrestartHook for TaskDirHook {
    fn name(&self) -> &'static str {
        "task_dir"
    }

    fn prestart(&self, ctx: &mut HookContext<'_>, _setup: &mut TaskSetup) -> Result<(), HookError> {
        ctx.emit(EventKind::TaskSetup, "Building Task Directory");
        ctx.alloc_dir.build_shared().map_err(io("task_dir"))?;
        let dir = ctx.alloc_dir.task_dir(&ctx.task.name);
        // secrets/ is private to the task; tmp/ is world-writable and sticky
        // because the task runs as an unprivileged user.
        for (sub, mode) in [("local", 0o755), ("secrets", 0o700), ("tmp", 0o1777)] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path).map_err(io("task_dir"))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(io("task_dir"))?;
        }
        Ok(())
    }
}
