//! The job model: what a jobspec describes, as the engine runs it and as
//! the state database keeps it. Parsing it from HCL is `jobspec`'s work.

pub mod exec_limits;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use taskgate_executor::{KillSignal, LogConfig};

/// Nomad's prefix for a task's `meta` entries in its environment.
pub const META_PREFIX: &str = "NOMAD_META_";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub name: String,
    /// Nomad's job version: an in-place update must carry a newer one, so a
    /// late or repeated update is never applied twice.
    #[serde(default)]
    pub version: u64,
    /// Records written before jobs had a type ran with batch semantics.
    #[serde(default = "JobType::before_types")]
    pub job_type: JobType,
    pub groups: Vec<Group>,
}

/// What a task may change in an in-place update (Nomad applies these to
/// a running allocation): its runner takes them between attempts, so they
/// hold from its next restart decision and its next attempt. Any other
/// change needs a new allocation.
pub const IN_PLACE_FIELDS: [&str; 6] = [
    "env",
    "meta",
    "restart",
    "kill_timeout",
    "shutdown_delay",
    "logs",
];

/// Whether `name` can be handed to `execve` as an environment name.
pub fn is_execable_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

/// Why an update's job cannot be applied to a running allocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotInPlace {
    #[error("job version {offered} is not newer than the running version {running}")]
    NotNewer { running: u64, offered: u64 },
    #[error("the update changes {what}, which only a new allocation can take (in place: {})", IN_PLACE_FIELDS.join(", "))]
    Destructive { what: String },
    #[error("task {task:?}: its command, args, env and meta would take {size} bytes; execve takes at most {allowed} here")]
    TooLarge {
        task: String,
        size: usize,
        allowed: usize,
    },
    #[error(
        "task {task:?}: {what} {name:?} cannot be exec'd: a name must not be empty or hold `=` or NUL, a value must not hold NUL"
    )]
    Unexecable {
        task: String,
        what: &'static str,
        name: String,
    },
}

/// A group a job lacks, named with the groups it has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job {job:?} has no group {group:?} (its groups: {})", .groups.join(", "))]
pub struct NoSuchGroup {
    pub job: String,
    pub group: String,
    pub groups: Vec<String>,
}

impl Job {
    /// The group named `name`, or the first: the one a placement runs.
    pub fn group(&self, name: Option<&str>) -> Result<&Group, NoSuchGroup> {
        let found = match name {
            Some(name) => self.groups.iter().find(|g| g.name == name),
            None => self.groups.first(),
        };
        found.ok_or_else(|| NoSuchGroup {
            job: self.name.clone(),
            group: name.unwrap_or_default().to_string(),
            groups: self.groups.iter().map(|g| g.name.clone()).collect(),
        })
    }

    /// Checks that `new` updates this job's group `group` in place: a newer
    /// version whose tasks (the same, in the same order) differ only in
    /// [`IN_PLACE_FIELDS`].
    pub fn check_in_place(&self, group: &str, new: &Job) -> Result<(), NotInPlace> {
        if new.version <= self.version {
            return Err(NotInPlace::NotNewer {
                running: self.version,
                offered: new.version,
            });
        }
        let destructive = |what: String| Err(NotInPlace::Destructive { what });
        if (&new.name, new.job_type) != (&self.name, self.job_type) {
            return destructive("the job's name or type".into());
        }
        let tasks =
            |job: &Job| (job.groups.iter().find(|g| g.name == group)).map(|g| g.tasks.clone());
        let (Some(old), Some(new)) = (tasks(self), tasks(new)) else {
            return destructive(format!("group {group:?}'s presence"));
        };
        let names = |tasks: &[Task]| tasks.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
        if names(&old) != names(&new) {
            return destructive(format!("group {group:?}'s tasks"));
        }
        if let Some(problem) = new.iter().find_map(Task::exec_problem) {
            return Err(problem);
        }
        for (old, new) in old.iter().zip(&new) {
            if let Some(field) = old
                .fields_changed_by(new)
                .into_iter()
                .find(|f| !IN_PLACE_FIELDS.contains(&f.as_str()))
            {
                return destructive(format!("task {:?}'s {field}", old.name));
            }
        }
        Ok(())
    }
}

/// Nomad's job type: what a task's successful exit means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobType {
    /// Runs until stopped: a task that exits 0 is restarted, as one that
    /// failed is, and its restarts count against the policy.
    #[default]
    Service,
    /// Runs to completion: a task that exits 0 is done.
    Batch,
}

impl JobType {
    fn before_types() -> JobType {
        JobType::Batch
    }

    /// Nomad's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            JobType::Service => "service",
            JobType::Batch => "batch",
        }
    }

    /// Whether `task` is restarted after it exits 0 (Nomad's restart
    /// tracker's `onSuccess`): service tasks are, batch tasks are not;
    /// sidecars always are, poststop tasks never, whatever the type.
    pub fn restarts_on_success(self, task: &Task) -> bool {
        match &task.lifecycle {
            Some(Lifecycle {
                hook: LifecycleHook::Poststop,
                ..
            }) => false,
            Some(Lifecycle { sidecar, .. }) => *sidecar,
            None => self == JobType::Service,
        }
    }

    /// Nomad's restart policy for a task group that sets none.
    pub fn default_restart(self) -> RestartPolicy {
        let (attempts, interval) = match self {
            JobType::Service => (2, Duration::from_secs(30 * 60)),
            JobType::Batch => (3, Duration::from_secs(24 * 60 * 60)),
        };
        RestartPolicy {
            attempts,
            interval,
            delay: Duration::from_secs(15),
            mode: RestartMode::Fail,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    pub tasks: Vec<Task>,
}

impl Task {
    /// Why no `execve` could start this task as it is, if none could: its
    /// command, args, env and meta beyond the kernel's limit, or an env or
    /// meta entry that cannot be exec'd.
    pub fn exec_problem(&self) -> Option<NotInPlace> {
        let (size, allowed) = self.exec_size();
        if size > allowed {
            return Some(NotInPlace::TooLarge {
                task: self.name.clone(),
                size,
                allowed,
            });
        }
        let names =
            (self.env.iter().map(|e| ("env", e))).chain(self.meta.iter().map(|m| ("meta", m)));
        for (what, (name, value)) in names {
            if !is_execable_name(name) || value.contains('\0') {
                return Some(NotInPlace::Unexecable {
                    task: self.name.clone(),
                    what,
                    name: name.clone(),
                });
            }
        }
        None
    }
}

impl Group {
    /// What makes the group's tasks unusable: none at all, a name that
    /// cannot be a task dir (the shared dir's among them), two tasks of one
    /// name (one task dir for both), two leaders, a task no `execve` could
    /// start ([`Task::exec_problem`]). The jobspec parser refuses each at
    /// its line; a group built as data (a `Submit` on the control socket)
    /// is held to them here.
    pub fn task_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.tasks.is_empty() {
            problems.push("no task".to_string());
        }
        let mut seen = std::collections::BTreeSet::new();
        for task in &self.tasks {
            problems.extend(task.exec_problem().map(|p| p.to_string()));
            if let Some(problem) = taskgate_executor::task_name_problem(&task.name) {
                problems.push(format!("task name {:?} {problem}", task.name));
            }
            if !seen.insert(task.name.as_str()) {
                problems.push(format!("two tasks named {:?}", task.name));
            }
        }
        let leaders: Vec<&str> = (self.tasks.iter())
            .filter(|t| t.leader)
            .map(|t| t.name.as_str())
            .collect();
        if leaders.len() > 1 {
            problems.push(format!("more than one leader: {leaders:?}"));
        }
        problems
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Nomad's task `meta`: seen by the task as `NOMAD_META_<key>`.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
    pub resources: Resources,
    pub leader: bool,
    pub lifecycle: Option<Lifecycle>,
    pub kill_timeout: Duration,
    pub kill_signal: KillSignal,
    /// How long the kill signal is held back once the task is told to die
    /// (Nomad's `shutdown_delay`): time for whoever talks to it to notice.
    #[serde(default)]
    pub shutdown_delay: Duration,
    pub restart: RestartPolicy,
    pub logs: Logs,
    pub user: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// CPU share in MHz, as in Nomad.
    pub cpu: u64,
    pub memory_mb: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lifecycle {
    pub hook: LifecycleHook,
    pub sidecar: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LifecycleHook {
    Prestart,
    Poststart,
    Poststop,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartPolicy {
    pub attempts: u32,
    pub interval: Duration,
    pub delay: Duration,
    pub mode: RestartMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RestartMode {
    Fail,
    Delay,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Logs {
    pub max_files: u32,
    /// At most [`Logs::MAX_FILE_SIZE_MB`].
    pub max_file_size_mb: u64,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpu: 100,
            memory_mb: 300,
        }
    }
}

impl Logs {
    /// The largest file size whose byte count the executor can be told.
    pub const MAX_FILE_SIZE_MB: u64 = u64::MAX >> 20;

    /// What the executor's log rotation is told.
    pub fn config(&self) -> LogConfig {
        LogConfig {
            max_files: self.max_files,
            max_file_size_bytes: self.max_file_size_mb * 1024 * 1024,
        }
    }
}

impl Default for Logs {
    fn default() -> Self {
        Logs {
            max_files: 10,
            max_file_size_mb: 10,
        }
    }
}

impl Task {
    /// A main (non-lifecycle) task with every optional setting at its default.
    pub fn new(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> Task {
        Task {
            name: name.into(),
            command: command.into(),
            args,
            env: BTreeMap::new(),
            meta: BTreeMap::new(),
            resources: Resources::default(),
            leader: false,
            lifecycle: None,
            kill_timeout: Duration::from_secs(5),
            kill_signal: KillSignal::SIGINT,
            shutdown_delay: Duration::ZERO,
            restart: JobType::default().default_restart(),
            logs: Logs::default(),
            user: None,
        }
    }

    /// What the task's command, args, env and meta take of `execve`'s
    /// ARG_MAX, and what it may take here (ARG_MAX less the engine's own
    /// variables).
    pub fn exec_size(&self) -> (usize, usize) {
        use exec_limits as limits;
        let meta = (self.meta.iter()).map(|(k, v)| format!("{META_PREFIX}{k}={v}"));
        let env: Vec<String> = (self.env.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .chain(meta)
            .collect();
        let size = limits::exec_size(
            std::iter::once(self.command.as_str())
                .chain(self.args.iter().map(String::as_str))
                .chain(env.iter().map(String::as_str)),
        );
        let allowed = limits::arg_max().saturating_sub(limits::ENGINE_ENV_RESERVE);
        (size, allowed)
    }

    /// The names of the fields `new` gives another value.
    pub fn fields_changed_by(&self, new: &Task) -> Vec<String> {
        let fields = |task: &Task| match serde_json::to_value(task) {
            Ok(serde_json::Value::Object(fields)) => fields,
            _ => unreachable!("a task serializes to an object"),
        };
        let (old, new) = (fields(self), fields(new));
        (old.iter())
            .filter(|(name, value)| new.get(*name) != Some(*value))
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn hook(&self) -> Option<LifecycleHook> {
        self.lifecycle.as_ref().map(|l| l.hook)
    }

    pub fn is_prestart(&self) -> bool {
        self.hook() == Some(LifecycleHook::Prestart)
    }

    pub fn is_poststart(&self) -> bool {
        self.hook() == Some(LifecycleHook::Poststart)
    }

    pub fn is_poststop(&self) -> bool {
        self.hook() == Some(LifecycleHook::Poststop)
    }

    pub fn is_sidecar(&self) -> bool {
        self.lifecycle.as_ref().is_some_and(|l| l.sidecar)
    }

    /// Main tasks are the ones without a `lifecycle` block.
    pub fn is_main(&self) -> bool {
        self.lifecycle.is_none()
    }
}

/// Tasks of `group` whose user does not exist on this host (under
/// `default_user` for tasks that name none): decidable only on the host
/// that will run them, so they are named as the group is placed, rather
/// than failing at start.
pub fn unknown_users(group: &Group, default_user: &str) -> Vec<String> {
    (group.tasks.iter())
        .filter_map(|t| {
            let user = t.user.as_deref().unwrap_or(default_user);
            let known = nix::unistd::User::from_name(user).ok().flatten().is_some();
            (!known).then(|| {
                format!(
                    "task {:?}: user {user:?} does not exist on this host",
                    t.name
                )
            })
        })
        .collect()
}

/// The job `taskgate run` uses without a file (identical to
/// `examples/sidecar.hcl`): a leader that prints a few lines and exits after
/// about a second, plus a poststart sidecar that runs until it is killed —
/// the alloc of docs/nomad-prestart-race-report.txt, whose sidecar starts once the leader runs.
pub fn builtin_default() -> Job {
    let sh = |script: &str| vec!["-c".to_owned(), script.to_owned()];
    let batch = JobType::Batch;
    let mut leader = Task::new(
        "leader",
        "/bin/sh",
        sh(r#"echo "leader: $GREETING"; sleep 1; echo "leader: done""#),
    );
    leader.leader = true;
    leader.restart = batch.default_restart();
    leader
        .env
        .insert("GREETING".to_owned(), "hello from taskgate".to_owned());
    leader.resources = Resources {
        cpu: 100,
        memory_mb: 64,
    };
    // The task is PID 1 of its namespace, which ignores signals it has no
    // handler for: the trap is what makes the stop signal end it promptly.
    let mut sidecar = Task::new(
        "sidecar",
        "/bin/sh",
        sh(
            r#"trap 'echo "sidecar: stopping"; exit 0' INT TERM; echo "sidecar: up"; sleep 1000 & wait"#,
        ),
    );
    sidecar.lifecycle = Some(Lifecycle {
        hook: LifecycleHook::Poststart,
        sidecar: true,
    });
    sidecar.resources = Resources {
        cpu: 50,
        memory_mb: 32,
    };
    sidecar.kill_timeout = Duration::from_secs(2);
    sidecar.restart = batch.default_restart();
    Job {
        name: "demo".to_owned(),
        version: 0,
        job_type: batch,
        groups: vec![Group {
            name: "app".to_owned(),
            tasks: vec![leader, sidecar],
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parser's default group passes; each way of naming its tasks
    /// unusably is told once.
    #[test]
    fn a_groups_unusable_task_names_are_told() {
        let group = || builtin_default().groups.remove(0);
        assert_eq!(group().task_problems(), Vec::<String>::new());
        let mut leaders = group();
        leaders.tasks.iter_mut().for_each(|t| t.leader = true);
        assert_eq!(leaders.task_problems().len(), 1, "two leaders");
        let mut bad = group();
        bad.tasks[1].name = "../x".into();
        assert_eq!(bad.task_problems().len(), 1, "a path for a name");
        let mut unexecable = group();
        unexecable.tasks[0].env.insert("A=B".into(), "c".into());
        assert_eq!(unexecable.task_problems().len(), 1, "an env name with =");
        let mut empty = group();
        empty.tasks.clear();
        assert_eq!(empty.task_problems(), ["no task"]);
    }

    #[test]
    fn log_sizes_are_mebibytes() {
        let logs = Logs {
            max_files: 3,
            max_file_size_mb: 5,
        };
        let config = logs.config();
        assert_eq!(config.max_files, 3);
        assert_eq!(config.max_file_size_bytes, 5 * 1024 * 1024);
    }
}
