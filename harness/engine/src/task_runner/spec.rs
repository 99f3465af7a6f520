//! The executor's spec for one attempt of the task, from its definition,
//! its prestart setup and the engine's defaults.

use super::*;

/// Settings every task spec shares, from the engine's configuration.
#[derive(Debug, Clone)]
pub struct SpecDefaults {
    pub chroot_env: BTreeMap<PathBuf, PathBuf>,
    pub default_user: String,
    pub pids_max: u64,
}

impl TaskRunner {
    pub(super) fn socket_path(&self) -> PathBuf {
        taskgate_executor::socket_path(&self.deps.run_dir, &self.deps.alloc_id, &self.task.name)
    }

    pub(super) fn spec(&self, setup: &TaskSetup) -> TaskSpec {
        let task = &self.task;
        let dir = &self.deps.alloc_dir;
        let defaults = &self.deps.defaults;
        TaskSpec {
            alloc_id: self.deps.alloc_id.clone(),
            task_name: task.name.clone(),
            task_dir: dir.task_dir(&task.name),
            shared_alloc_dir: dir.shared(),
            chroot_env: defaults.chroot_env.clone(),
            command: task.command.clone(),
            args: task.args.clone(),
            env: setup.env.clone(),
            user: task
                .user
                .clone()
                .unwrap_or_else(|| defaults.default_user.clone()),
            resources: Resources {
                cpu_shares: task.resources.cpu.max(2),
                memory_mb: task.resources.memory_mb,
                pids_max: defaults.pids_max,
            },
            network_isolation: true,
            logs: task.logs.config(),
            kill_signal: task.kill_signal,
            kill_timeout: task.kill_timeout,
            rlimits: Rlimits::default(),
            oom_score_adj: taskgate_executor::DEFAULT_OOM_SCORE_ADJ,
        }
    }
}
