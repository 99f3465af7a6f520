//! The lab every scenario runs in: a private temp dir, the marked tmpfs
//! holding the task root filesystem and the executor binary, and the exec
//! gate whose judge checks facts on disk — not what the engine reports.
//!
//! The process must already be in a private mount namespace
//! ([`taskgate_oracle::enter_private_mount_namespace`], called by the CLI
//! before any thread exists), so the tmpfs never appears on the host.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use taskgate_faults::Hit;
use taskgate_oracle::{
    ExecGate, ExecRecord, MarkedFs, PendingExec, RunFacts, Verdict, KILL_SIGNAL_WITNESS,
};

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Oracle(#[from] taskgate_oracle::OracleError),
    #[error(transparent)]
    Executor(#[from] taskgate_executor::ExecutorError),
    #[error("engine: {0}")]
    Engine(#[from] taskgate_engine::EngineError),
    #[error("engine state: {0}")]
    State(#[from] taskgate_engine::state::StateError),
    #[error("the fake driver cannot {0}: run this case on the real executor")]
    FakeCannot(&'static str),
    #[error(
        "the harness needs root (fanotify permission events, mounts, cgroups): run it as root"
    )]
    NotRoot,
}

pub(crate) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LabError {
    let path = path.to_path_buf();
    move |source| LabError::Io { what, path, source }
}

/// Where the judge reads the fault history of the engine it is judging.
#[derive(Debug, Clone)]
pub enum FaultSource {
    /// The engine runs in this process, reaching this run's points.
    InProcess(taskgate_faults::Faults),
    /// The engine runs in child agents that append hits to this file.
    Log(PathBuf),
}

impl FaultSource {
    pub fn history(&self) -> Vec<Hit> {
        match self {
            FaultSource::InProcess(faults) => faults.history(),
            FaultSource::Log(path) => taskgate_faults::read_log(path).unwrap_or_default(),
        }
    }
}

/// What the judge knows about the run in progress.
#[derive(Debug)]
struct Watch {
    allocs_root: PathBuf,
    /// Tasks allowed to start after the alloc is terminal (poststop).
    may_start_late: BTreeSet<String>,
    faults: FaultSource,
    /// For each judged exec, in gate order: the fault history length when it was judged.
    judged_at: Vec<u64>,
}

/// Fields drop in order: the gate is stopped first (in `drop`), then the
/// tmpfs is unmounted, then the temp dir holding its mount point removed.
pub struct Lab {
    chroot_env: BTreeMap<PathBuf, PathBuf>,
    executor_bin: PathBuf,
    /// The lab's own cgroup parent, which each run's engine claims (and
    /// gives back): never a real agent's, nor another lab's.
    cgroup_parent: taskgate_executor::CgroupParent,
    watch: Arc<Mutex<Option<Watch>>>,
    gate: Option<ExecGate>,
    _marked: MarkedFs,
    work: Option<tempfile::TempDir>,
    /// Set by a failing run: its data dir is kept for `taskgate status`.
    keep: std::cell::Cell<bool>,
}

impl Lab {
    /// Builds the marked filesystem (busybox root + a copy of `executor_bin`)
    /// and starts the exec gate.
    pub fn new(executor_bin: &Path) -> Result<Lab, LabError> {
        if !nix::unistd::geteuid().is_root() {
            return Err(LabError::NotRoot);
        }
        let root = scratch_root();
        let work = tempfile::Builder::new()
            .prefix("taskgate-lab.")
            .tempdir_in(&root)
            .map_err(io("creating", &root))?;
        let marked_dir = work.path().join("marked");
        std::fs::create_dir(&marked_dir).map_err(io("creating", &marked_dir))?;
        let marked = MarkedFs::mount(&marked_dir)?;
        let root = marked.path().join("root");
        let chroot_env = taskgate_executor::build_busybox_root(&root)?;
        install_kill_signal_witness(&root)?;
        let bin = marked.path().join("taskgate-executor");
        std::fs::copy(executor_bin, &bin).map_err(io("copying the executor binary to", &bin))?;
        let unique = work.path().file_name().map_or_else(String::new, |n| {
            n.to_string_lossy()
                .trim_start_matches("taskgate-lab.")
                .to_string()
        });
        let cgroup_parent =
            taskgate_executor::CgroupParent::new(&format!("/taskgate-lab-{unique}"))?;
        let watch: Arc<Mutex<Option<Watch>>> = Arc::new(Mutex::new(None));
        let judge_watch = watch.clone();
        let gate = ExecGate::start(
            marked.path(),
            Arc::new(move |exec: &PendingExec| judge(&judge_watch, exec)),
        )?;
        Ok(Lab {
            work: Some(work),
            chroot_env,
            executor_bin: bin,
            cgroup_parent,
            watch,
            gate: Some(gate),
            _marked: marked,
            keep: std::cell::Cell::new(false),
        })
    }

    pub fn work_dir(&self) -> &Path {
        self.work
            .as_ref()
            .expect("the work dir lives as long as the lab")
            .path()
    }

    /// Keeps the work dir (with the failing runs' data dirs) after the lab ends.
    pub fn keep_work_dir(&self) {
        self.keep.set(true);
    }

    pub fn chroot_env(&self) -> &BTreeMap<PathBuf, PathBuf> {
        &self.chroot_env
    }

    pub fn cgroup_parent(&self) -> &taskgate_executor::CgroupParent {
        &self.cgroup_parent
    }

    /// The executor binary on the marked filesystem: its exec is gated too.
    pub fn executor_bin(&self) -> &Path {
        &self.executor_bin
    }

    /// Starts judging a new run. Returns the index of its first exec record.
    pub fn begin_run(
        &self,
        allocs_root: PathBuf,
        may_start_late: BTreeSet<String>,
        faults: FaultSource,
    ) -> usize {
        *lock(&self.watch) = Some(Watch {
            allocs_root,
            may_start_late,
            faults,
            judged_at: Vec::new(),
        });
        self.gate().decisions().len()
    }

    /// Ends a run: its exec records (from `first`), each with the fault
    /// history length at the moment it was judged.
    pub fn end_run(&self, first: usize) -> Vec<(ExecRecord, u64)> {
        let judged_at = lock(&self.watch)
            .take()
            .map(|w| w.judged_at)
            .unwrap_or_default();
        self.records_from(first, judged_at)
    }

    /// What [`Lab::end_run`] would return now, while the run goes on.
    pub fn execs_so_far(&self, first: usize) -> Vec<(ExecRecord, u64)> {
        let judged_at = lock(&self.watch)
            .as_ref()
            .map(|w| w.judged_at.clone())
            .unwrap_or_default();
        self.records_from(first, judged_at)
    }

    fn records_from(&self, first: usize, judged_at: Vec<u64>) -> Vec<(ExecRecord, u64)> {
        let mut judged = judged_at.into_iter();
        self.gate()
            .decisions()
            .into_iter()
            .skip(first)
            .map(|r| {
                let at = if r.judged {
                    judged.next().unwrap_or(u64::MAX)
                } else {
                    u64::MAX
                };
                (r, at)
            })
            .collect()
    }

    fn gate(&self) -> &ExecGate {
        self.gate
            .as_ref()
            .expect("gate runs for the lab's lifetime")
    }
}

/// Puts the kill signal's witness beside busybox in the task root's `/bin`:
/// a task that reports its kill signal runs it from the signal's trap, and
/// the exec gate sees it in the task's cgroup (see
/// [`taskgate_oracle::KILL_SIGNAL_WITNESS`]).
fn install_kill_signal_witness(root: &Path) -> Result<(), LabError> {
    use std::os::unix::fs::PermissionsExt;
    let witness = root.join("bin").join(KILL_SIGNAL_WITNESS);
    std::fs::write(&witness, "#!/bin/sh\n").map_err(io("writing", &witness))?;
    std::fs::set_permissions(&witness, std::fs::Permissions::from_mode(0o755))
        .map_err(io("making executable", &witness))
}

/// Whether `task`'s command runs the kill signal's witness: its kill
/// signal is then judged by the task's own report.
pub fn reports_kill_signal(task: &taskgate_engine::jobspec::Task) -> bool {
    let witness = format!("/bin/{KILL_SIGNAL_WITNESS}");
    task.args.iter().any(|arg| arg.contains(&witness))
}

/// Where the harness makes its runs' data dirs: `TMPDIR` when set;
/// otherwise `/dev/shm` when it is a tmpfs this user may write with room
/// for failing runs' kept data (a container's is often 64 MiB). A run's
/// engine commits its state database many times, and makes and removes a
/// data dir of a few dozen files: on a disk's filesystem the syncs were a
/// fifth of a gate's time, and most of a fake run's.
pub(crate) fn scratch_root() -> PathBuf {
    use nix::sys::statfs::{statfs, TMPFS_MAGIC};
    const ROOM: u64 = 1 << 30;
    let shm = Path::new("/dev/shm");
    let in_memory = statfs(shm).is_ok_and(|fs| {
        fs.filesystem_type() == TMPFS_MAGIC
            && (fs.blocks_available()).saturating_mul(u64::try_from(fs.block_size()).unwrap_or(0))
                >= ROOM
    }) && nix::unistd::access(shm, nix::unistd::AccessFlags::W_OK).is_ok();
    if std::env::var_os("TMPDIR").is_none() && in_memory {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut gate) = self.gate.take() {
            if let Err(err) = gate.stop() {
                tracing::error!(error = %err, "stopping the exec gate");
            }
        }
        // Each run's engine gives the lab's cgroup parent back, but not
        // while a bug's leaked processes still live in it (the run reported
        // and killed them): the lab removes what is left of its own tree.
        let parent = self.cgroup_parent.as_str().trim_start_matches('/');
        for left in crate::leftovers::remove_cgroup_tree(parent) {
            let _ = writeln!(std::io::stderr(), "the lab could not remove its {left}");
        }
        if self.keep.get() {
            if let Some(work) = self.work.take() {
                // The marked tmpfs is unmounted when `_marked` drops after
                // this; what stays is the runs' data on the host disk.
                let _ = writeln!(
                    std::io::stderr(),
                    "failing runs' data kept in {}",
                    work.keep().display()
                );
            }
        }
    }
}

/// A poisoned lock's data is still the run's: a panicked run is reported,
/// not hidden behind a second panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Answers one exec with the oracle's rule, against the run in progress.
fn judge(watch: &Mutex<Option<Watch>>, exec: &PendingExec) -> Verdict {
    let mut guard = lock(watch);
    let Some(watch) = guard.as_mut() else {
        return Verdict::Allow;
    };
    let history = watch.faults.history();
    watch.judged_at.push(history.len() as u64);
    let facts = RunFacts {
        allocs_root: &watch.allocs_root,
        may_start_late: &watch.may_start_late,
        history: &history,
    };
    taskgate_oracle::judge(&facts, exec)
}
