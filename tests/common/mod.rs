//! Shared fixtures for the privileged integration tests: a throwaway alloc
//! layout with a busybox task root, and the zero-leftovers check.
#![allow(dead_code)] // each test binary uses its own subset

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use taskgate_executor::{
    Executor, ExecutorConfig, ExecutorError, LogConfig, ReattachInfo, Resources, Rlimits, TaskSpec,
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
    /// Executors this sandbox started, shut down on drop should a test fail midway.
    launched: RefCell<Vec<ReattachInfo>>,
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
        Sandbox {
            dir,
            alloc_id,
            chroot_env,
            launched: RefCell::default(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn run_dir(&self) -> PathBuf {
        self.path().join("run")
    }

    pub fn launch(&self, spec: &TaskSpec) -> Result<Executor, ExecutorError> {
        let exec = taskgate_executor::launch(&self.config(), spec)?;
        self.launched.borrow_mut().push(exec.reattach_info());
        Ok(exec)
    }

    pub fn config(&self) -> ExecutorConfig {
        ExecutorConfig {
            executor_bin: env!("CARGO_BIN_EXE_taskgate-executor").into(),
            run_dir: self.run_dir(),
        }
    }

    pub fn task_dir(&self, task: &str) -> PathBuf {
        self.path().join("alloc").join(task)
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

    /// Asserts the executors of this sandbox left nothing behind: no cgroup,
    /// no mount mentioning the temp dir, no process, no file in the run dir.
    pub fn assert_no_leftovers(&self) {
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
        for info in self.launched.take() {
            // Already gone after a passing test; after a failing one, leave nothing running.
            if let Ok(exec) = Executor::reattach(&info) {
                let _ = exec.shutdown();
            }
        }
    }
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
        EngineHome { dir, chroot_env }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.path().join("data")
    }

    pub fn run_dir(&self) -> PathBuf {
        self.data_dir().join("run")
    }

    pub fn config(&self) -> taskgate_engine::EngineConfig {
        taskgate_engine::EngineConfig {
            data_dir: self.data_dir(),
            executor_bin: PathBuf::from(env!("CARGO_BIN_EXE_taskgate-executor")),
            chroot_env: self.chroot_env.clone(),
            default_user: "nobody".into(),
            pids_max: 64,
            clock: std::sync::Arc::new(taskgate_engine::clock::SystemClock::default()),
            restart_seed: 0,
        }
    }

    pub fn open(&self) -> taskgate_engine::Engine {
        taskgate_engine::Engine::open(self.config()).expect("open engine")
    }

    /// `--chroot-env HOST:TASK` arguments for an agent process.
    pub fn chroot_env_args(&self) -> Vec<String> {
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

    /// Asserts the allocs `alloc_ids` left nothing behind (see
    /// [`assert_engine_left_nothing`]), then removes the temp dir, asserting
    /// that works too (a leaked mount would make it fail).
    pub fn finish(self, alloc_ids: &[String]) {
        assert_engine_left_nothing(&self.data_dir(), alloc_ids);
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
pub fn assert_engine_left_nothing(data_dir: &Path, alloc_ids: &[String]) {
    let found = engine_leftovers(data_dir, alloc_ids);
    assert!(found.is_empty(), "leftovers: {found:#?}");
}

/// What [`assert_engine_left_nothing`] looks for, as a list.
pub fn engine_leftovers(data_dir: &Path, alloc_ids: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for id in alloc_ids {
        let cgroups = taskgate_cgroups(Path::new("/sys/fs/cgroup"), &format!("taskgate.{id}."));
        found.extend(cgroups.iter().map(|c| format!("cgroup {}", c.display())));
    }
    let root = data_dir.to_string_lossy().to_string();
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
    let run_dir = data_dir.join("run");
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

/// Live processes mentioning any of `needles` (public face of the check above).
pub fn live_processes_mentioning(needles: &[&str]) -> Vec<String> {
    processes_mentioning(needles)
}
