//! The engine: configuration, the state database, and the entry points to
//! run a new allocation or restore the ones a previous agent left running.

use crate::alloc::{ClientStatus, DesiredStatus};
use crate::alloc_dir::AllocDir;
use crate::alloc_runner::{self, AllocHandle};
use crate::clock::Clock;
use crate::clock::SystemClock;
use crate::data_dir::DataDir;
use crate::driver::{Driver, ExecDriver};
use crate::fake_driver::FakeDriver;
use crate::hooks::HookSet;
use crate::job::Job;
use crate::state::{AllocRecord, StateDb, StateError};
use crate::task_runner::{SpecDefaults, TaskRunnerDeps};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use taskgate_executor::{
    CgroupParent, CgroupTree, ExecutorConfig, ExecutorError, ExecutorFaults, Released,
};
use taskgate_faults::Faults;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: DataDir,
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
    /// The cgroup subtree this engine's tasks and executors live in
    /// (claimed by [`Engine::open`]); one per data dir while tasks live.
    pub cgroup_parent: CgroupParent,
    /// The fault points of the executors it launches (the harness's).
    pub executor_faults: ExecutorFaults,
    /// The run's fault points, which this engine (and its driver, in this
    /// process) reaches: each run of a harness passes its own. Empty in a
    /// build without fault points.
    pub faults: Faults,
    /// Finished allocations kept, records and alloc dirs (with their
    /// logs): beyond them, the longest finished go ([`Engine::collect_finished`]).
    pub keep_finished: usize,
}

/// Finished allocations an engine keeps unless told otherwise, as Nomad's
/// client keeps 50 terminal allocations before it collects any.
pub const DEFAULT_KEEP_FINISHED: usize = 50;

impl EngineConfig {
    /// An engine's configuration for the fake driver, in `data_dir`: no
    /// executor binary (the fake runs none), no chroot, tasks as `nobody`,
    /// 8 processes a task, the system clock, restart seed 0, the fake's
    /// cgroup parent (it claims none) and a fault registry of its own.
    /// Change what a test needs with
    /// `EngineConfig { default_user, ..EngineConfig::for_fake(data_dir) }`.
    pub fn for_fake(data_dir: DataDir) -> EngineConfig {
        EngineConfig {
            data_dir,
            executor_bin: PathBuf::from("/nonexistent/taskgate-executor"),
            chroot_env: BTreeMap::new(),
            default_user: "nobody".into(),
            pids_max: 8,
            keep_finished: DEFAULT_KEEP_FINISHED,
            clock: Arc::new(SystemClock::default()),
            restart_seed: 0,
            cgroup_parent: FakeDriver::cgroup_parent(),
            executor_faults: ExecutorFaults::default(),
            faults: Faults::default(),
        }
    }

    /// The fake driver for an engine with this configuration: its
    /// executors answer in the config's data dir and reach the config's
    /// fault points (see [`FakeDriver::new`]).
    pub fn fake_driver(&self) -> FakeDriver {
        FakeDriver::new(self.data_dir.run(), self.faults.clone())
    }
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
    #[error(transparent)]
    NoSuchGroup(#[from] crate::job::NoSuchGroup),
    /// Tasks named so that they could not have dirs of their own (see
    /// [`crate::job::Group::task_problems`]).
    #[error("group {group:?}: {}", .problems.join("; "))]
    UnusableTasks {
        group: String,
        problems: Vec<String>,
    },
    /// Tasks whose user (their own, or the agent's default) the host lacks:
    /// none of them could ever start.
    #[error("{}", .0.join("; "))]
    UnknownUsers(Vec<String>),
    /// A task no executor could serve (its socket path too long for this
    /// data dir): it would fail every launch.
    #[error("task {task:?}: {source}")]
    Unlaunchable { task: String, source: ExecutorError },
    #[error(transparent)]
    Cgroup(#[from] ExecutorError),
    #[error(
        "the tasks of {live} unfinished allocation(s) of this data dir live under cgroup parent \
         {recorded}, not {given}: start the agent with --cgroup-parent {recorded}, or stop them first"
    )]
    CgroupParentChanged {
        recorded: String,
        given: CgroupParent,
        live: usize,
    },
    #[error("{path}: {why}; a data dir must be its user's own, and reached only through dirs and links of root's or that user's that no one else can write (chown it, chmod go-w)")]
    SharedDataDir { path: PathBuf, why: String },
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

/// A runtime for the engine. Fault points may park a worker thread
/// (through `block_in_place`), so it keeps more workers than the two cores.
pub fn engine_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .enable_all()
        .build()
}

pub struct Engine {
    config: EngineConfig,
    state: Arc<StateDb>,
    hooks: Arc<HookSet>,
    driver: Arc<dyn Driver>,
    defaults: Arc<SpecDefaults>,
    /// The claimed cgroup subtree (real driver only), given back when the
    /// engine is dropped or [`Engine::give_back_cgroups`] is called.
    cgroups: Option<CgroupTree>,
}

impl Engine {
    /// Opens the engine with the real driver: an executor process per task,
    /// in the cgroup parent it claims (and gives back once no task lives
    /// there: see [`Engine::give_back_cgroups`]).
    pub fn open(config: EngineConfig) -> Result<Engine, EngineError> {
        let state = open_state(&config)?;
        record_cgroup_parent(&config, &state)?;
        let tree = CgroupTree::claim(&config.cgroup_parent)?;
        let driver = Arc::new(ExecDriver::new(ExecutorConfig {
            executor_bin: config.executor_bin.clone(),
            run_dir: config.data_dir.run(),
            cgroup_parent: config.cgroup_parent.clone(),
            faults: config.executor_faults.clone(),
            launcher_faults: config.faults.clone(),
        }));
        Ok(Engine::assemble(config, state, driver, Some(tree)))
    }

    /// Opens the engine with `driver` (the fake one in tests).
    /// Opens an engine with `config` on `driver`, the fake. The fake's world
    /// outlives the engine: open another on the same driver to restore
    /// what it left.
    pub fn open_on_fake(config: EngineConfig, driver: &FakeDriver) -> Result<Engine, EngineError> {
        Engine::open_with(config, Arc::new(driver.clone()))
    }

    pub fn open_with(config: EngineConfig, driver: Arc<dyn Driver>) -> Result<Engine, EngineError> {
        let state = open_state(&config)?;
        Ok(Engine::assemble(config, state, driver, None))
    }

    /// [`Engine::open_on_fake`] with its state in memory: for a run that
    /// restores nothing and does not explore the database's own crashes
    /// (the fake driver's wide search), where the disk's syncs were most
    /// of a run's cost.
    pub fn open_on_fake_in_memory(
        config: EngineConfig,
        driver: &FakeDriver,
    ) -> Result<Engine, EngineError> {
        create_layout(&config)?;
        let state = Arc::new(StateDb::in_memory());
        Ok(Engine::assemble(
            config,
            state,
            Arc::new(driver.clone()),
            None,
        ))
    }

    /// Gives back the cgroup subtree (what taskgate made or changed in it)
    /// if no executor or task lives there; keeps it for the next agent if
    /// one does. Call once nothing launches any more (the agent's runtime is
    /// shut down); dropping the engine does it too.
    pub fn give_back_cgroups(&self) {
        let Some(tree) = &self.cgroups else {
            return;
        };
        let parent = tree.parent();
        match tree.release() {
            Ok(Released::Undone) => tracing::debug!(%parent, "cgroup parent given back"),
            Ok(Released::InUse) => {
                tracing::info!(%parent, "tasks live on in the cgroup parent: kept for the next agent")
            }
            Ok(Released::Shared) => {
                tracing::info!(%parent, "another agent claims the cgroup parent: kept for it")
            }
            Err(err) => tracing::warn!(%parent, error = %err, "giving back the cgroup parent"),
        }
    }

    fn assemble(
        config: EngineConfig,
        state: Arc<StateDb>,
        driver: Arc<dyn Driver>,
        cgroups: Option<CgroupTree>,
    ) -> Engine {
        let defaults = Arc::new(SpecDefaults {
            chroot_env: config.chroot_env.clone(),
            default_user: config.default_user.clone(),
            pids_max: config.pids_max,
        });
        let hooks = Arc::new(HookSet::standard(&config.default_user));
        Engine {
            config,
            state,
            hooks,
            driver,
            defaults,
            cgroups,
        }
    }

    pub fn state(&self) -> &StateDb {
        &self.state
    }

    pub(crate) fn faults(&self) -> &Faults {
        &self.config.faults
    }

    /// Places the first group of `job` (or the named one) as a new allocation
    /// and starts running it.
    pub fn submit(&self, job: &Job, group: Option<&str>) -> Result<AllocHandle, EngineError> {
        let group = job.group(group)?;
        let problems = group.task_problems();
        if !problems.is_empty() {
            return Err(EngineError::UnusableTasks {
                group: group.name.clone(),
                problems,
            });
        }
        let unknown = crate::job::unknown_users(group, &self.config.default_user);
        if !unknown.is_empty() {
            return Err(EngineError::UnknownUsers(unknown));
        }
        let alloc_id = new_alloc_id()?;
        for task in &group.tasks {
            (self.driver.check_placeable(&alloc_id, &task.name)).map_err(|source| {
                EngineError::Unlaunchable {
                    task: task.name.clone(),
                    source,
                }
            })?;
        }
        let record = AllocRecord {
            alloc_dir: self.config.data_dir.alloc(&alloc_id),
            alloc_id,
            job: job.clone(),
            group: group.name.clone(),
            desired: DesiredStatus::Run,
            client: ClientStatus::Pending,
            finished_at_ms: None,
            stop_sent: false,
        };
        AllocDir::new(record.alloc_dir.clone()).build_shared()?;
        self.state.put_alloc(&record)?;
        Ok(self.spawn(record, Vec::new()))
    }

    /// Removes the finished allocations beyond the newest
    /// [`EngineConfig::keep_finished`]: each one's alloc dir (its tasks'
    /// dirs and logs), then its records. Never touched: the allocations in
    /// `spare` (the ones an agent runs, or is finishing), running ones,
    /// records that cannot be read, and a record whose id is not an alloc
    /// id or not its key (only such an id names a dir under the data dir's
    /// `allocs`). One an older agent finished (no finish time) is dated by
    /// its tasks' last event. A removal that fails is logged and the rest go
    /// on; the next collection tries it again. Returns the removed ids.
    pub fn collect_finished(&self, spare: &[&str]) -> Result<Vec<String>, EngineError> {
        let mut finished: Vec<(u64, String)> = Vec::new();
        for (key, record) in self.state.alloc_entries()? {
            let Ok(record) = record else { continue };
            if !record.client.is_terminal()
                || record.alloc_id != key
                || !is_alloc_id(&key)
                || spare.contains(&key.as_str())
            {
                continue;
            }
            let at = match record.finished_at_ms {
                Some(at) => at,
                None => (self.state.tasks(&key).unwrap_or_default().iter())
                    .flat_map(|task| task.events.iter().map(|e| e.time_ms))
                    .max()
                    .unwrap_or(0),
            };
            finished.push((at, key));
        }
        // Newest first.
        finished.sort_by(|a, b| b.cmp(a));
        let mut removed = Vec::new();
        for (_, alloc_id) in finished.into_iter().skip(self.config.keep_finished) {
            let dir = self.config.data_dir.alloc(&alloc_id);
            let gone = match taskgate_executor::confined::remove_tree(&dir) {
                Err(e) => Err(e.to_string()),
                Ok(()) => self
                    .state
                    .remove_alloc(&alloc_id)
                    .map_err(|e| e.to_string()),
            };
            match gone {
                Ok(()) => removed.push(alloc_id),
                Err(error) => {
                    tracing::warn!(alloc = %alloc_id, %error, "removing a finished allocation")
                }
            }
        }
        Ok(removed)
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
        let run_dir = self.config.data_dir.run();
        let (job_type, restart_seed) = (record.job.job_type, self.config.restart_seed);
        let faults = self.config.faults.clone();
        let deps = alloc_runner::AllocDeps {
            state: self.state.clone(),
            faults: faults.clone(),
        };
        alloc_runner::spawn(record, tasks, deps, move |gate, events| TaskRunnerDeps {
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
            faults: faults.clone(),
        })
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.give_back_cgroups();
    }
}

/// Creates the data dir's layout and opens its state database, both root's only.
fn open_state(config: &EngineConfig) -> Result<Arc<StateDb>, EngineError> {
    create_layout(config)?;
    let db_path = config.data_dir.state_db();
    let state = Arc::new(StateDb::open(&db_path)?);
    // Whoever reaches an executor's socket can stop or kill its task, and
    // the agent's control socket restart any; the state database holds
    // every job's environment; a root task can leave device nodes and
    // set-uid files in its alloc dir, on the host's disk: root only.
    let restricted = [
        (config.data_dir.run(), 0o700),
        (config.data_dir.allocs(), 0o700),
        (db_path, 0o600),
    ];
    for (path, mode) in restricted {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(
            |source| EngineError::Io {
                what: "restricting",
                path,
                source,
            },
        )?;
    }
    Ok(state)
}

/// The data dir and the dirs the engine's allocs and executors live in,
/// each the engine's own: whoever else could write one could swap the run
/// dir, reach the control socket and place jobs that run as root.
fn create_layout(config: &EngineConfig) -> Result<(), EngineError> {
    // Nothing is made through a way another user could change.
    check_way_to(config.data_dir.path(), nix::unistd::geteuid().as_raw())?;
    for dir in layout_dirs(&config.data_dir) {
        // At most 0755 whatever the umask: a dir it makes is its own.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .map_err(|source| EngineError::Io {
                what: "creating",
                path: dir.clone(),
                source,
            })?;
    }
    // Walked again once made: a name missing at the first walk (in a sticky
    // dir, say) may have been made by another user before this one.
    check_own_data_dir(&config.data_dir)
}

/// The data dir and the dirs the engine keeps in it.
fn layout_dirs(data_dir: &DataDir) -> [PathBuf; 3] {
    [
        data_dir.path().to_path_buf(),
        data_dir.allocs(),
        data_dir.run(),
    ]
}

/// Refuses a data dir, or a dir the engine keeps in it, that another user
/// owns or can write, or a way to it another user could change: its owner
/// could swap what is read and run there as root. The agent checks before
/// it makes anything there; a command that reads a data dir with no agent
/// serving it (`status`, `logs`) checks first too. A dir not made yet holds
/// nothing to read.
pub fn check_own_data_dir(data_dir: &DataDir) -> Result<(), EngineError> {
    let me = nix::unistd::geteuid().as_raw();
    check_way_to(data_dir.path(), me)?;
    for dir in layout_dirs(data_dir) {
        let meta = match std::fs::metadata(&dir) {
            Ok(meta) => meta,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(reading(dir, source)),
        };
        if let Some(why) = not_own(meta.uid(), meta.mode(), me) {
            return Err(EngineError::SharedDataDir { path: dir, why });
        }
    }
    Ok(())
}

/// Refuses a way to `path` another user could change: a link on it that
/// is not root's or this user's, or a dir above it that another user owns
/// or can write (unless sticky, as `/tmp` is: there only an entry's owner
/// may move it). Both the way as given, links and all, and the one it
/// leads to are checked, as far as they exist.
fn check_way_to(path: &Path, me: u32) -> Result<(), EngineError> {
    let given = std::path::absolute(path).map_err(|e| reading(path.to_path_buf(), e))?;
    let real = resolved(&given).map_err(|e| reading(given.clone(), e))?;
    // With no link on it, the way as given is the way it leads: walked once.
    let real = real.filter(|real| *real != given);
    for way in [Some(given), real].into_iter().flatten() {
        let mut steps: Vec<&Path> = way.ancestors().collect();
        steps.reverse();
        for step in steps {
            let meta = match std::fs::symlink_metadata(step) {
                Ok(meta) => meta,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => break,
                Err(err) => return Err(reading(step.to_path_buf(), err)),
            };
            let why = if meta.file_type().is_symlink() {
                not_trusted_link(meta.uid(), me)
            } else if step != way {
                not_safe_above(meta.uid(), meta.mode(), me)
            } else {
                None
            };
            if let Some(why) = why {
                let path = step.to_path_buf();
                return Err(EngineError::SharedDataDir { path, why });
            }
        }
    }
    Ok(())
}

/// Where `path` leads: its deepest existing ancestor resolved, links and
/// all, and the names not made yet after it, a dangling link followed to
/// where it would make them; `None` if a name not made yet cannot be
/// followed (`..`), or links chain past the kernel's own limit.
fn resolved(path: &Path) -> std::io::Result<Option<PathBuf>> {
    // The kernel follows at most 40 links in one lookup.
    const MAX_LINKS: usize = 40;
    let mut missing = Vec::new();
    let mut at = path.to_path_buf();
    let mut links = 0;
    loop {
        match std::fs::canonicalize(&at) {
            Ok(real) => return Ok(Some(missing.iter().rev().fold(real, |p, n| p.join(n)))),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                if let Ok(target) = std::fs::read_link(&at) {
                    links += 1;
                    if links > MAX_LINKS {
                        return Ok(None);
                    }
                    at = at.parent().map_or(target.clone(), |p| p.join(&target));
                    continue;
                }
                let (Some(parent), Some(name)) = (at.parent(), at.file_name()) else {
                    return Ok(None);
                };
                missing.push(name.to_os_string());
                at = parent.to_path_buf();
            }
            Err(err) => return Err(err),
        }
    }
}

fn reading(path: PathBuf, source: std::io::Error) -> EngineError {
    EngineError::Io {
        what: "reading",
        path,
        source,
    }
}

/// Why a link of owner `uid` on the way to a data dir is not trusted.
fn not_trusted_link(uid: u32, me: u32) -> Option<String> {
    (uid != 0 && uid != me)
        .then(|| format!("it is a link uid {uid} owns, who could point it elsewhere"))
}

/// Why a dir of owner `uid` and `mode` above a data dir is not safe: who
/// else could put another dir in the data dir's place.
fn not_safe_above(uid: u32, mode: u32, me: u32) -> Option<String> {
    if uid != 0 && uid != me {
        return Some(format!(
            "it belongs to uid {uid}, who could put another dir in the data dir's place"
        ));
    }
    (mode & 0o022 != 0 && mode & 0o1000 == 0).then(|| {
        format!(
            "it is writable by others (mode {:o}), who could put another dir in the data dir's place",
            mode & 0o7777
        )
    })
}

/// Why a dir of owner `uid` and `mode` is not only `me`'s, if it is not.
fn not_own(uid: u32, mode: u32, me: u32) -> Option<String> {
    if uid != me {
        return Some(format!(
            "it belongs to uid {uid}, not to this process's user ({me})"
        ));
    }
    (mode & 0o022 != 0).then(|| format!("it is writable by others (mode {:o})", mode & 0o7777))
}

/// The cgroup parent the last engine of `data_dir` used, if any: where the
/// tasks it left for the next agent live.
pub fn recorded_cgroup_parent(data_dir: &DataDir) -> Option<CgroupParent> {
    let text = std::fs::read_to_string(data_dir.cgroup_parent_file()).ok()?;
    CgroupParent::new(text.trim()).ok()
}

/// Refuses a parent other than the one the data dir's unfinished allocs
/// live under (a restore would not find their task cgroups, and could start
/// an attempt beside a task it lost), then records the parent. One that is
/// gone (a reboot removes every cgroup) holds no task: it refuses nothing.
fn record_cgroup_parent(config: &EngineConfig, state: &StateDb) -> Result<(), EngineError> {
    let file = config.data_dir.cgroup_parent_file();
    let given = &config.cgroup_parent;
    if let Ok(recorded) = std::fs::read_to_string(&file) {
        let recorded = recorded.trim();
        let still_there = CgroupParent::new(recorded).map_or(true, |p| p.exists());
        if recorded != given.as_str() && still_there {
            let live = (state.alloc_entries()?.iter())
                .filter(|(_, r)| r.as_ref().map_or(true, |r| !r.client.is_terminal()))
                .count();
            if live > 0 {
                return Err(EngineError::CgroupParentChanged {
                    recorded: recorded.to_string(),
                    given: given.clone(),
                    live,
                });
            }
        }
    }
    std::fs::write(&file, format!("{given}\n")).map_err(|source| EngineError::Io {
        what: "writing",
        path: file,
        source,
    })
}

/// The length of every alloc id (a UUID's form): the room a path named
/// after one needs.
pub const ALLOC_ID_LEN: usize = 36;

/// Whether `id` has the form [`new_alloc_id`] gives (and so names a dir
/// of its own under the data dir's `allocs`).
fn is_alloc_id(id: &str) -> bool {
    id.len() == ALLOC_ID_LEN && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// A random id in UUID form (hex and dashes, never a '.', which the oracle
/// relies on to split cgroup names), [`ALLOC_ID_LEN`] long.
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

    /// Paths built from an alloc id (a lab's socket check) count on its length.
    #[test]
    fn every_alloc_id_has_the_declared_length() {
        for _ in 0..32 {
            let id = new_alloc_id().unwrap();
            assert_eq!(id.len(), ALLOC_ID_LEN, "{id}");
            assert!(!id.contains('.'), "{id}");
            assert!(is_alloc_id(&id), "{id}");
        }
    }

    /// Only an alloc id's form names a dir of its own under `allocs`: a
    /// collection never removes what a record naming anything else points at.
    #[test]
    fn a_collection_takes_only_alloc_ids() {
        let padded = |s: &str| format!("{s:-<width$}", width = ALLOC_ID_LEN);
        for bad in [
            "",
            ".",
            "..",
            "/etc",
            &padded("../"),
            &padded("/"),
            &padded("a."),
        ] {
            assert!(!is_alloc_id(bad), "{bad:?}");
        }
    }

    /// Whoever can write the data dir can swap its run dir, and reach the
    /// control socket: the engine refuses one others can write.
    #[test]
    fn a_data_dir_others_can_write_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let data = home.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = refusal_of(DataDir::new(&data));
        assert!(
            refused.contains("writable"),
            "a data dir of mode 0777 was opened: {refused:?}"
        );
    }

    /// Why an engine of `data_dir` was refused ("" if it opened).
    fn refusal_of(data_dir: DataDir) -> String {
        let config = EngineConfig::for_fake(data_dir);
        let opened = Engine::open_on_fake(config.clone(), &config.fake_driver());
        opened.err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[rstest::rstest]
    #[case::its_own(0, 0o40755, None)]
    #[case::its_own_and_closed(0, 0o40700, None)]
    #[case::another_users(1000, 0o40700, Some("belongs to uid 1000"))]
    #[case::group_writable(0, 0o40775, Some("writable by others (mode 775)"))]
    #[case::world_writable_and_sticky(0, 0o41777, Some("writable by others (mode 1777)"))]
    fn only_a_dir_of_the_agents_own_is_its_data_dir(
        #[case] uid: u32,
        #[case] mode: u32,
        #[case] refused: Option<&str>,
    ) {
        let why = not_own(uid, mode, 0);
        match refused {
            None => assert_eq!(why, None),
            Some(part) => assert!(why.as_ref().is_some_and(|w| w.contains(part)), "{why:?}"),
        }
    }

    #[rstest::rstest]
    #[case::roots(0, 0o40755, None)]
    #[case::its_users(1000, 0o40700, None)]
    #[case::sticky_and_open_to_all(0, 0o41777, None)]
    #[case::another_users(65534, 0o40755, Some("belongs to uid 65534"))]
    #[case::open_to_all(0, 0o40777, Some("writable by others (mode 777)"))]
    #[case::open_to_its_group(0, 0o40775, Some("writable by others (mode 775)"))]
    fn only_root_or_its_user_may_change_the_dirs_above_a_data_dir(
        #[case] uid: u32,
        #[case] mode: u32,
        #[case] refused: Option<&str>,
    ) {
        let why = not_safe_above(uid, mode, 1000);
        match refused {
            None => assert_eq!(why, None),
            Some(part) => assert!(why.as_ref().is_some_and(|w| w.contains(part)), "{why:?}"),
        }
        let link = not_trusted_link(uid, 1000);
        assert_eq!(link.is_some(), uid != 0 && uid != 1000, "{link:?}");
    }

    /// A data dir behind a group-writable dir (the test's own user owns
    /// both: no root needed) is refused, naming that dir, before anything
    /// is made in it.
    #[test]
    fn a_data_dir_under_a_dir_others_can_write_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let open = home.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o775)).unwrap();
        let refused = refusal_of(DataDir::new(open.join("data")));
        assert!(
            refused.starts_with(&format!("{}: it is writable by others", open.display())),
            "{refused:?}"
        );
        assert!(
            !open.join("data").exists(),
            "made in a dir others can write"
        );
        // Through a link of its own to that dir, to a data dir not made yet.
        let link = home.path().join("link");
        std::os::unix::fs::symlink(&open, &link).unwrap();
        let refused = refusal_of(DataDir::new(link.join("data")));
        assert!(refused.contains("writable by others"), "{refused:?}");
        assert!(!open.join("data").exists(), "made through the link");
        // Through a link of its own that dangles, to where it would make it.
        let dangling = home.path().join("dangling");
        std::os::unix::fs::symlink(open.join("data"), &dangling).unwrap();
        let refused = refusal_of(DataDir::new(&dangling));
        assert!(refused.contains("writable by others"), "{refused:?}");
        assert!(
            !open.join("data").exists(),
            "made through the dangling link"
        );
    }

    /// A job submitted as data (the control socket's `Submit`) skips the
    /// jobspec parser: a task named as the alloc's shared dir, or two of
    /// one name, would have their task dirs built in the shared dir, or in
    /// one dir for both. Refused before anything is made.
    #[test]
    fn a_submitted_job_with_unusable_task_names_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let config = EngineConfig::for_fake(DataDir::new(home.path().join("data")));
        let engine = Engine::open_on_fake(config.clone(), &config.fake_driver()).unwrap();
        let runtime = crate::engine_runtime().unwrap();
        let renamed = |names: [&str; 2]| {
            let mut job = crate::job::builtin_default();
            for (task, name) in job.groups[0].tasks.iter_mut().zip(names) {
                task.name = name.to_string();
            }
            job
        };
        for names in [
            [taskgate_executor::SHARED_ALLOC_DIR, "sidecar"],
            ["web", "web"],
        ] {
            let job = renamed(names);
            let submitted = runtime.block_on(async { engine.submit(&job, None).map(drop) });
            let Err(EngineError::UnusableTasks { problems, .. }) = submitted else {
                panic!("tasks {names:?}: {submitted:?}");
            };
            assert_eq!(problems.len(), 1, "{problems:?}");
        }
        let allocs = std::fs::read_dir(config.data_dir.allocs()).unwrap().count();
        assert_eq!(allocs, 0, "nothing is made for a refused job");
    }

    /// A root task can make device nodes and set-uid files in its alloc
    /// dir, on the host's disk: only root may reach them.
    #[test]
    fn the_allocs_dir_is_for_root_only() {
        let home = tempfile::tempdir().unwrap();
        let config = EngineConfig::for_fake(DataDir::new(home.path().join("data")));
        let engine = Engine::open_on_fake(config.clone(), &config.fake_driver()).unwrap();
        let mode = std::fs::metadata(config.data_dir.allocs())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        drop(engine);
        assert_eq!(mode, 0o700, "allocs is {mode:o}");
    }

    #[test]
    fn the_socket_dir_and_the_state_database_are_for_root_only() {
        let home = tempfile::tempdir().unwrap();
        let config = EngineConfig::for_fake(DataDir::new(home.path().join("data")));
        let engine = Engine::open_on_fake(config.clone(), &config.fake_driver()).unwrap();
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(config.data_dir.run()), 0o700);
        assert_eq!(mode(config.data_dir.state_db()), 0o600);
        drop(engine);
    }
}
