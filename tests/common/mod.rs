//! Shared fixtures for the privileged integration tests: a throwaway alloc
//! layout with a busybox task root, and the zero-leftovers check.
#![allow(dead_code)] // each test binary uses its own subset

pub mod cli;
#[cfg(feature = "failpoints")]
pub mod scratch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use taskgate_engine::DataDir;
use taskgate_executor::{
    CgroupParent, CgroupTree, Executor, ExecutorConfig, ExecutorError, LogConfig, ReattachInfo,
    Resources, Rlimits, TaskSpec,
};

/// Opens the FIFO at `path` (a task waits on it) and writes `line` to it.
pub fn write_fifo(path: &Path, line: &str) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Panics (never skips) when not root: these tests create namespaces, mounts and cgroups.
pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root: run as root (see README)"
    );
}

/// A temp dir holding `run/`, `alloc/<task>/{local,secrets,tmp}`, `alloc/alloc/`
/// and `rootfs/` (busybox).
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub alloc_id: String,
    pub chroot_env: BTreeMap<PathBuf, PathBuf>,
    /// The sandbox's own cgroup parent, claimed as an agent claims its own.
    pub cgroups: CgroupTree,
    /// Executors this sandbox started, shut down on drop should a test fail midway.
    launched: std::sync::Mutex<Vec<ReattachInfo>>,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        require_root();
        // Short prefix: the socket path must fit in sun_path.
        let dir = tempfile::Builder::new()
            .prefix("tg")
            .tempdir_in("/tmp")
            .expect("temp dir");
        let alloc_id = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_start_matches('.')
            .to_string();
        let chroot_env = taskgate_executor::build_busybox_root(&dir.path().join("rootfs"))
            .expect("busybox root");
        std::fs::create_dir_all(dir.path().join("alloc/alloc")).unwrap();
        let cgroups =
            CgroupTree::claim(&test_cgroup_parent(&alloc_id)).expect("claim a cgroup parent");
        Sandbox {
            dir,
            alloc_id,
            chroot_env,
            cgroups,
            launched: Default::default(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn run_dir(&self) -> PathBuf {
        self.path().join("run")
    }

    pub fn launch(&self, spec: &TaskSpec) -> Result<Executor, ExecutorError> {
        self.launch_with(&self.config(), spec)
    }

    /// [`Sandbox::launch`] with a config of the test's own making.
    pub fn launch_with(
        &self,
        config: &ExecutorConfig,
        spec: &TaskSpec,
    ) -> Result<Executor, ExecutorError> {
        let exec = taskgate_executor::launch(config, spec)?;
        (self.launched.lock().unwrap_or_else(|p| p.into_inner())).push(exec.reattach_info());
        Ok(exec)
    }

    pub fn config(&self) -> ExecutorConfig {
        ExecutorConfig {
            executor_bin: env!("CARGO_BIN_EXE_taskgate-executor").into(),
            run_dir: self.run_dir(),
            cgroup_parent: self.cgroups.parent().clone(),
            faults: Default::default(),
            launcher_faults: Default::default(),
        }
    }

    pub fn task_dir(&self, task: &str) -> PathBuf {
        self.path().join("alloc").join(task)
    }

    /// A FIFO in the task's `local/` (seen as `/local/<name>` inside) through
    /// which a task tells the test it reached a point, or waits for the test.
    pub fn fifo(&self, task: &str, name: &str) -> PathBuf {
        let path = self.task_dir(task).join("local").join(name);
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o666);
        nix::unistd::mkfifo(&path, mode).expect("mkfifo");
        path
    }

    pub fn shared_alloc_dir(&self) -> PathBuf {
        self.path().join("alloc/alloc")
    }

    /// A spec for `sh -c script` as root, with the task dir laid out.
    pub fn spec(&self, task: &str, script: &str) -> TaskSpec {
        let task_dir = self.task_dir(task);
        for sub in taskgate_executor::TASK_SUBDIRS {
            std::fs::create_dir_all(task_dir.join(sub)).unwrap();
        }
        TaskSpec {
            alloc_id: self.alloc_id.clone(),
            task_name: task.to_string(),
            task_dir,
            shared_alloc_dir: self.shared_alloc_dir(),
            chroot_env: self.chroot_env.clone(),
            command: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            env: BTreeMap::new(),
            user: "root".into(),
            resources: Resources {
                cpu_shares: 100,
                memory_mb: 64,
                pids_max: 64,
            },
            network_isolation: true,
            logs: LogConfig {
                max_files: 3,
                max_file_size_bytes: 1 << 20,
            },
            kill_signal: taskgate_executor::KillSignal::SIGTERM,
            kill_timeout: Duration::from_secs(5),
            rlimits: Rlimits::default(),
            oom_score_adj: taskgate_executor::DEFAULT_OOM_SCORE_ADJ,
        }
    }

    /// `<shared alloc dir>/logs/<task>.<stream>.<index>`.
    pub fn log(&self, task: &str, stream: &str, index: u32) -> PathBuf {
        self.shared_alloc_dir()
            .join("logs")
            .join(format!("{task}.{stream}.{index}"))
    }

    pub fn read_log(&self, task: &str, stream: &str) -> String {
        std::fs::read_to_string(self.log(task, stream, 0)).unwrap_or_default()
    }

    /// Asserts the executors of this sandbox left nothing behind: no cgroup
    /// (the parent given back, too), no mount mentioning the temp dir, no
    /// process, no file in the run dir.
    pub fn assert_no_leftovers(&self) {
        assert_eq!(
            self.cgroups.release().expect("give back the cgroup parent"),
            taskgate_executor::Released::Undone,
            "something still lives under {}",
            self.cgroups.parent()
        );
        assert_parent_gone(self.cgroups.parent());
        let cgroups = taskgate_cgroups(
            Path::new("/sys/fs/cgroup"),
            &format!("taskgate.{}.", self.alloc_id),
        );
        assert!(cgroups.is_empty(), "leftover cgroups: {cgroups:?}");
        let root = self.path().to_string_lossy().to_string();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mounts: Vec<&str> = mountinfo.lines().filter(|l| l.contains(&root)).collect();
        assert!(mounts.is_empty(), "leftover mounts: {mounts:?}");
        let procs = processes_mentioning(&[&root, &format!("taskgate.{}.", self.alloc_id)]);
        assert!(procs.is_empty(), "leftover processes: {procs:?}");
        let files: Vec<PathBuf> = match std::fs::read_dir(self.run_dir()) {
            Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
            Err(_) => vec![],
        };
        assert!(files.is_empty(), "leftover files in the run dir: {files:?}");
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let launched = std::mem::take(self.launched.get_mut().unwrap_or_else(|p| p.into_inner()));
        for info in launched {
            // Already gone after a passing test; after a failing one, leave nothing running.
            if let Ok(exec) = Executor::reattach(&info) {
                let _ = exec.shutdown();
            }
        }
        let _ = self.cgroups.release();
    }
}

/// A test's own cgroup parent, never a real agent's nor another test's.
pub fn test_cgroup_parent(unique: &str) -> CgroupParent {
    CgroupParent::new(&format!("/taskgate-test-{unique}")).expect("a valid cgroup path")
}

/// The parent's cgroup is gone from every hierarchy.
pub fn assert_parent_gone(parent: &CgroupParent) {
    let left: Vec<PathBuf> = cgroup_mounts()
        .into_iter()
        .map(|m| m.join(parent.as_str().trim_start_matches('/')))
        .filter(|d| d.exists())
        .collect();
    assert!(
        left.is_empty(),
        "cgroup parent {parent} left behind: {left:?}"
    );
}

/// Every cgroup hierarchy's mount point (v2's, or each v1 controller's).
pub fn cgroup_mounts() -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter(|l| l.contains(" - cgroup ") || l.contains(" - cgroup2 "))
        .filter_map(|l| l.split_whitespace().nth(4).map(PathBuf::from))
        .collect()
}

/// `/proc/<pid>/cgroup` as controller -> path (v2's unified entry under "").
pub fn cgroups_of(pid: &str) -> std::collections::BTreeMap<String, PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let mut map = std::collections::BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        for c in ctrls.split(',') {
            map.insert(c.to_string(), PathBuf::from(path.trim_start_matches('/')));
        }
    }
    map
}
/// Cgroup directories named `<prefix>*` anywhere under `root`.
fn taskgate_cgroups(root: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut found = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name().to_string_lossy().starts_with(prefix) {
                found.push(e.path());
            }
            stack.push(e.path());
        }
    }
    found
}

/// Live processes whose command line, open fds or cgroups mention any of
/// `needles` (zombies have none of these).
fn processes_mentioning(needles: &[&str]) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = e.file_name().to_string_lossy().to_string();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let fds = std::fs::read_dir(e.path().join("fd"))
            .map(|d| {
                d.flatten()
                    .filter_map(|f| std::fs::read_link(f.path()).ok())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let cgroups = std::fs::read_to_string(e.path().join("cgroup")).unwrap_or_default();
        let mentions = |n: &&str| {
            cmdline.contains(n)
                || cgroups.contains(n)
                || fds.iter().any(|f| f.to_string_lossy().contains(n))
        };
        if needles.iter().any(mentions) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

// ---------------------------------------------------------------------------
// Engine fixtures (tests/engine.rs, tests/harness.rs).

/// A throwaway engine home: `<tmp>/rootfs` (busybox, the only thing tasks
/// see through `chroot_env`) and `<tmp>/data` (state db, allocs, run dir).
pub struct EngineHome {
    pub dir: tempfile::TempDir,
    pub chroot_env: BTreeMap<PathBuf, PathBuf>,
    /// The engine's own cgroup parent: each engine of this home claims it.
    pub cgroup_parent: CgroupParent,
}

impl EngineHome {
    pub fn new() -> EngineHome {
        require_root();
        // Short prefix in /tmp: executor socket paths must fit in sun_path.
        let dir = tempfile::Builder::new()
            .prefix("tge")
            .tempdir_in("/tmp")
            .expect("temp dir");
        let chroot_env = taskgate_executor::build_busybox_root(&dir.path().join("rootfs"))
            .expect("busybox root");
        let unique = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let cgroup_parent = test_cgroup_parent(unique.trim_start_matches('.'));
        EngineHome {
            dir,
            chroot_env,
            cgroup_parent,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn data_dir(&self) -> DataDir {
        DataDir::new(self.path().join("data"))
    }

    pub fn run_dir(&self) -> PathBuf {
        self.data_dir().run()
    }

    pub fn config(&self) -> taskgate_engine::EngineConfig {
        taskgate_engine::EngineConfig {
            data_dir: self.data_dir(),
            executor_bin: PathBuf::from(env!("CARGO_BIN_EXE_taskgate-executor")),
            chroot_env: self.chroot_env.clone(),
            default_user: "nobody".into(),
            pids_max: 64,
            keep_finished: taskgate_engine::DEFAULT_KEEP_FINISHED,
            clock: std::sync::Arc::new(taskgate_engine::clock::SystemClock::default()),
            restart_seed: 0,
            cgroup_parent: self.cgroup_parent.clone(),
            executor_faults: Default::default(),
            faults: Default::default(),
        }
    }

    pub fn open(&self) -> taskgate_engine::Engine {
        taskgate_engine::Engine::open(self.config()).expect("open engine")
    }

    /// An agent process's `--chroot-env HOST:TASK` arguments.
    pub fn chroot_args(&self) -> Vec<String> {
        self.chroot_env
            .iter()
            .flat_map(|(host, task)| {
                [
                    "--chroot-env".to_string(),
                    format!("{}:{}", host.display(), task.display()),
                ]
            })
            .collect()
    }

    /// An agent process's `--chroot-env` arguments and its `--cgroup-parent`:
    /// this home's.
    pub fn agent_args(&self) -> Vec<String> {
        let mut args = self.chroot_args();
        args.push("--cgroup-parent".into());
        args.push(self.cgroup_parent.as_str().into());
        args
    }

    /// Asserts the allocs `alloc_ids` left nothing behind (see
    /// [`assert_engine_left_nothing`]), then removes the temp dir, asserting
    /// that works too (a leaked mount would make it fail).
    pub fn finish(self, alloc_ids: &[String]) {
        assert_engine_left_nothing(&self.data_dir(), alloc_ids);
        assert_parent_gone(&self.cgroup_parent);
        let path = self.path().to_path_buf();
        self.dir
            .close()
            .unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
        assert!(!path.exists(), "temp dir {} still exists", path.display());
    }
}

/// The runtime engine tests run in: multi-thread, with workers to spare
/// because a parked fault point blocks its worker (`block_in_place`).
pub fn engine_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(6)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Nothing an engine with this data dir started is left: no task cgroup
/// (`taskgate.<alloc>.*`) of these allocs in any hierarchy, no mount and no
/// process (command line, open fd or cgroup) mentioning the data dir or an
/// alloc id, and no socket or spec file in `<data_dir>/run`.
pub fn assert_engine_left_nothing(data_dir: &DataDir, alloc_ids: &[String]) {
    let found = engine_leftovers(data_dir, alloc_ids);
    assert!(found.is_empty(), "leftovers: {found:#?}");
}

/// What [`assert_engine_left_nothing`] looks for, as a list.
pub fn engine_leftovers(data_dir: &DataDir, alloc_ids: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for id in alloc_ids {
        let cgroups = taskgate_cgroups(Path::new("/sys/fs/cgroup"), &format!("taskgate.{id}."));
        found.extend(cgroups.iter().map(|c| format!("cgroup {}", c.display())));
    }
    let root = data_dir.path().to_string_lossy().to_string();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    found.extend(
        mountinfo
            .lines()
            .filter(|l| l.contains(&root) || alloc_ids.iter().any(|id| l.contains(id.as_str())))
            .map(|l| format!("mount {l}")),
    );
    let mut needles: Vec<&str> = vec![&root];
    needles.extend(alloc_ids.iter().map(String::as_str));
    found.extend(
        processes_mentioning(&needles)
            .into_iter()
            .map(|p| format!("process {p}")),
    );
    let run_dir = data_dir.run();
    if let Ok(entries) = std::fs::read_dir(&run_dir) {
        found.extend(entries.map(|e| format!("file {}", e.unwrap().path().display())));
    }
    found
}

/// Every `taskgate.*` task cgroup on this host right now.
pub fn all_task_cgroups() -> std::collections::BTreeSet<PathBuf> {
    taskgate_cgroups(Path::new("/sys/fs/cgroup"), "taskgate.")
        .into_iter()
        .collect()
}

/// Every lab's own cgroup parent (`taskgate-lab-*`), in every hierarchy.
pub fn all_lab_cgroups() -> std::collections::BTreeSet<PathBuf> {
    taskgate_cgroups(Path::new("/sys/fs/cgroup"), "taskgate-lab-")
        .into_iter()
        .collect()
}

/// Live processes mentioning any of `needles` (public face of the check above).
pub fn live_processes_mentioning(needles: &[&str]) -> Vec<String> {
    processes_mentioning(needles)
}

// ---------------------------------------------------------------------------
// The rule: an agent owns one cgroup subtree and touches nothing outside it.

/// What an agent could change in a cgroup: whether it hands controllers to
/// its children, and its limits.
const CGROUP_SETTINGS: [&str; 10] = [
    "cgroup.subtree_control",
    "memory.max",
    "memory.swap.max",
    "memory.limit_in_bytes",
    "memory.memsw.limit_in_bytes",
    "pids.max",
    "cpu.weight",
    "cpu.max",
    "cpu.shares",
    "devices.list",
];

/// Every cgroup directory on this host, in every hierarchy, with the
/// settings above that it has.
pub type CgroupSnapshot = BTreeMap<PathBuf, BTreeMap<&'static str, String>>;

pub fn cgroup_snapshot() -> CgroupSnapshot {
    let mut snapshot = BTreeMap::new();
    let mut stack = cgroup_mounts();
    while let Some(dir) = stack.pop() {
        let settings = CGROUP_SETTINGS
            .iter()
            .filter_map(|s| Some((*s, std::fs::read_to_string(dir.join(s)).ok()?)))
            .collect();
        snapshot.insert(dir.clone(), settings);
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    snapshot
}

/// Between `before` and `after` (an agent's whole life, tasks and all):
/// no cgroup outside `parent` changed a setting, none was made outside it
/// that carries the parent's or an alloc's name, the cgroups this test
/// process sits in are still there, and nothing is left inside `parent`.
/// Other processes on the host may make and remove cgroups of their own
/// meanwhile; those are not the agent's.
pub fn assert_only_its_subtree_was_touched(
    before: &CgroupSnapshot,
    after: &CgroupSnapshot,
    parent: &CgroupParent,
    alloc_ids: &[String],
) {
    let inside = |dir: &Path| {
        dir.components()
            .any(|c| c.as_os_str() == parent.as_str().rsplit('/').next().unwrap())
    };
    let changed: Vec<&PathBuf> = before
        .iter()
        .filter(|(dir, settings)| {
            !inside(dir) && after.get(*dir).is_some_and(|now| now != *settings)
        })
        .map(|(dir, _)| dir)
        .collect();
    assert!(
        changed.is_empty(),
        "cgroups outside {parent} changed: {changed:?}"
    );
    let left_inside: Vec<&PathBuf> = after.keys().filter(|d| inside(d)).collect();
    assert!(
        left_inside.is_empty(),
        "cgroups left inside {parent}: {left_inside:?}"
    );
    let made_outside: Vec<&PathBuf> = after
        .keys()
        .filter(|d| !before.contains_key(*d))
        .filter(|d| {
            let name = d.to_string_lossy();
            alloc_ids.iter().any(|id| name.contains(id.as_str()))
        })
        .collect();
    assert!(
        made_outside.is_empty(),
        "cgroups made outside {parent}: {made_outside:?}"
    );
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    for line in own.lines() {
        let path = line.splitn(3, ':').nth(2).unwrap().trim_start_matches('/');
        let kept = cgroup_mounts().iter().any(|m| m.join(path).is_dir());
        assert!(kept, "this test's own cgroup {path} is gone");
    }
}

/// The processes of a task's cgroup, read from the kernel (the first
/// hierarchy that has it).
pub fn task_cgroup_procs(parent: &CgroupParent, alloc_id: &str, task: &str) -> Vec<i32> {
    let leaf = format!(
        "{}/{}",
        parent.as_str().trim_start_matches('/'),
        taskgate_executor::task_cgroup_name(alloc_id, task)
    );
    let procs = cgroup_mounts()
        .into_iter()
        .find_map(|m| std::fs::read_to_string(m.join(&leaf).join("cgroup.procs")).ok())
        .unwrap_or_else(|| panic!("no cgroup {leaf}"));
    let mut pids: Vec<i32> = procs
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    pids.sort_unstable();
    pids
}
