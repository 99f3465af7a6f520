//! Options shared by the commands that run an engine (`agent`, `run`), and
//! by those that only talk to the agent serving a data dir or read its
//! state (`status`, `stop`, `logs`, `restart`, `drain`).

use anyhow::Context;
use std::collections::BTreeMap;
use std::path::PathBuf;
use taskgate_engine::state::StateDb;
use taskgate_engine::{DataDir, Engine, EngineConfig};
use taskgate_executor::CgroupParent;
use taskgate_faults::Faults;

/// Where `--data-dir` points unless given.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/taskgate";

/// The data dir of the agent a client command talks to.
#[derive(clap::Args, Clone)]
pub struct ClientArgs {
    /// Where the state database, alloc dirs, executor sockets and the control
    /// socket live.
    #[arg(long, default_value = DEFAULT_DATA_DIR, value_parser = absolute_data_dir)]
    pub data_dir: DataDir,
}

/// A `--data-dir` taken from where the command starts: every path in the
/// agent's state and each task's spec is absolute.
fn absolute_data_dir(given: &str) -> Result<DataDir, String> {
    std::path::absolute(given)
        .map(DataDir::new)
        .map_err(|err| format!("{given}: {err}"))
}

impl ClientArgs {
    /// A copy of the state database, read here (when no agent serves the
    /// data dir): an agent starting meanwhile still gets the database. A
    /// data dir another user owns or can write is not read.
    pub fn read_state(&self) -> anyhow::Result<StateDb> {
        taskgate_engine::check_own_data_dir(&self.data_dir)?;
        let path = self.data_dir.state_db();
        anyhow::ensure!(
            path.exists(),
            "no state database at {} (nothing has run with this --data-dir)",
            path.display()
        );
        Ok(StateDb::copy_of(&path)?)
    }
}

const DEFAULT_USER: &str = "nobody";
const DEFAULT_PIDS_MAX: u64 = 256;
const AUTO_PARENT: &str = "auto";

#[derive(clap::Args, Clone)]
pub struct AgentArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// A host dir to bind read-only into every task root, as HOST[:TASK];
    /// repeatable. Default: Nomad's /bin /etc /lib /lib64 /sbin /usr.
    #[arg(long = "chroot-env", value_name = "HOST[:TASK]")]
    pub chroot_env: Vec<String>,
    // The options below have no clap default: one typed with its
    // default's value is still the user's, and a `run` submitted to an
    // agent (which may have started with another) must say it is ignored.
    /// User tasks run as unless the job says otherwise [default: nobody].
    #[arg(long)]
    pub user: Option<String>,
    /// Finished allocations kept, records and alloc dirs with their logs
    /// (at least 1): beyond them, the longest finished are removed
    /// [default: 50].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_finished: Option<u64>,
    /// Ceiling on processes per task, from 1 (the task's own) to the
    /// kernel's pid limit (4194304) [default: 256].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=taskgate_executor::MAX_PIDS))]
    pub pids_max: Option<u64>,
    /// The executor binary run for each task (default: `taskgate-executor`
    /// next to this binary).
    #[arg(long)]
    pub executor_bin: Option<PathBuf>,
    /// Seed of the restart jitter (default: drawn at start, and logged):
    /// the same seed, the same restart waits.
    #[arg(long)]
    pub restart_seed: Option<u64>,
    /// The cgroup (a path from the hierarchy's root) that holds every task
    /// cgroup and executor, or `auto`: the one this data dir's tasks live
    /// in, else the cgroup systemd delegated to the agent, else
    /// /taskgate.slice (v2) or /taskgate (v1). See docs/isolation.md,
    /// "Cgroups" [default: auto].
    #[arg(long, value_name = "CGROUP|auto")]
    pub cgroup_parent: Option<String>,
}

impl AgentArgs {
    /// The agent's own options given other than by default: a command that
    /// submits to a running agent cannot apply them.
    pub fn agents_own_given(&self) -> Vec<&'static str> {
        [
            ("--chroot-env", !self.chroot_env.is_empty()),
            ("--user", self.user.is_some()),
            ("--pids-max", self.pids_max.is_some()),
            ("--keep-finished", self.keep_finished.is_some()),
            ("--executor-bin", self.executor_bin.is_some()),
            ("--restart-seed", self.restart_seed.is_some()),
            ("--cgroup-parent", self.cgroup_parent.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    pub fn data_dir(&self) -> &DataDir {
        &self.client.data_dir
    }

    /// `--user`, or its default.
    pub fn user(&self) -> &str {
        self.user.as_deref().unwrap_or(DEFAULT_USER)
    }

    /// The host dirs bound into every task root, refused here if no task
    /// could start with them.
    pub fn chroot_env(&self) -> anyhow::Result<BTreeMap<PathBuf, PathBuf>> {
        if self.chroot_env.is_empty() {
            return Ok(taskgate_executor::default_chroot_env()
                .into_iter()
                .filter(|(host, _)| host.exists())
                .collect());
        }
        let env = (self.chroot_env.iter())
            .map(|entry| match entry.split_once(':') {
                Some((host, task)) => (PathBuf::from(host), PathBuf::from(task)),
                None => (PathBuf::from(entry), PathBuf::from(entry)),
            })
            .collect();
        taskgate_executor::check_chroot_env(&env).context("--chroot-env")?;
        Ok(env)
    }

    /// The tasks' default user, refused here if the host has none such: no
    /// task without a user of its own could start.
    fn default_user(&self) -> anyhow::Result<String> {
        let name = self.user();
        let user = nix::unistd::User::from_name(name)
            .with_context(|| format!("--user: looking up {name:?}"))?;
        anyhow::ensure!(user.is_some(), "--user: no user {name:?} on this host");
        Ok(name.to_string())
    }

    /// The executor binary, refused here if it is not one: no task could
    /// start without it.
    fn executor_bin(&self) -> anyhow::Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let Some(given) = &self.executor_bin else {
            return super::sibling_executor().context("no --executor-bin given");
        };
        let bin = std::path::absolute(given)
            .with_context(|| format!("--executor-bin {}", given.display()))?;
        let meta =
            std::fs::metadata(&bin).with_context(|| format!("--executor-bin {}", bin.display()))?;
        anyhow::ensure!(
            meta.is_file() && meta.permissions().mode() & 0o111 != 0,
            "--executor-bin {}: not an executable file",
            bin.display()
        );
        Ok(bin)
    }

    /// The cgroup parent, given or chosen (see `--cgroup-parent`).
    pub fn cgroup_parent(&self) -> anyhow::Result<CgroupParent> {
        if let Some(given) = self.cgroup_parent.as_deref().filter(|&p| p != AUTO_PARENT) {
            return CgroupParent::new(given).context("--cgroup-parent");
        }
        if let Some(recorded) = taskgate_engine::recorded_cgroup_parent(self.data_dir()) {
            if recorded.exists() {
                tracing::info!(parent = %recorded, "cgroup parent: where this data dir's tasks live");
                return Ok(recorded);
            }
        }
        let choice = taskgate_executor::auto_parent().context("choosing the cgroup parent")?;
        // Said, not warned: the shipped unit without a DelegateSubgroup=
        // drop-in is the usual case, and its dedicated parent works.
        tracing::info!("cgroup parent: {choice}");
        Ok(choice.parent().clone())
    }

    /// The engine's configuration; its fault points are `faults` (see
    /// [`taskgate_faults::Faults`]; empty in a build without them).
    pub fn engine_config(&self, faults: Faults) -> anyhow::Result<EngineConfig> {
        Ok(EngineConfig {
            data_dir: self.data_dir().clone(),
            executor_bin: self.executor_bin()?,
            chroot_env: self.chroot_env()?,
            default_user: self.default_user()?,
            pids_max: self.pids_max.unwrap_or(DEFAULT_PIDS_MAX),
            keep_finished: self
                .keep_finished
                .map_or(taskgate_engine::DEFAULT_KEEP_FINISHED, |n| {
                    usize::try_from(n).unwrap_or(usize::MAX)
                }),
            clock: std::sync::Arc::new(taskgate_engine::clock::SystemClock::default()),
            restart_seed: self.restart_seed.unwrap_or_else(|| {
                let seed = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
                    ^ u64::from(std::process::id());
                tracing::info!(seed, "restart jitter seed (replay with --restart-seed)");
                seed
            }),
            cgroup_parent: self.cgroup_parent()?,
            // The harness's agents are given their executors' faults.
            executor_faults: taskgate_executor::ExecutorFaults::from_env(),
            faults,
        })
    }

    /// The engine, with its cgroup parent claimed, reaching `faults`.
    pub fn open_engine(&self, faults: Faults) -> anyhow::Result<Engine> {
        super::require_root()?;
        Ok(Engine::open(self.engine_config(faults)?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: AgentArgs,
    }

    fn agent(extra: &[&str]) -> AgentArgs {
        let fixed = [
            "t",
            "--executor-bin",
            "/bin/true",
            "--cgroup-parent",
            "/tg-test",
        ];
        let args = fixed.iter().chain(extra).copied();
        Cli::try_parse_from(args).expect("arguments parse").agent
    }

    /// The agent's own options a `run` given to a running agent names
    /// (they are the agent's, set when it started).
    #[test]
    fn the_agents_own_options_given_are_named() {
        assert_eq!(
            agent(&[]).agents_own_given(),
            ["--executor-bin", "--cgroup-parent"]
        );
        let given = agent(&["--user", "root", "--pids-max", "9", "--chroot-env", "/usr"]);
        assert_eq!(
            given.agents_own_given(),
            [
                "--chroot-env",
                "--user",
                "--pids-max",
                "--executor-bin",
                "--cgroup-parent"
            ]
        );
    }

    /// A relative data dir is taken from where the agent starts, not from
    /// wherever a task's paths are later resolved; a chroot_env entry no
    /// task could start with is refused at the start, not at each launch
    /// (where it failed every task, a restart at a time).
    #[test]
    fn paths_are_made_absolute_or_refused_at_the_start() {
        let relative = agent(&["--data-dir", "tg"]);
        let refused: Vec<bool> = [["--chroot-env", "usr"], ["--chroot-env", "/no/such/dir"]]
            .iter()
            .map(|env| agent(env).engine_config(Faults::default()).is_err())
            .collect();
        assert!(
            relative.data_dir().path().is_absolute() && refused == [true, true],
            "data dir {}, refused {refused:?}",
            relative.data_dir().display()
        );
    }

    /// `pids.max` takes at most the kernel's pid limit (4,194,304): an
    /// agent given more started, and each task then failed at launch.
    #[test]
    fn a_pids_limit_beyond_the_kernels_is_refused_as_typed() {
        let parsed = Cli::try_parse_from(["t", "--pids-max", "4194305"]);
        assert!(parsed.is_err(), "--pids-max 4194305 was taken");
        let most = Cli::try_parse_from(["t", "--pids-max", "4194304"]);
        assert!(most.is_ok(), "--pids-max 4194304 was refused");
    }

    /// An executor binary given that is not there was taken, and every
    /// launch then failed, a restart at a time.
    #[test]
    fn an_executor_binary_that_is_not_there_is_refused_at_the_start() {
        let args = [
            "t",
            "--executor-bin",
            "/no/such/taskgate-executor",
            "--cgroup-parent",
            "/tg-test",
        ];
        let agent = Cli::try_parse_from(args).expect("arguments parse").agent;
        let config = agent.engine_config(Faults::default());
        assert!(config.is_err(), "/no/such/taskgate-executor was taken");
    }

    /// A `run` submitted to a running agent warns of each agent option it
    /// cannot apply: one typed with its default's value too (the agent may
    /// have started with another).
    #[test]
    fn an_agent_option_typed_with_its_default_is_named() {
        let given = agent(&["--user", "nobody", "--pids-max", "256"]).agents_own_given();
        assert!(
            given.contains(&"--user") && given.contains(&"--pids-max"),
            "{given:?}"
        );
    }
}
