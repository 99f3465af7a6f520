//! The task's environment: Nomad's NOMAD_* variables, `NOMAD_META_<key>`
//! for each `meta` entry, then the jobspec's `env`, which may override
//! them. Built afresh by each attempt's prestart; an in-place update tells
//! what the next attempt's environment changes.

use super::{Hook, HookContext, HookError, PrestartHook, TaskSetup, UpdateHook};
use crate::job::{Task, META_PREFIX};
use crate::task_state::EventKind;
use std::collections::BTreeMap;

pub struct TaskEnvHook;

impl TaskEnvHook {
    fn env(alloc_id: &str, task: &Task) -> BTreeMap<String, String> {
        let builtins = [
            ("NOMAD_ALLOC_ID", alloc_id.to_string()),
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
        let mut env: BTreeMap<String, String> = builtins
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        env.extend((task.meta.iter()).map(|(k, v)| (format!("{META_PREFIX}{k}"), v.clone())));
        env.extend(task.env.clone());
        env
    }
}

impl Hook for TaskEnvHook {
    fn name(&self) -> &'static str {
        "task_env"
    }
}

impl PrestartHook for TaskEnvHook {
    fn prestart(&self, ctx: &mut HookContext<'_>, setup: &mut TaskSetup) -> Result<(), HookError> {
        setup.env = Self::env(ctx.alloc_id, ctx.task);
        Ok(())
    }
}

impl UpdateHook for TaskEnvHook {
    fn update(&self, ctx: &mut HookContext<'_>, new: &Task) -> Result<(), HookError> {
        let (old, new) = (
            Self::env(ctx.alloc_id, ctx.task),
            Self::env(ctx.alloc_id, new),
        );
        let changed: Vec<&str> = (old.keys().chain(new.keys()))
            .filter(|k| old.get(*k) != new.get(*k))
            .map(String::as_str)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if !changed.is_empty() {
            let message = format!(
                "Environment changed for the next attempt: {}",
                changed.join(", ")
            );
            ctx.emit(EventKind::Updated, message);
        }
        Ok(())
    }
}
