//! The engine: configuration, the state database, and the entry points to
//! run a new allocation or restore the ones a previous agent left running.

use crate::alloc::{ClientStatus, DesiredStatus};
use crate::alloc_dir::AllocDir;
use crate::alloc_runner::{self, AllocHandle};
use crate::clock::Clock;
use crate::driver::{Driver, ExecDriver};
use crate::hooks::HookSet;
use crate::jobspec::Job;
use crate::state::{AllocRecord, StateDb, StateError};
use crate::task_runner::{SpecDefaults, TaskRunnerDeps};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use taskgate_executor::ExecutorConfig;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Holds `state.db`, `allocs/<id>/` and `run/` (executor sockets and
    /// the agent's control socket).
    pub data_dir: PathBuf,
    /// The per-task executor binary (`taskgate-executor`).
    pub executor_bin: PathBuf,
    /// Host directories bind-mounted read-only into every task's root.
    pub chroot_env: BTreeMap<PathBuf, PathBuf>,
    pub default_user: String,
    /// Ceiling on processes per task, against fork bombs.
    pub pids_max: u64,
    /// What restart intervals and delays are measured on.
    pub clock: Arc<dyn Clock>,
    /// Where restart jitter is drawn from: the same seed, the same waits.
    pub restart_seed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("building the alloc dir: {0}")]
    AllocDir(#[from] taskgate_executor::confined::ConfinedError),
    #[error("job {job:?} has no group {group:?}")]
    NoSuchGroup { job: String, group: String },
}

/// What [`Engine::restore`] found.
#[derive(Default)]
pub struct Restored {
    pub allocs: Vec<AllocHandle>,
    pub skipped: Vec<SkippedAlloc>,
}

/// An allocation left unrestored: its record (or one of its tasks') could
/// not be read.
#[derive(Debug, thiserror::Error)]
#[error("alloc {key} not restored: {error}")]
pub struct SkippedAlloc {
    pub key: String,
    pub error: StateError,
}

pub struct Engine {
    config: EngineConfig,
    state: Arc<StateDb>,
    hooks: Arc<HookSet>,
    driver: Arc<dyn Driver>,
    defaults: Arc<SpecDefaults>,
}

impl Engine {
    /// Opens the engine with the real driver: an executor process per task.
    pub fn open(config: EngineConfig) -> Result<Engine, EngineError> {
        let driver = Arc::new(ExecDriver::new(ExecutorConfig {
            executor_bin: config.executor_bin.clone(),
            run_dir: run_dir(&config.data_dir),
        }));
        Engine::open_with(config, driver)
    }

    /// Opens the engine with `driver` (the fake one in tests).
    pub fn open_with(config: EngineConfig, driver: Arc<dyn Driver>) -> Result<Engine, EngineError> {
        for dir in [
            config.data_dir.clone(),
            config.data_dir.join("allocs"),
            run_dir(&config.data_dir),
        ] {
            std::fs::create_dir_all(&dir).map_err(|source| EngineError::Io {
                what: "creating",
                path: dir,
                source,
            })?;
        }
        let db_path = config.data_dir.join("state.db");
        let state = Arc::new(StateDb::open(&db_path)?);
        // Whoever reaches an executor's socket can stop or kill its task, and
        // the agent's control socket restart any; the state database holds
        // every job's environment: root only.
        for (path, mode) in [(run_dir(&config.data_dir), 0o700), (db_path, 0o600)] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(
                |source| EngineError::Io {
                    what: "restricting",
                    path,
                    source,
                },
            )?;
        }
        let defaults = Arc::new(SpecDefaults {
            chroot_env: config.chroot_env.clone(),
            default_user: config.default_user.clone(),
            pids_max: config.pids_max,
        });
        let hooks = Arc::new(HookSet::standard(&config.default_user));
        Ok(Engine {
            config,
            state,
            hooks,
            driver,
            defaults,
        })
    }

    pub fn state(&self) -> &StateDb {
        &self.state
    }

    /// Places the first group of `job` (or the named one) as a new allocation
    /// and starts running it.
    pub fn submit(&self, job: &Job, group: Option<&str>) -> Result<AllocHandle, EngineError> {
        let group = match group {
            Some(name) => job.groups.iter().find(|g| g.name == name),
            None => job.groups.first(),
        }
        .ok_or_else(|| EngineError::NoSuchGroup {
            job: job.name.clone(),
            group: group.unwrap_or("").to_string(),
        })?;
        let alloc_id = new_alloc_id()?;
        let record = AllocRecord {
            alloc_dir: self.config.data_dir.join("allocs").join(&alloc_id),
            alloc_id,
            job: job.clone(),
            group: group.name.clone(),
            desired: DesiredStatus::Run,
            client: ClientStatus::Pending,
        };
        AllocDir::new(record.alloc_dir.clone()).build_shared()?;
        self.state.put_alloc(&record)?;
        Ok(self.spawn(record, Vec::new()))
    }

    /// Restores every allocation a previous agent left unfinished: running
    /// tasks are re-attached to their executors, never started again. An alloc
    /// whose records cannot be read is skipped, with why, and the others
    /// restored: one corrupt record must not strand every other alloc.
    /// Only a database that cannot be read at all is an error.
    pub fn restore(&self) -> Result<Restored, EngineError> {
        let mut restored = Restored::default();
        for (key, record) in self.state.alloc_entries()? {
            let readable = record.and_then(|r| Ok((self.state.tasks(&r.alloc_id)?, r)));
            match readable {
                Ok((_, record)) if record.client.is_terminal() => {}
                Ok((tasks, record)) => restored.allocs.push(self.spawn(record, tasks)),
                Err(error) => restored.skipped.push(SkippedAlloc { key, error }),
            }
        }
        Ok(restored)
    }

    fn spawn(&self, record: AllocRecord, tasks: Vec<crate::state::TaskRecord>) -> AllocHandle {
        let alloc_id = record.alloc_id.clone();
        let alloc_dir = AllocDir::new(record.alloc_dir.clone());
        let (hooks, driver, state, defaults, clock) = (
            self.hooks.clone(),
            self.driver.clone(),
            self.state.clone(),
            self.defaults.clone(),
            self.config.clock.clone(),
        );
        let run_dir = run_dir(&self.config.data_dir);
        let (job_type, restart_seed) = (record.job.job_type, self.config.restart_seed);
        alloc_runner::spawn(record, tasks, self.state.clone(), move |gate, events| {
            TaskRunnerDeps {
                alloc_id: alloc_id.clone(),
                alloc_dir: alloc_dir.clone(),
                hooks: hooks.clone(),
                driver: driver.clone(),
                gate: gate.clone(),
                state: state.clone(),
                defaults: defaults.clone(),
                run_dir: run_dir.clone(),
                clock: clock.clone(),
                job_type,
                restart_seed,
                events,
            }
        })
    }
}

/// Where the executor sockets and the agent's control socket live: made
/// root only by [`Engine::open_with`].
pub(crate) fn run_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("run")
}

/// A random id in UUID form (hex and dashes, never a '.', which the oracle
/// relies on to split cgroup names).
fn new_alloc_id() -> Result<String, EngineError> {
    let mut bytes = [0u8; 16];
    let path = PathBuf::from("/dev/urandom");
    std::fs::File::open(&path)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|source| EngineError::Io {
            what: "reading",
            path,
            source,
        })?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;

    #[test]
    fn the_socket_dir_and_the_state_database_are_for_root_only() {
        let home = tempfile::tempdir().unwrap();
        let config = EngineConfig {
            data_dir: home.path().join("data"),
            executor_bin: PathBuf::from("/nonexistent/taskgate-executor"),
            chroot_env: BTreeMap::new(),
            default_user: "nobody".into(),
            pids_max: 8,
            clock: Arc::new(SystemClock::default()),
            restart_seed: 0,
        };
        let engine = Engine::open(config.clone()).unwrap();
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(run_dir(&config.data_dir)), 0o700);
        assert_eq!(mode(config.data_dir.join("state.db")), 0o600);
        drop(engine);
    }
}
