//! A CLI run's scratch dir (`explore`, `replay`, `gate` of a build with
//! fault points): its lab's temp dir under the test's own, and the check
//! that the run left nothing behind.

use super::require_root;
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use taskgate_scenarios::watchdog::Watchdog;

/// Hang safety net for one CLI run: an idle window that restarts on every
/// byte the CLI prints (explore and gate print a line per run when their
/// output is not a terminal), scaled to the machine's speed.
pub fn idle() -> Duration {
    taskgate_faults::patience::step()
}

/// The zoo's taskgate, built by `ci/zoo.sh build` (ci/test.sh's build
/// stage does): every seeded bug, one chosen per run by its environment.
fn zoo_taskgate() -> PathBuf {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/zoo/taskgate");
    assert!(
        bin.is_file(),
        "{} missing: build the zoo with `ci/zoo.sh build` (ci/test.sh's build stage does)",
        bin.display()
    );
    bin
}

/// A temp dir the CLI's lab lives in, and what was on the host before.
pub struct Scratch {
    dir: tempfile::TempDir,
    cgroups_before: BTreeSet<PathBuf>,
    labs_before: BTreeSet<PathBuf>,
}

impl Scratch {
    pub fn new() -> Scratch {
        require_root();
        let dir = tempfile::Builder::new()
            .prefix("tgh")
            .tempdir_in("/tmp")
            .expect("temp dir");
        Scratch {
            dir,
            cgroups_before: super::all_task_cgroups(),
            labs_before: super::all_lab_cgroups(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `taskgate ARGS`, its temp files under this scratch dir, no fault
    /// settings inherited, its output piped.
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_of(Path::new(env!("CARGO_BIN_EXE_taskgate")), args)
    }

    /// [`Scratch::command`] of the taskgate binary `bin` (another build's).
    pub fn command_of(&self, bin: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(bin);
        command
            .args(args)
            .env("TMPDIR", self.path())
            .env("RUST_BACKTRACE", "0")
            .env_remove(taskgate_faults::FAULTS_ENV)
            .env_remove(taskgate_faults::FAULT_LOG_ENV)
            .env_remove(taskgate_executor::FAILPOINTS_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Runs `taskgate ARGS` (see [`Scratch::command`]) to its end.
    pub fn taskgate(&self, args: &[&str]) -> Output {
        self.run(self.command(args), args)
    }

    /// Runs `command` (of `args`, see [`Scratch::command_of`]) to its end.
    /// `taskgate gate ARGS` of the legacy build (the zoo's, with the
    /// report's own bug, `legacy-prestart-skip`, chosen), which must fail:
    /// its stdout and stderr.
    pub fn legacy_gate(&self, args: &[&str]) -> (String, String) {
        let args: Vec<&str> = ["gate"].iter().chain(args).copied().collect();
        let mut command = self.command_of(&zoo_taskgate(), &args);
        command.env(
            taskgate_faults::seeded::SEEDED_BUG_ENV,
            "legacy-prestart-skip",
        );
        let out = self.run(command, &args);
        let (stdout, stderr) = text(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "the legacy gate must fail ({args:?}):\n{stdout}\n{stderr}"
        );
        (stdout, stderr)
    }

    pub fn run(&self, mut command: Command, args: &[&str]) -> Output {
        let bin = command.get_program().to_string_lossy().into_owned();
        let mut child = command.spawn().expect("spawn taskgate");
        let printed = Arc::new(AtomicU64::new(0));
        let readers = [
            collect(child.stdout.take().expect("piped"), printed.clone()),
            collect(child.stderr.take().expect("piped"), printed.clone()),
        ];
        let watchdog = Watchdog::arm(child.id(), idle(), move || printed.load(Ordering::Relaxed));
        let status = child.wait().expect("wait for taskgate");
        let timed_out = watchdog.disarm();
        let [stdout, stderr] = readers.map(|r| r.join().expect("output reader"));
        let out = Output {
            status,
            stdout,
            stderr,
        };
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            !timed_out,
            "taskgate {args:?} hung: nothing printed for {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            idle()
        );
        assert!(
            !stderr.contains("needs a build with fault points"),
            "{bin} is not a failpoints build (another build overwrote it?): {stderr}"
        );
        assert!(
            !stderr.contains("panicked"),
            "taskgate {args:?} panicked:\n{stderr}"
        );
        out
    }

    /// Asserts the CLI left nothing: no process or mount mentioning the
    /// scratch dir, nothing in it but `keep`, and no new empty task cgroup.
    pub fn finish(self, keep: &[&str]) {
        let root = self.path().to_string_lossy().to_string();
        let procs = super::live_processes_mentioning(&[&root]);
        assert!(procs.is_empty(), "leftover processes: {procs:?}");
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mounts: Vec<&str> = mountinfo.lines().filter(|l| l.contains(&root)).collect();
        assert!(mounts.is_empty(), "leftover mounts: {mounts:?}");
        let files: Vec<String> = std::fs::read_dir(self.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|f| !keep.contains(&f.as_str()))
            .collect();
        assert!(
            files.is_empty(),
            "leftovers in the lab's temp dir: {files:?}"
        );
        // Alloc ids are the CLI's own, so look for task cgroups that appeared
        // during the run and are empty now (a live one belongs to a running
        // task, and no task of this CLI runs any more).
        let leaked: Vec<PathBuf> = super::all_task_cgroups()
            .difference(&self.cgroups_before)
            .filter(|cg| {
                std::fs::read_to_string(cg.join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty())
            })
            .cloned()
            .collect();
        assert!(leaked.is_empty(), "leftover task cgroups: {leaked:?}");
        let labs: Vec<PathBuf> = super::all_lab_cgroups()
            .difference(&self.labs_before)
            .cloned()
            .collect();
        assert!(labs.is_empty(), "leftover lab cgroups: {labs:?}");
        let path = self.path().to_path_buf();
        self.dir
            .close()
            .unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
    }
}

/// Reads a pipe to its end, counting every byte read as progress.
pub fn collect(
    mut pipe: impl Read + Send + 'static,
    progress: Arc<AtomicU64>,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = pipe.read(&mut chunk) {
            all.extend_from_slice(&chunk[..n]);
            progress.fetch_add(n as u64, Ordering::Relaxed);
        }
        all
    })
}

pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
