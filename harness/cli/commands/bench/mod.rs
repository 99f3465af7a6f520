//! `taskgate bench`: how long `/bin/true` takes from start to exit under full
//! isolation, side by side with `runc run` and an `unshare`+`chroot` floor
//! on the same root; the executor's resident memory per running task; and
//! the engine's alloc throughput with its submit-to-exec latency; and, in a
//! build with fault points, the search's speed (`search.rs`). The only
//! place performance is claimed: tests check behaviour, never timings.

use anyhow::{ensure, Context};
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskgate_engine::jobspec::{Group, Job, JobType, Task};
use taskgate_engine::task_state::{EventKind, Outcome, TaskState};
use taskgate_engine::{AllocHandle, ClientStatus, DataDir, Engine, EngineConfig};
use taskgate_executor::{
    CgroupParent, CgroupTree, Executor, ExecutorConfig, LogConfig, ReattachInfo, Resources,
    Rlimits, TaskSpec,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

mod linkage;
mod report;
mod search;
use linkage::Linkage;
use report::*;

/// The issue's target: taskgate's median at most a fifth of runc's.
const TARGET_RATIO: f64 = 0.2;
const RSS_TARGET_KIB: u64 = 4 * 1024;
const RUNC_PATHS: [&str; 2] = ["/usr/sbin/runc", "/usr/bin/runc"];
/// The contenders of the start-to-exit race.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Taskgate,
    Runc,
    /// A bare `unshare` + `chroot`: the floor any isolating start stands on.
    Floor,
}

/// Every order of the three contenders in turn, so each follows each other
/// equally often: a run inherits kernel state from the one before (a cgroup
/// attach soon after another is cheap; the first after a quiet spell waits
/// for an RCU grace period), and a fixed rotation would hand that to one.
const ORDERS: [[Contender; 3]; 6] = {
    use Contender::{Floor, Runc, Taskgate};
    [
        [Taskgate, Runc, Floor],
        [Runc, Floor, Taskgate],
        [Floor, Taskgate, Runc],
        [Taskgate, Floor, Runc],
        [Floor, Runc, Taskgate],
        [Runc, Taskgate, Floor],
    ]
};
const MEMORY_MB: u64 = 64;
const PIDS_MAX: u64 = 64;
const CPU_SHARES: u64 = 100;
/// The engine job's grace between SIGINT and the cgroup kill.
const KILL_TIMEOUT: Duration = Duration::from_millis(100);

#[derive(clap::Args)]
pub struct Args {
    /// Start-to-exit runs per contender (taskgate, runc, floor), interleaved.
    #[arg(long, default_value_t = NonZeroUsize::new(30).unwrap())]
    pub runs: NonZeroUsize,
    /// Idle time before each timed run; 0 runs them back to back. About 50
    /// or more makes each one start like a lone start on an idle host.
    #[arg(long, default_value_t = 0)]
    pub pause_ms: u64,
    /// Long-running tasks whose executors' resident memory is read.
    #[arg(long, default_value_t = NonZeroUsize::new(5).unwrap())]
    pub rss_tasks: NonZeroUsize,
    /// Allocations started and stopped through the engine.
    #[arg(long, default_value_t = NonZeroUsize::new(20).unwrap())]
    pub allocs: NonZeroUsize,
    /// Engine allocations in flight at once.
    #[arg(long, default_value_t = NonZeroUsize::new(4).unwrap())]
    pub concurrency: NonZeroUsize,
    /// Print the results as JSON on stdout (its fields: docs/benchmarks.md);
    /// the table goes to stderr.
    #[arg(long)]
    pub json: bool,
    /// Time the gate over these scenarios only (default: the whole gate).
    #[arg(long = "gate-only", value_name = "SCENARIO", value_parser = search::scenario_name)]
    pub gate_only: Vec<String>,
    /// Random schedules of the report's scenario timed on the fake driver,
    /// beside its enumerated ones [default: 2000].
    #[arg(long, value_name = "N", value_parser = search::fake_schedules)]
    pub fake_schedules: Option<u32>,
    /// Skip the search's figures (gate and fake driver throughput).
    #[arg(long, conflicts_with_all = ["gate_only", "fake_schedules"])]
    pub no_search: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    super::require_root()?;
    // Stopped by a signal between two of its steps, the bench takes down
    // what it made (its scratch dir, cgroups and executors) as it returns.
    super::interrupt::catch().context("catching SIGINT, SIGTERM and SIGHUP")?;
    let runc = RUNC_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .context(
            "runc is not at /usr/sbin/runc or /usr/bin/runc: install runc (apt-get install runc)",
        )?;
    let Setup { scratch, bench } = &mut Setup::prepare(runc, super::sibling_executor()?)?;

    let pause = Duration::from_millis(args.pause_ms);
    let latency = bench.latency(scratch, args.runs.get(), pause)?;
    let rss = bench.rss(scratch, args.rss_tasks.get())?;
    let engine = bench.engine(scratch, args.allocs.get(), args.concurrency.get())?;
    let search = if args.no_search {
        None
    } else {
        search_figures(&scratch.dir, &args)?
    };
    let report = Report::new(bench, pause, latency, rss, engine, search);
    if args.json {
        // Standard output holds the JSON alone, for a script to keep.
        report.print_table(&mut std::io::stderr());
        crate::commands::say!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        report.print_table(&mut std::io::stdout());
    }
    Ok(())
}

/// An error once a signal asked the bench to stop (see [`Args`]'s run).
fn not_interrupted() -> anyhow::Result<()> {
    ensure!(
        !super::interrupt::interrupted(),
        "interrupted: no figures; what the bench made is taken down"
    );
    Ok(())
}

/// A figure for the JSON report, to a thousandth.
fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

#[cfg(feature = "failpoints")]
fn search_figures(scratch: &Path, args: &Args) -> anyhow::Result<Option<search::Search>> {
    let fake_schedules = args.fake_schedules.unwrap_or(search::FAKE_SCHEDULES);
    search::measure(scratch, &args.gate_only, fake_schedules).map(Some)
}

/// A build without fault points has no harness to time: the report says so.
#[cfg(not(feature = "failpoints"))]
fn search_figures(_: &Path, _: &Args) -> anyhow::Result<Option<search::Search>> {
    Ok(None)
}

/// The bench's temp dir and the executors it has running; dropping it (on
/// an error too) shuts those down, deletes any runc container a failed run
/// left, and removes the dir.
struct Scratch {
    dir: PathBuf,
    runc: PathBuf,
    executors: Vec<ReattachInfo>,
}

impl Scratch {
    fn create(runc: PathBuf) -> anyhow::Result<Scratch> {
        // Short: executor socket paths under it must fit in sun_path.
        let dir = std::env::temp_dir().join(format!("tgb{}", std::process::id()));
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch {
            dir,
            runc,
            executors: Vec::new(),
        })
    }

    fn launch(&mut self, cfg: &ExecutorConfig, spec: &TaskSpec) -> anyhow::Result<Executor> {
        let exec = taskgate_executor::launch(cfg, spec)
            .with_context(|| format!("launching task {}", spec.task_name))?;
        self.executors.push(exec.reattach_info());
        Ok(exec)
    }

    fn shutdown(&mut self, exec: &Executor) -> anyhow::Result<()> {
        exec.shutdown().context("shutting the executor down")?;
        let pid = exec.reattach_info().executor_pid;
        self.executors.retain(|info| info.executor_pid != pid);
        Ok(())
    }

    fn runc(&self) -> Command {
        let mut cmd = Command::new(&self.runc);
        cmd.arg("--root").arg(self.dir.join("runc-state"));
        cmd
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for info in &self.executors {
            if let Ok(exec) = Executor::reattach(info) {
                let _ = exec.shutdown();
            }
        }
        // `runc run` deletes its container when it exits; a broken run may not have.
        if let Ok(out) = self.runc().args(["list", "-q"]).output() {
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = self
                    .runc()
                    .args(["delete", "--force", id])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            crate::commands::say_err!("warning: removing {}: {e}", self.dir.display());
        }
    }
}

/// What the bench made on the host, given back in the one order that
/// works, however it ends (an error, Ctrl-C): the executors still running
/// and their task cgroups (`scratch`'s) before the cgroup parent they live
/// under (`bench`'s), which is refused while any lives. Fields drop in
/// declaration order.
struct Setup {
    scratch: Scratch,
    bench: Bench,
}

impl Setup {
    fn prepare(runc: PathBuf, executor_bin: PathBuf) -> anyhow::Result<Setup> {
        let scratch = Scratch::create(runc)?;
        let bench = Bench::prepare(&scratch, executor_bin)?;
        Ok(Setup { scratch, bench })
    }
}

/// The shared busybox root, the executor config, and an OCI bundle for runc
/// over the same root.
struct Bench {
    rootfs: PathBuf,
    /// Resolved once, so the floor pays no PATH search per run.
    unshare: PathBuf,
    chroot: PathBuf,
    chroot_env: BTreeMap<PathBuf, PathBuf>,
    bundle: PathBuf,
    executor: ExecutorConfig,
    executor_linkage: Linkage,
    /// The executors' cgroup parent, the bench's own; given back on drop.
    cgroups: CgroupTree,
    alloc_dir: PathBuf,
    alloc_id: String,
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Err(err) = self.cgroups.release() {
            crate::commands::say_err!("warning: giving back {}: {err}", self.cgroups.parent());
        }
    }
}

/// A cgroup parent of the bench's own: `/taskgate-bench-<pid>[-what]`.
fn bench_cgroup_parent(what: &str) -> anyhow::Result<CgroupParent> {
    Ok(CgroupParent::new(&format!(
        "/taskgate-bench-{}{what}",
        std::process::id()
    ))?)
}

impl Bench {
    fn prepare(scratch: &Scratch, executor_bin: PathBuf) -> anyhow::Result<Bench> {
        let executor_linkage = Linkage::of(&executor_bin).unwrap_or_else(|err| {
            crate::commands::say_err!("warning: the executor's linkage: {err:#}");
            Linkage::Unknown
        });
        let rootfs = scratch.dir.join("rootfs");
        let chroot_env = taskgate_executor::build_busybox_root(&rootfs)?;
        let bundle = scratch.dir.join("bundle");
        let alloc_dir = scratch.dir.join("alloc");
        for dir in [&bundle, &alloc_dir.join("alloc")] {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let config = oci_config(&rootfs);
        std::fs::write(
            bundle.join("config.json"),
            serde_json::to_vec_pretty(&config)?,
        )?;
        let unshare = on_path("unshare").context("no unshare on PATH: install util-linux")?;
        let chroot = on_path("chroot").context("no chroot on PATH: install coreutils")?;
        // Last: nothing fails after the claim, which only the bench's drop
        // gives back.
        let cgroup_parent = bench_cgroup_parent("")?;
        let cgroups = CgroupTree::claim(&cgroup_parent)?;
        Ok(Bench {
            rootfs,
            unshare,
            chroot,
            chroot_env,
            bundle,
            executor_linkage,
            executor: ExecutorConfig {
                executor_bin,
                run_dir: scratch.dir.join("run"),
                cgroup_parent,
                faults: Default::default(),
                launcher_faults: Default::default(),
            },
            cgroups,
            alloc_dir,
            alloc_id: format!("bench{}", std::process::id()),
        })
    }

    /// A root task spec with the task dir laid out, limits as in the runc bundle.
    fn spec(&self, task: &str, command: &str, args: &[&str]) -> anyhow::Result<TaskSpec> {
        let task_dir = self.alloc_dir.join(task);
        for sub in taskgate_executor::TASK_SUBDIRS {
            std::fs::create_dir_all(task_dir.join(sub))?;
        }
        Ok(TaskSpec {
            alloc_id: self.alloc_id.clone(),
            task_name: task.to_string(),
            task_dir,
            shared_alloc_dir: self.alloc_dir.join("alloc"),
            chroot_env: self.chroot_env.clone(),
            command: command.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: BTreeMap::new(),
            user: "root".into(),
            resources: Resources {
                cpu_shares: CPU_SHARES,
                memory_mb: MEMORY_MB,
                pids_max: PIDS_MAX,
            },
            network_isolation: true,
            logs: LogConfig {
                max_files: 2,
                max_file_size_bytes: 1 << 20,
            },
            kill_signal: taskgate_executor::KillSignal::SIGTERM,
            kill_timeout: Duration::from_secs(1),
            rlimits: Rlimits::default(),
            oom_score_adj: taskgate_executor::DEFAULT_OOM_SCORE_ADJ,
        })
    }

    /// Interleaves the three contenders so machine noise hits each alike;
    /// one untimed warm-up each.
    fn latency(
        &self,
        scratch: &mut Scratch,
        runs: usize,
        pause: Duration,
    ) -> anyhow::Result<Latency> {
        let spec = self.spec("true", "/bin/true", &[])?;
        let mut lat = Latency::default();
        let mut record =
            |lat: &mut Latency, round: usize, which: Contender| -> anyhow::Result<()> {
                match which {
                    Contender::Taskgate => {
                        let phases = taskgate_once(scratch, &self.executor, &spec)?;
                        if round > 0 {
                            lat.taskgate.push(phases.iter().sum());
                            for (all, one) in lat.phases.iter_mut().zip(phases) {
                                all.push(one);
                            }
                        }
                    }
                    Contender::Runc => {
                        let id = format!("taskgate-bench-{}-{round}", std::process::id());
                        let mut cmd = scratch.runc();
                        cmd.args(["run", "--bundle"]).arg(&self.bundle).arg(id);
                        let took = timed(&mut cmd, "runc run")?;
                        if round > 0 {
                            lat.runc.push(took);
                        }
                    }
                    Contender::Floor => {
                        let mut cmd = Command::new(&self.unshare);
                        cmd.args(["--mount", "--pid", "--fork", "--uts", "--ipc", "--net"])
                            .arg(&self.chroot)
                            .arg(&self.rootfs)
                            .arg("/bin/true");
                        let took = timed(&mut cmd, "unshare (util-linux) + chroot")?;
                        if round > 0 {
                            lat.floor.push(took);
                        }
                    }
                }
                Ok(())
            };
        // Round 0 is the warm-up.
        for round in 0..=runs {
            for which in ORDERS[round % ORDERS.len()] {
                not_interrupted()?;
                std::thread::sleep(pause);
                record(&mut lat, round, which)?;
            }
        }
        Ok(lat)
    }

    /// Resident memory of `count` executors whose tasks keep running.
    fn rss(&self, scratch: &mut Scratch, count: usize) -> anyhow::Result<Vec<Memory>> {
        let mut execs = Vec::new();
        for i in 0..count {
            not_interrupted()?;
            let spec = self.spec(
                &format!("sleep{i}"),
                "/bin/sh",
                &["-c", "sleep 3600 & wait"],
            )?;
            execs.push(scratch.launch(&self.executor, &spec)?);
        }
        // Let the executors' log pumps and reaper threads settle into their steady state.
        std::thread::sleep(Duration::from_millis(200));
        let memory = execs
            .iter()
            .map(|e| Memory::of(e.reattach_info().executor_pid))
            .collect::<anyhow::Result<Vec<_>>>()?;
        for exec in &execs {
            exec.stop(
                taskgate_executor::KillSignal::SIGKILL,
                Duration::ZERO,
                taskgate_executor::Doom::Kill,
            )?;
            scratch.shutdown(exec)?;
        }
        Ok(memory)
    }

    /// Starts `allocs` one-task allocations through the engine, at most
    /// `concurrency` in flight, each stopped as soon as its task is Started.
    fn engine(
        &self,
        scratch: &Scratch,
        allocs: usize,
        concurrency: usize,
    ) -> anyhow::Result<EngineRun> {
        let engine = Engine::open(EngineConfig {
            data_dir: DataDir::new(scratch.dir.join("engine")),
            executor_bin: self.executor.executor_bin.clone(),
            chroot_env: self.chroot_env.clone(),
            default_user: "nobody".into(),
            pids_max: PIDS_MAX,
            keep_finished: taskgate_engine::DEFAULT_KEEP_FINISHED,
            clock: Arc::new(taskgate_engine::clock::SystemClock::default()),
            restart_seed: 0,
            // Its own: the engine gives its parent back when it is dropped.
            cgroup_parent: bench_cgroup_parent("-engine")?,
            executor_faults: Default::default(),
            faults: Default::default(),
        })?;
        let job = engine_job();
        let runtime = super::runtime()?;
        runtime.block_on(async {
            let permits = Arc::new(Semaphore::new(concurrency));
            let began = Instant::now();
            let mut running = Vec::new();
            let mut submit_error = None;
            for _ in 0..allocs {
                if let Err(interrupted) = not_interrupted() {
                    submit_error = Some(interrupted);
                    break;
                }
                let permit = permits
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed");
                let submitted = Instant::now();
                match engine.submit(&job, None) {
                    Ok(handle) => {
                        running.push(tokio::spawn(start_and_stop(handle, submitted, permit)))
                    }
                    Err(e) => {
                        submit_error = Some(e.into());
                        break;
                    }
                }
            }
            // Every submitted alloc is stopped by its own task, so this always ends.
            let mut to_exec = Vec::new();
            let mut escalated = 0;
            let mut failure = None;
            for run in running {
                match run.await {
                    Ok(Ok((took, killed))) => {
                        to_exec.push(took);
                        escalated += usize::from(killed);
                    }
                    Ok(Err(e)) => failure = failure.or(Some(e)),
                    Err(panic) => failure = failure.or(Some(panic.into())),
                }
            }
            let elapsed = began.elapsed();
            if let Some(e) = submit_error {
                return Err(e);
            }
            if let Some(e) = failure {
                return Err(e);
            }
            Ok(EngineRun {
                allocs,
                concurrency,
                elapsed,
                to_exec,
                escalated,
            })
        })
    }
}

/// launch() returns once the task has exec'd, wait() once it has exited,
/// shutdown() once the executor removed its cgroup and files and exited.
fn taskgate_once(
    scratch: &mut Scratch,
    cfg: &ExecutorConfig,
    spec: &TaskSpec,
) -> anyhow::Result<[Duration; 3]> {
    let t0 = Instant::now();
    let exec = scratch.launch(cfg, spec)?;
    let t1 = Instant::now();
    let exit = exec.wait()?;
    let t2 = Instant::now();
    scratch.shutdown(&exec)?;
    let t3 = Instant::now();
    ensure!(exit.successful(), "taskgate: /bin/true failed: {exit:?}");
    Ok([t1 - t0, t2 - t1, t3 - t2])
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Wall time of the whole process, which must succeed.
fn timed(cmd: &mut Command, what: &str) -> anyhow::Result<Duration> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    let took = t0.elapsed();
    ensure!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(took)
}

/// The same isolation the executor applies, as an OCI runtime spec: new
/// pid, mount, uts, ipc, network and cgroup namespaces, a read-only root, runc's
/// own /proc and /dev (with pts and shm, as the executor mounts), the
/// executor's cgroup limits, capabilities and every rlimit.
fn oci_config(rootfs: &Path) -> serde_json::Value {
    let caps: Vec<String> = taskgate_executor::DEFAULT_CAPS
        .iter()
        .map(|c| c.to_string())
        .collect();
    let ns = |t: &str| json!({ "type": t });
    // As the executor does: a limit above this process's own hard limit is
    // lowered to it (raising one needs CAP_SYS_RESOURCE, which runc, unlike
    // the executor, does not fall back from).
    let rlimits: Vec<serde_json::Value> = Rlimits::default()
        .each()
        .iter()
        .map(|(res, l)| {
            let own = nix::sys::resource::getrlimit(*res).map_or(u64::MAX, |(_, hard)| hard);
            json!({ "type": format!("{res:?}"), "soft": l.soft.min(own), "hard": l.hard.min(own) })
        })
        .collect();
    json!({
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": false,
            "user": { "uid": 0, "gid": 0 },
            "args": ["/bin/true"],
            "env": ["PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"],
            "cwd": "/",
            "capabilities": { "bounding": caps, "effective": caps, "permitted": caps },
            "rlimits": rlimits,
            "noNewPrivileges": true
        },
        "root": { "path": rootfs, "readonly": true },
        "hostname": "true",
        "mounts": [
            { "destination": "/proc", "type": "proc", "source": "proc",
              "options": ["nosuid", "noexec", "nodev"] },
            { "destination": "/dev", "type": "tmpfs", "source": "tmpfs",
              "options": ["nosuid", "strictatime", "mode=755", "size=65536k"] },
            { "destination": "/dev/pts", "type": "devpts", "source": "devpts",
              "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"] },
            { "destination": "/dev/shm", "type": "tmpfs", "source": "shm",
              "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"] }
        ],
        "linux": {
            "resources": {
                "devices": [{ "allow": false, "access": "rwm" }],
                "memory": { "limit": MEMORY_MB << 20 },
                "cpu": { "shares": CPU_SHARES },
                "pids": { "limit": PIDS_MAX }
            },
            "namespaces": [ns("pid"), ns("network"), ns("ipc"), ns("uts"), ns("mount"), ns("cgroup")]
        }
    })
}

/// A one-task job that runs until stopped and exits 0 on the engine's SIGINT.
fn engine_job() -> Job {
    let mut task = Task::new(
        "sleeper",
        "/bin/sh",
        vec![
            "-c".into(),
            r#"trap "exit 0" INT TERM; sleep 3600 & wait"#.into(),
        ],
    );
    task.restart.attempts = 0;
    task.kill_timeout = KILL_TIMEOUT;
    Job {
        name: "bench".into(),
        version: 0,
        job_type: JobType::Service,
        groups: vec![Group {
            name: "bench".into(),
            tasks: vec![task],
        }],
    }
}

/// Submit-to-Started latency of one alloc, which it stops at Started and
/// waits for until it is done; and whether the stop had to SIGKILL the task.
async fn start_and_stop(
    handle: AllocHandle,
    submitted: Instant,
    _permit: OwnedSemaphorePermit,
) -> anyhow::Result<(Duration, bool)> {
    let alloc_id = handle.alloc_id.clone();
    let updater = handle.control();
    let (mut events, waiter) = handle.into_parts();
    let done = waiter.wait();
    tokio::pin!(done);
    let mut to_exec = None;
    let summary = loop {
        tokio::select! {
            event = events.recv(), if to_exec.is_none() => match event {
                Some(e) if e.kind == EventKind::Started => {
                    to_exec = Some(submitted.elapsed());
                    updater.stop();
                }
                Some(_) => {}
                // No more events: only the end is left to wait for.
                None => break (&mut done).await,
            },
            summary = &mut done => break summary,
        }
    };
    ensure!(
        summary.status.client != ClientStatus::Failed,
        "alloc {alloc_id} failed: {:?}",
        summary.tasks
    );
    // Started follows the exec, so a SIGINT can beat the shell's `trap`; a
    // namespace's init ignores it then, and the kill timeout escalates.
    let killed = summary.tasks.iter().any(|t| {
        matches!(&t.state, TaskState::Dead { outcome: Outcome::Killed { result: Some(r) } }
            if r.signal.is_some())
    });
    let took =
        to_exec.with_context(|| format!("alloc {alloc_id} ended without its task starting"))?;
    Ok((took, killed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: Args,
    }

    /// A scenario name the gate does not know is refused as the command
    /// line is read, not after minutes of the bench's other figures.
    #[test]
    fn an_unknown_gate_only_scenario_is_refused_at_once() {
        let parsed = Cli::try_parse_from(["bench", "--gate-only", "no-such-scenario"]);
        assert!(
            parsed.is_err_and(|e| e.to_string().contains("no-such-scenario")),
            "accepted"
        );
    }

    /// A count of zero is refused as the command line is read, as every
    /// other command's are (exit 2), not after the check for root.
    #[test]
    fn a_zero_count_is_refused_as_typed() {
        let taken: Vec<&str> = ["--runs", "--rss-tasks", "--allocs", "--concurrency"]
            .into_iter()
            .filter(|flag| Cli::try_parse_from(["bench", flag, "0"]).is_ok())
            .collect();
        assert!(taken.is_empty(), "{taken:?} took 0");
    }

    /// A build without fault points has no fake driver to time: its
    /// schedule count is refused as typed, not dropped.
    #[cfg(not(feature = "failpoints"))]
    #[test]
    fn fake_schedules_are_refused_without_fault_points() {
        let parsed = Cli::try_parse_from(["bench", "--fake-schedules", "10"]);
        assert!(parsed.is_err(), "taken");
    }

    /// A bench cut short while a task runs (an error, Ctrl-C) gives back
    /// its cgroup parent: its executors are shut down first. (The parent
    /// was released first, refused as in use, and left on the host.)
    #[cfg(all(feature = "privileged", feature = "failpoints"))]
    #[test]
    fn a_bench_cut_short_gives_back_its_cgroup_parent() {
        crate::commands::require_root().expect("this test needs root: run as root (see README)");
        let runc = RUNC_PATHS.iter().map(PathBuf::from).find(|p| p.exists());
        // This test runs from target/<profile>/deps, the executor one up.
        let me = std::env::current_exe().unwrap();
        let executor = me.parent().and_then(Path::parent).unwrap();
        let executor = executor.join("taskgate-executor");
        let mut setup = Setup::prepare(runc.expect("runc installed"), executor).unwrap();
        let parent = setup.bench.cgroups.parent().as_str().to_string();
        let Setup { scratch, bench } = &mut setup;
        let spec = bench
            .spec("sleep", "/bin/sh", &["-c", "sleep 3600"])
            .unwrap();
        scratch.launch(&bench.executor, &spec).unwrap();
        let task = taskgate_executor::task_cgroup_name(&bench.alloc_id, "sleep");
        assert!(!taskgate_scenarios::leftovers::cgroups(&task).is_empty());
        let name = parent.trim_start_matches('/');
        drop(setup);
        assert_eq!(
            taskgate_scenarios::leftovers::cgroups(name),
            Vec::<String>::new()
        );
    }

    /// One the gate knows is taken.
    #[cfg(feature = "failpoints")]
    #[test]
    fn a_known_gate_only_scenario_is_taken() {
        let parsed = Cli::try_parse_from(["bench", "--gate-only", "sidecar-stop"]);
        assert_eq!(
            parsed.map(|cli| cli.bench.gate_only).ok(),
            Some(vec!["sidecar-stop".to_string()])
        );
    }
}
