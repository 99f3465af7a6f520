//! Options shared by every command that opens the engine or its state, or
//! talks to the agent serving them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use taskgate_engine::state::StateDb;
use taskgate_engine::{Engine, EngineConfig};

/// Where `--data-dir` points unless given.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/taskgate";

#[derive(clap::Args, Clone)]
pub struct AgentArgs {
    /// Where the state database, alloc dirs, executor sockets and the control
    /// socket live.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// A host dir to bind read-only into every task root, as HOST[:TASK];
    /// repeatable. Default: Nomad's /bin /etc /lib /lib64 /sbin /usr.
    #[arg(long = "chroot-env", value_name = "HOST[:TASK]")]
    pub chroot_env: Vec<String>,
    /// User tasks run as unless the job says otherwise.
    #[arg(long, default_value = "nobody")]
    pub user: String,
    /// Ceiling on processes per task.
    #[arg(long, default_value_t = 256)]
    pub pids_max: u64,
    /// The executor binary run for each task (default: `taskgate-executor`
    /// next to this binary).
    #[arg(long)]
    pub executor_bin: Option<PathBuf>,
    /// Seed of the restart jitter (default: drawn at start, and logged):
    /// the same seed, the same restart waits.
    #[arg(long)]
    pub restart_seed: Option<u64>,
}

impl AgentArgs {
    pub fn chroot_env(&self) -> BTreeMap<PathBuf, PathBuf> {
        if self.chroot_env.is_empty() {
            return taskgate_executor::default_chroot_env()
                .into_iter()
                .filter(|(host, _)| host.exists())
                .collect();
        }
        self.chroot_env
            .iter()
            .map(|entry| match entry.split_once(':') {
                Some((host, task)) => (PathBuf::from(host), PathBuf::from(task)),
                None => (PathBuf::from(entry), PathBuf::from(entry)),
            })
            .collect()
    }

    pub fn engine_config(&self) -> anyhow::Result<EngineConfig> {
        Ok(EngineConfig {
            data_dir: self.data_dir.clone(),
            executor_bin: match &self.executor_bin {
                Some(bin) => bin.clone(),
                None => super::sibling_executor()?,
            },
            chroot_env: self.chroot_env(),
            default_user: self.user.clone(),
            pids_max: self.pids_max,
            clock: std::sync::Arc::new(taskgate_engine::clock::SystemClock::default()),
            restart_seed: self.restart_seed.unwrap_or_else(|| {
                let seed = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
                    ^ u64::from(std::process::id());
                tracing::info!(seed, "restart jitter seed (replay with --restart-seed)");
                seed
            }),
        })
    }

    pub fn open_engine(&self) -> anyhow::Result<Engine> {
        super::require_root()?;
        Ok(Engine::open(self.engine_config()?)?)
    }

    pub fn open_state(&self) -> anyhow::Result<StateDb> {
        let path = self.data_dir.join("state.db");
        anyhow::ensure!(
            path.exists(),
            "no state database at {} (nothing has run with this --data-dir)",
            path.display()
        );
        Ok(StateDb::open(&path)?)
    }
}
