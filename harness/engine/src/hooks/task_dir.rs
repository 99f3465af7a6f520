//! Prestart: build the task directory (Nomad's task_dir hook). The task's
//! own dirs belong to the user it runs as, as in Nomad, so an unprivileged
//! task can write its `local/`, `tmp/` and `secrets/`. Every dir is made,
//! given away and chmodded through its own fd (see `AllocDir`).

use super::{confined, task_user, Hook, HookContext, HookError, PrestartHook, TaskSetup};
use crate::task_state::EventKind;
use taskgate_executor::{SECRETS_DIR, TASK_SUBDIRS};

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

/// secrets/ is private to the task; tmp/ is sticky, for whatever the
/// task's processes share there.
fn mode(sub: &str) -> u32 {
    match sub {
        SECRETS_DIR => 0o700,
        "tmp" => 0o1777,
        _ => 0o755,
    }
}

impl Hook for TaskDirHook {
    fn name(&self) -> &'static str {
        "task_dir"
    }
}

impl PrestartHook for TaskDirHook {
    fn prestart(&self, ctx: &mut HookContext<'_>, _setup: &mut TaskSetup) -> Result<(), HookError> {
        ctx.emit(EventKind::TaskSetup, "Building Task Directory");
        let user = task_user("task_dir", ctx.task, &self.default_user)?;
        ctx.alloc_dir.build_shared().map_err(confined("task_dir"))?;
        let dir = (ctx.alloc_dir.build_task_dir(&ctx.task.name)).map_err(confined("task_dir"))?;
        for sub in TASK_SUBDIRS {
            let sub_dir = dir
                .create_dir(sub, mode(sub))
                .map_err(confined("task_dir"))?;
            sub_dir
                .chown(user.uid.as_raw(), user.gid.as_raw())
                .and_then(|()| sub_dir.chmod(mode(sub)))
                .map_err(confined("task_dir"))?;
        }
        Ok(())
    }
}
