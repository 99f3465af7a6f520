//! Prestart: reject a task the executor could not start, before touching disk.

use super::{task_user, Hook, HookContext, HookError, PrestartHook, TaskSetup};

pub struct ValidateHook {
    default_user: String,
}

impl ValidateHook {
    pub fn new(default_user: &str) -> Self {
        ValidateHook {
            default_user: default_user.to_string(),
        }
    }
}

impl Hook for ValidateHook {
    fn name(&self) -> &'static str {
        "validate"
    }
}

impl PrestartHook for ValidateHook {
    fn prestart(&self, ctx: &mut HookContext<'_>, _setup: &mut TaskSetup) -> Result<(), HookError> {
        let fail = |message: String| {
            Err(HookError::Failed {
                hook: "validate",
                message,
            })
        };
        let task = ctx.task;
        if !task.command.starts_with('/') {
            return fail(format!(
                "command {:?} must be an absolute path inside the task root",
                task.command
            ));
        }
        task_user("validate", task, &self.default_user).map(drop)
    }
}
