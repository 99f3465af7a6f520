//! Prestart: the task's environment: Nomad's NOMAD_* variables, then the
//! jobspec's `env`, which may override them.

use super::{HookContext, HookError, PrestartHook, TaskSetup};

pub struct TaskEnvHook;

impl PrestartHook for TaskEnvHook {
    fn name(&self) -> &'static str {
        "task_env"
    }

    fn prestart(&self, ctx: &mut HookContext<'_>, setup: &mut TaskSetup) -> Result<(), HookError> {
        let task = ctx.task;
        let builtins = [
            ("NOMAD_ALLOC_ID", ctx.alloc_id.to_string()),
            ("NOMAD_TASK_NAME", task.name.clone()),
            ("NOMAD_ALLOC_DIR", "/alloc".to_string()),
            ("NOMAD_TASK_DIR", "/local".to_string()),
            ("NOMAD_SECRETS_DIR", "/secrets".to_string()),
            ("NOMAD_MEMORY_LIMIT", task.resources.memory_mb.to_string()),
            ("NOMAD_CPU_LIMIT", task.resources.cpu.to_string()),
            (
                "PATH",
                "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".to_string(),
            ),
            ("TMPDIR", "/tmp".to_string()),
        ];
        setup.env = builtins
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        setup.env.extend(task.env.clone());
        Ok(())
    }
}
