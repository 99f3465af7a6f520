//! Prestart: build the task directory (Nomad's task_dir hook). The task's
//! own dirs belong to the user it runs as, as in Nomad, so an unprivileged
//! task can write its `local/`, `tmp/` and `secrets/`.

use super::{io, task_user, HookContext, HookError, PrestartHook, TaskSetup};
use crate::task_state::EventKind;
use std::os::unix::fs::PermissionsExt;

pub struct TaskDirHook {
    default_user: String,
}

impl TaskDirHook {
    pub fn new(default_user: &str) -> Self {
        TaskDirHook {
            default_user: default_user.to_string(),
        }
    }
}

impl PrestartHook for TaskDirHook {
    fn name(&self) -> &'static str {
        "task_dir"
    }

    fn prestart(&self, ctx: &mut HookContext<'_>, _setup: &mut TaskSetup) -> Result<(), HookError> {
        ctx.emit(EventKind::TaskSetup, "Building Task Directory");
        let user = task_user("task_dir", ctx.task, &self.default_user)?;
        ctx.alloc_dir.build_shared().map_err(io("task_dir"))?;
        let dir = ctx.alloc_dir.task_dir(&ctx.task.name);
        // secrets/ is private to the task; tmp/ is sticky, for whatever the
        // task's processes share there.
        for (sub, mode) in [("local", 0o755), ("secrets", 0o700), ("tmp", 0o1777)] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path).map_err(io("task_dir"))?;
            std::os::unix::fs::chown(&path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
                .map_err(io("task_dir"))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(io("task_dir"))?;
        }
        Ok(())
    }
}
