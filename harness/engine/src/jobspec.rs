//! A Nomad-style HCL jobspec subset: one `job` with groups of `exec` tasks.
//!
//! Parsing goes through `hcl::edit` rather than `hcl::from_str` because the
//! edit parser keeps byte spans on every block, attribute and expression, so
//! each semantic error can point at `file:line:col` like a syntax error does.

mod duration;
pub mod limits;

pub use duration::parse_duration;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hcl::edit::expr::{Expression, UnaryOperator};
use hcl::edit::structure::{Attribute, Block, Body, Structure};
use hcl::edit::Span;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub name: String,
    pub groups: Vec<Group>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    pub tasks: Vec<Task>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub resources: Resources,
    pub leader: bool,
    pub lifecycle: Option<Lifecycle>,
    pub kill_timeout: Duration,
    pub kill_signal: String,
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

/// Nomad's defaults for service jobs.
impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            attempts: 2,
            interval: Duration::from_secs(30 * 60),
            delay: Duration::from_secs(15),
            mode: RestartMode::Fail,
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
            resources: Resources::default(),
            leader: false,
            lifecycle: None,
            kill_timeout: Duration::from_secs(5),
            kill_signal: "SIGINT".to_owned(),
            restart: RestartPolicy::default(),
            logs: Logs::default(),
            user: None,
        }
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

#[derive(Debug, thiserror::Error)]
pub enum JobspecError {
    /// A syntax or validation error at a 1-based position in the source.
    #[error("{file}:{line}:{col}: {message}")]
    Invalid {
        file: String,
        line: usize,
        col: usize,
        message: String,
    },
    #[error("cannot read job file {}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

type Result<T, E = JobspecError> = std::result::Result<T, E>;

/// Parses and validates a jobspec; `file_name` only labels error messages.
pub fn parse(source: &str, file_name: &str) -> Result<Job, JobspecError> {
    let cx = Cx {
        src: source,
        file: file_name,
    };
    if let Some(at) = limits::too_deep(source) {
        return Err(cx.error(
            Some(at..at + 1),
            format!(
                "nested more than {} levels deep (blocks, lists, strings and templates count)",
                limits::MAX_NESTING
            ),
        ));
    }
    let body = hcl::edit::parser::parse_body(source).map_err(|e| JobspecError::Invalid {
        file: file_name.to_owned(),
        line: e.location().line(),
        col: e.location().column(),
        message: format!("syntax error: {}", e.message()),
    })?;
    cx.job(&body)
}

pub fn parse_file(path: &Path) -> Result<Job, JobspecError> {
    let source = std::fs::read_to_string(path).map_err(|source| JobspecError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse(&source, &path.display().to_string())
}

/// Tasks whose user does not exist on this host (under `default_user` for
/// tasks that name none): decidable only on the host that will run them,
/// so `taskgate run` asks before submitting, rather than failing at start.
pub fn unknown_users(job: &Job, default_user: &str) -> Vec<String> {
    job.groups
        .iter()
        .flat_map(|g| &g.tasks)
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
/// the report's alloc, whose sidecar starts once the leader runs.
pub fn builtin_default() -> Job {
    let sh = |script: &str| vec!["-c".to_owned(), script.to_owned()];
    let mut leader = Task::new(
        "leader",
        "/bin/sh",
        sh(r#"echo "leader: $GREETING"; sleep 1; echo "leader: done""#),
    );
    leader.leader = true;
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
    Job {
        name: "demo".to_owned(),
        groups: vec![Group {
            name: "app".to_owned(),
            tasks: vec![leader, sidecar],
        }],
    }
}

/// What a body may contain, for unknown-name and duplicate checks.
struct Schema {
    attrs: &'static [&'static str],
    /// Blocks that take one name label and may repeat.
    named: &'static [&'static str],
    /// Unlabeled blocks that may appear at most once.
    single: &'static [&'static str],
}

const TOP_LEVEL: Schema = Schema {
    attrs: &[],
    named: &["job"],
    single: &[],
};
const JOB: Schema = Schema {
    attrs: &[],
    named: &["group"],
    single: &[],
};
const GROUP: Schema = Schema {
    attrs: &[],
    named: &["task"],
    single: &["restart"],
};
const TASK: Schema = Schema {
    attrs: &["driver", "leader", "kill_timeout", "kill_signal", "user"],
    named: &[],
    single: &["config", "env", "resources", "lifecycle", "restart", "logs"],
};
const CONFIG: Schema = Schema {
    attrs: &["command", "args"],
    named: &[],
    single: &[],
};
const RESOURCES: Schema = Schema {
    attrs: &["cpu", "memory"],
    named: &[],
    single: &[],
};
const LIFECYCLE: Schema = Schema {
    attrs: &["hook", "sidecar"],
    named: &[],
    single: &[],
};
const RESTART: Schema = Schema {
    attrs: &["attempts", "interval", "delay", "mode"],
    named: &[],
    single: &[],
};
const LOGS: Schema = Schema {
    attrs: &["max_files", "max_file_size"],
    named: &[],
    single: &[],
};

/// Parsing context: the source text turns spans into line/column positions.
struct Cx<'a> {
    src: &'a str,
    file: &'a str,
}

impl Cx<'_> {
    fn error(&self, span: Option<Range<usize>>, message: impl Into<String>) -> JobspecError {
        let offset = span.map_or(0, |s| s.start).min(self.src.len());
        let before = &self.src[..offset];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        JobspecError::Invalid {
            file: self.file.to_owned(),
            line: self.line_of(offset),
            col: before[line_start..].chars().count() + 1,
            message: message.into(),
        }
    }

    fn line_of(&self, offset: usize) -> usize {
        self.src[..offset.min(self.src.len())].matches('\n').count() + 1
    }

    fn line_of_span(&self, span: Option<Range<usize>>) -> usize {
        self.line_of(span.map_or(0, |s| s.start))
    }

    /// Rejects unknown, misplaced and repeated attributes/blocks so that a
    /// typo never silently falls back to a default. (The HCL parser itself
    /// already rejects a repeated attribute key as a syntax error.)
    fn check_body(&self, body: &Body, within: &str, schema: &Schema) -> Result<()> {
        let mut first_line: BTreeMap<&str, usize> = BTreeMap::new();
        for structure in body.iter() {
            match structure {
                Structure::Attribute(attr) => {
                    let key = attr.key.as_str();
                    if !schema.attrs.contains(&key) {
                        let message = if schema.named.contains(&key) || schema.single.contains(&key)
                        {
                            format!("`{key}` is a block, not an attribute: write `{key} {{ ... }}`")
                        } else {
                            unknown("attribute", key, within, schema.attrs)
                        };
                        return Err(self.error(attr.key.span(), message));
                    }
                }
                Structure::Block(block) => {
                    let ident = block.ident.as_str();
                    let labels = if schema.named.contains(&ident) {
                        1
                    } else if schema.single.contains(&ident) {
                        0
                    } else {
                        let message = if schema.attrs.contains(&ident) {
                            format!("`{ident}` is an attribute, not a block: write `{ident} = ...`")
                        } else {
                            let blocks: Vec<&str> =
                                schema.named.iter().chain(schema.single).copied().collect();
                            unknown("block", ident, within, &blocks)
                        };
                        return Err(self.error(block.ident.span(), message));
                    };
                    if block.labels.len() != labels {
                        let message = if labels == 1 {
                            format!("`{ident}` block needs exactly one name label, like `{ident} \"name\" {{ ... }}`")
                        } else {
                            format!("`{ident}` block takes no labels")
                        };
                        return Err(self.error(block.ident.span(), message));
                    }
                    if labels == 0 {
                        let line = self.line_of_span(block.span());
                        if let Some(first) = first_line.insert(ident, line) {
                            return Err(self.error(
                                block.ident.span(),
                                format!(
                                    "duplicate `{ident}` block in {within} (first on line {first})"
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The single label of a `job`/`group`/`task` block. Names end up in
    /// directory paths, hence no `/` and no `..`.
    fn name(&self, block: &Block, kind: &str) -> Result<String> {
        let label = &block.labels[0];
        let name = label.as_str();
        match taskgate_executor::component_problem(name) {
            Some(problem) => {
                Err(self.error(label.span(), format!("{kind} name {name:?} {problem}")))
            }
            None => Ok(name.to_owned()),
        }
    }

    fn job(&self, body: &Body) -> Result<Job> {
        self.check_body(body, "the top level", &TOP_LEVEL)?;
        let mut jobs = body.get_blocks("job");
        let job = jobs.next().ok_or_else(|| {
            self.error(
                None,
                "no `job` block found; expected `job \"name\" { ... }`",
            )
        })?;
        if let Some(extra) = jobs.next() {
            return Err(self.error(
                extra.ident.span(),
                format!(
                    "only one `job` block is allowed (the first is on line {})",
                    self.line_of_span(job.span())
                ),
            ));
        }
        let name = self.name(job, "job")?;
        let within = format!("job {name:?}");
        self.check_body(&job.body, &within, &JOB)?;
        let mut groups: Vec<Group> = Vec::new();
        let mut first_line = BTreeMap::new();
        for block in job.body.get_blocks("group") {
            let group = self.group(block)?;
            let line = self.line_of_span(block.span());
            if let Some(first) = first_line.insert(group.name.clone(), line) {
                return Err(self.error(
                    block.labels[0].span(),
                    format!(
                        "duplicate group name {:?} in {within} (first defined on line {first})",
                        group.name
                    ),
                ));
            }
            groups.push(group);
        }
        if groups.is_empty() {
            return Err(self.error(
                job.ident.span(),
                format!("{within} has no `group` blocks; at least one is required"),
            ));
        }
        Ok(Job { name, groups })
    }

    fn group(&self, block: &Block) -> Result<Group> {
        let name = self.name(block, "group")?;
        let within = format!("group {name:?}");
        self.check_body(&block.body, &within, &GROUP)?;
        let restart = match block.body.get_blocks("restart").next() {
            Some(restart) => self.restart(restart, RestartPolicy::default())?,
            None => RestartPolicy::default(),
        };
        let mut tasks: Vec<Task> = Vec::new();
        let mut first_line = BTreeMap::new();
        let mut leader: Option<String> = None;
        for task_block in block.body.get_blocks("task") {
            let task = self.task(task_block, &restart)?;
            let line = self.line_of_span(task_block.span());
            if let Some(first) = first_line.insert(task.name.clone(), line) {
                return Err(self.error(
                    task_block.labels[0].span(),
                    format!(
                        "duplicate task name {:?} in {within} (first defined on line {first})",
                        task.name
                    ),
                ));
            }
            if task.leader {
                if let Some(previous) = &leader {
                    return Err(self.error(
                        task_block.body.get_attribute("leader").and_then(Span::span),
                        format!(
                            "task {:?} sets `leader = true` but task {previous:?} is already the leader of {within}; at most one task per group may be the leader",
                            task.name
                        ),
                    ));
                }
                leader = Some(task.name.clone());
            }
            tasks.push(task);
        }
        if tasks.is_empty() {
            return Err(self.error(
                block.ident.span(),
                format!("{within} has no `task` blocks; at least one is required"),
            ));
        }
        Ok(Group { name, tasks })
    }

    fn task(&self, block: &Block, group_restart: &RestartPolicy) -> Result<Task> {
        let name = self.name(block, "task")?;
        let within = format!("task {name:?}");
        let body = &block.body;
        self.check_body(body, &within, &TASK)?;

        let driver = body.get_attribute("driver").ok_or_else(|| {
            self.error(
                block.ident.span(),
                format!("{within} is missing required attribute `driver` (use driver = \"exec\")"),
            )
        })?;
        let driver_name = self.string(driver)?;
        if driver_name != "exec" {
            return Err(self.error(
                driver.value.span(),
                format!("unsupported driver {driver_name:?}: only \"exec\" is supported"),
            ));
        }

        let config = body.get_blocks("config").next().ok_or_else(|| {
            self.error(
                block.ident.span(),
                format!("{within} is missing its `config` block; `config.command` is required"),
            )
        })?;
        self.check_body(&config.body, "config", &CONFIG)?;
        let command_attr = config.body.get_attribute("command").ok_or_else(|| {
            self.error(
                config.ident.span(),
                format!("missing required attribute `command` in config of {within}"),
            )
        })?;
        let command = self.exec_string(command_attr, &self.string(command_attr)?)?;
        if command.is_empty() {
            return Err(self.error(command_attr.value.span(), "`command` must not be empty"));
        }
        if !command.starts_with('/') {
            return Err(self.error(
                command_attr.value.span(),
                format!("command {command:?} must be an absolute path inside the task root"),
            ));
        }
        let mut task = Task::new(name, command, Vec::new());
        if let Some(args) = config.body.get_attribute("args") {
            task.args = self.string_list(args)?;
            for arg in &task.args {
                self.exec_string(args, arg)?;
            }
        }

        if let Some(env) = body.get_blocks("env").next() {
            task.env = self.env(env)?;
        }
        self.check_exec_size(&task, block, config)?;
        if let Some(resources) = body.get_blocks("resources").next() {
            task.resources = self.resources(resources)?;
        }
        if let Some(attr) = body.get_attribute("leader") {
            task.leader = self.boolean(attr)?;
        }
        if let Some(lifecycle) = body.get_blocks("lifecycle").next() {
            task.lifecycle = Some(self.lifecycle(lifecycle)?);
        }
        if let Some(attr) = body.get_attribute("kill_timeout") {
            task.kill_timeout = self.duration(attr)?;
        }
        if let Some(attr) = body.get_attribute("kill_signal") {
            let signal = self.string(attr)?;
            // The executor's rule, so both accept the same names; stored
            // in its full form.
            task.kill_signal = match taskgate_executor::parse_signal(&signal) {
                Ok(parsed) => parsed.as_str().to_owned(),
                Err(_) => {
                    return Err(self.error(
                        attr.value.span(),
                        format!(
                            "unknown kill_signal {signal:?}: expected a signal name like \"SIGTERM\" or \"TERM\""
                        ),
                    ))
                }
            };
        }
        if let Some(attr) = body.get_attribute("user") {
            let user = self.string(attr)?;
            if user.is_empty() {
                return Err(self.error(attr.value.span(), "`user` must not be empty"));
            }
            task.user = Some(user);
        }
        // Like Nomad, a task-level restart block overrides the group's policy
        // field by field rather than replacing it wholesale.
        task.restart = match body.get_blocks("restart").next() {
            Some(restart) => self.restart(restart, group_restart.clone())?,
            None => group_restart.clone(),
        };
        if let Some(logs) = body.get_blocks("logs").next() {
            task.logs = self.logs(logs)?;
        }
        Ok(task)
    }

    fn env(&self, block: &Block) -> Result<BTreeMap<String, String>> {
        let mut env = BTreeMap::new();
        for structure in block.body.iter() {
            let attr = match structure {
                Structure::Attribute(attr) => attr,
                Structure::Block(inner) => {
                    return Err(self.error(
                        inner.ident.span(),
                        format!(
                            "unexpected block `{}` in env; env holds `NAME = \"value\"` attributes",
                            inner.ident.as_str()
                        ),
                    ))
                }
            };
            // HCL users write `PORT = 8080`; the environment only has strings.
            let value = match &attr.value {
                Expression::String(s) => s.value().clone(),
                Expression::Number(n) => n.value().to_string(),
                Expression::Bool(b) => b.value().to_string(),
                other => {
                    return Err(self.error(
                        other.span(),
                        format!(
                            "env `{}` must be a string, number or boolean, got {}",
                            attr.key.as_str(),
                            kind(other)
                        ),
                    ))
                }
            };
            let key = attr.key.as_str();
            if key.is_empty() || key.contains(['=', '\0']) {
                return Err(self.error(
                    attr.key.span(),
                    format!("env name {key:?} cannot be exec'd: it must not be empty or hold `=` or NUL"),
                ));
            }
            env.insert(key.to_owned(), self.exec_string(attr, &value)?);
        }
        Ok(env)
    }

    fn resources(&self, block: &Block) -> Result<Resources> {
        self.check_body(&block.body, "resources", &RESOURCES)?;
        let mut resources = Resources::default();
        if let Some(attr) = block.body.get_attribute("cpu") {
            resources.cpu = self.at_least_one(attr, "MHz")?;
        }
        if let Some(attr) = block.body.get_attribute("memory") {
            resources.memory_mb = self.at_least_one(attr, "MB")?;
        }
        Ok(resources)
    }

    fn lifecycle(&self, block: &Block) -> Result<Lifecycle> {
        self.check_body(&block.body, "lifecycle", &LIFECYCLE)?;
        let attr = block.body.get_attribute("hook").ok_or_else(|| {
            self.error(
                block.ident.span(),
                "missing required attribute `hook` in lifecycle (prestart, poststart or poststop)",
            )
        })?;
        let hook = match self.string(attr)?.as_str() {
            "prestart" => LifecycleHook::Prestart,
            "poststart" => LifecycleHook::Poststart,
            "poststop" => LifecycleHook::Poststop,
            other => {
                return Err(self.error(
                    attr.value.span(),
                    format!("invalid lifecycle hook {other:?}: expected \"prestart\", \"poststart\" or \"poststop\""),
                ))
            }
        };
        let sidecar = match block.body.get_attribute("sidecar") {
            Some(attr) => self.boolean(attr)?,
            None => false,
        };
        Ok(Lifecycle { hook, sidecar })
    }

    fn restart(&self, block: &Block, mut policy: RestartPolicy) -> Result<RestartPolicy> {
        self.check_body(&block.body, "restart", &RESTART)?;
        let body = &block.body;
        if let Some(attr) = body.get_attribute("attempts") {
            policy.attempts = self.u32(attr)?;
        }
        if let Some(attr) = body.get_attribute("interval") {
            policy.interval = self.duration(attr)?;
        }
        if let Some(attr) = body.get_attribute("delay") {
            policy.delay = self.duration(attr)?;
        }
        if let Some(attr) = body.get_attribute("mode") {
            policy.mode = match self.string(attr)?.as_str() {
                "fail" => RestartMode::Fail,
                "delay" => RestartMode::Delay,
                other => {
                    return Err(self.error(
                        attr.value.span(),
                        format!("invalid restart mode {other:?}: expected \"fail\" or \"delay\""),
                    ))
                }
            };
        }
        Ok(policy)
    }

    fn logs(&self, block: &Block) -> Result<Logs> {
        self.check_body(&block.body, "logs", &LOGS)?;
        let mut logs = Logs::default();
        if let Some(attr) = block.body.get_attribute("max_files") {
            logs.max_files = self.u32(attr)?;
            if logs.max_files == 0 {
                return Err(self.error(attr.value.span(), "`max_files` must be at least 1"));
            }
        }
        if let Some(attr) = block.body.get_attribute("max_file_size") {
            logs.max_file_size_mb = self.at_least_one(attr, "MB")?;
        }
        Ok(logs)
    }

    /// `value` (of `attr`) as `execve` can take it: no NUL, at most
    /// MAX_ARG_STRLEN bytes.
    fn exec_string(&self, attr: &Attribute, value: &str) -> Result<String> {
        let problem = if value.contains('\0') {
            Some("contains a NUL byte".to_string())
        } else if value.len() >= limits::MAX_ARG_STRLEN {
            Some(format!(
                "is {} bytes long; the kernel takes at most {} per string",
                value.len(),
                limits::MAX_ARG_STRLEN - 1
            ))
        } else {
            None
        };
        match problem {
            Some(problem) => Err(self.error(
                attr.value.span(),
                format!("`{}` cannot be exec'd: it {problem}", attr.key.as_str()),
            )),
            None => Ok(value.to_owned()),
        }
    }

    /// The task's command, arguments and environment must fit the kernel's
    /// ARG_MAX, less what the engine adds to the environment.
    fn check_exec_size(&self, task: &Task, block: &Block, config: &Block) -> Result<()> {
        let env: Vec<String> = task.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let size = limits::exec_size(
            std::iter::once(task.command.as_str())
                .chain(task.args.iter().map(String::as_str))
                .chain(env.iter().map(String::as_str)),
        );
        let allowed = limits::arg_max().saturating_sub(limits::ENGINE_ENV_RESERVE);
        if size <= allowed {
            return Ok(());
        }
        let span = config
            .body
            .get_attribute("args")
            .and_then(|a| a.value.span())
            .or_else(|| block.ident.span());
        Err(self.error(
            span,
            format!(
                "task {:?}: its command, args and env take {size} bytes; execve takes at most {allowed} here (ARG_MAX {} less {} for the engine's own variables)",
                task.name,
                limits::arg_max(),
                limits::ENGINE_ENV_RESERVE
            ),
        ))
    }

    fn type_error(&self, attr: &Attribute, expected: &str) -> JobspecError {
        self.error(
            attr.value.span(),
            format!(
                "`{}` must be {expected}, got {}",
                attr.key.as_str(),
                kind(&attr.value)
            ),
        )
    }

    fn string(&self, attr: &Attribute) -> Result<String> {
        match &attr.value {
            Expression::String(s) => Ok(s.value().clone()),
            _ => Err(self.type_error(attr, "a string")),
        }
    }

    fn boolean(&self, attr: &Attribute) -> Result<bool> {
        match &attr.value {
            Expression::Bool(b) => Ok(*b.value()),
            _ => Err(self.type_error(attr, "a boolean (true or false)")),
        }
    }

    fn uint(&self, attr: &Attribute) -> Result<u64> {
        let whole = || self.type_error(attr, "a non-negative whole number");
        match &attr.value {
            Expression::Number(n) => n.value().as_u64().ok_or_else(whole),
            // `-1` parses as negation applied to a number literal.
            Expression::UnaryOp(op)
                if *op.operator.value() == UnaryOperator::Neg
                    && matches!(op.expr, Expression::Number(_)) =>
            {
                Err(whole())
            }
            _ => Err(self.type_error(attr, "a number")),
        }
    }

    fn u32(&self, attr: &Attribute) -> Result<u32> {
        u32::try_from(self.uint(attr)?).map_err(|_| {
            self.error(
                attr.value.span(),
                format!(
                    "`{}` is too large (at most {})",
                    attr.key.as_str(),
                    u32::MAX
                ),
            )
        })
    }

    fn at_least_one(&self, attr: &Attribute, unit: &str) -> Result<u64> {
        let value = self.uint(attr)?;
        if value == 0 {
            return Err(self.error(
                attr.value.span(),
                format!("`{}` must be at least 1 ({unit})", attr.key.as_str()),
            ));
        }
        Ok(value)
    }

    fn duration(&self, attr: &Attribute) -> Result<Duration> {
        let text = match &attr.value {
            Expression::String(s) => s.value(),
            _ => return Err(self.type_error(attr, "a duration string like \"5s\"")),
        };
        parse_duration(text).map_err(|e| {
            self.error(
                attr.value.span(),
                format!("invalid duration {text:?} for `{}`: {e}", attr.key.as_str()),
            )
        })
    }

    fn string_list(&self, attr: &Attribute) -> Result<Vec<String>> {
        let Expression::Array(array) = &attr.value else {
            return Err(self.type_error(attr, "a list of strings"));
        };
        array
            .iter()
            .enumerate()
            .map(|(i, element)| match element {
                Expression::String(s) => Ok(s.value().clone()),
                other => Err(self.error(
                    other.span(),
                    format!(
                        "`{}` must be a list of strings, but element {i} is {}",
                        attr.key.as_str(),
                        kind(other)
                    ),
                )),
            })
            .collect()
    }
}

/// Describes an expression's type for "must be X, got Y" messages.
fn kind(expr: &Expression) -> &'static str {
    match expr {
        Expression::Null(_) => "null",
        Expression::Bool(_) => "a boolean",
        Expression::Number(_) => "a number",
        Expression::String(_) => "a string",
        Expression::Array(_) => "a list",
        Expression::Object(_) => "an object",
        Expression::StringTemplate(_) | Expression::HeredocTemplate(_) => {
            "a template (interpolation is not supported)"
        }
        Expression::Variable(_) => "a bare identifier (missing quotes?)",
        _ => "an expression",
    }
}

fn unknown(what: &str, name: &str, within: &str, expected: &[&str]) -> String {
    let mut message = format!("unknown {what} `{name}` in {within}");
    if let Some(suggestion) = closest(name, expected) {
        message.push_str(&format!("; did you mean `{suggestion}`?"));
    } else if expected.is_empty() {
        message.push_str(&format!("; no {what}s are allowed here"));
    } else {
        message.push_str(&format!(" (expected one of: {})", expected.join(", ")));
    }
    message
}

/// Typo suggestion: the nearest candidate within two edits, or one the name
/// abbreviates (`mem` for `memory`).
fn closest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(name, c), *c))
        .filter(|(d, c)| (*d <= 2 && *d < name.len()) || (name.len() >= 3 && c.starts_with(name)))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const SIDECAR_HCL: &str = include_str!("../../../examples/sidecar.hcl");
    const LIFECYCLE_HCL: &str = include_str!("../../../examples/lifecycle.hcl");

    fn examples_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
    }

    fn task<'a>(job: &'a Job, name: &str) -> &'a Task {
        job.groups[0]
            .tasks
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no task {name:?}"))
    }

    /// Wraps `extra` in a valid task whose `driver` is on line 4 and whose
    /// `config` is on line 5, so `extra` starts on line 6.
    fn with_task(extra: &str) -> String {
        format!(
            "job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"exec\"\n      config {{ command = \"/bin/true\" }}\n{extra}\n    }}\n  }}\n}}\n"
        )
    }

    fn expect_error(source: &str) -> (usize, usize, String) {
        match parse(source, "job.hcl") {
            Err(JobspecError::Invalid {
                file,
                line,
                col,
                message,
            }) => {
                assert_eq!(file, "job.hcl");
                (line, col, message)
            }
            other => panic!("expected a validation error, got {other:?}\n{source}"),
        }
    }

    #[test]
    fn sidecar_example_is_the_builtin_default() {
        assert_eq!(
            parse(SIDECAR_HCL, "sidecar.hcl").unwrap(),
            builtin_default()
        );
    }

    #[test]
    fn builtin_default_is_a_leader_with_a_poststart_sidecar() {
        let job = builtin_default();
        let tasks = &job.groups[0].tasks;
        assert_eq!(tasks.len(), 2);
        let leader = task(&job, "leader");
        assert!(leader.leader && leader.is_main() && !leader.is_sidecar());
        let sidecar = task(&job, "sidecar");
        assert!(sidecar.is_poststart() && sidecar.is_sidecar() && !sidecar.is_main());
        assert!(!sidecar.leader);
    }

    #[test]
    fn lifecycle_example_parses_every_hook() {
        let job = parse_file(&examples_dir().join("lifecycle.hcl")).unwrap();
        assert_eq!(job.name, "lifecycle");
        let names: Vec<&str> = job.groups[0]
            .tasks
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(
            names,
            ["init", "log-shipper", "server", "announce", "cleanup"]
        );

        let init = task(&job, "init");
        assert!(init.is_prestart() && !init.is_sidecar());
        assert_eq!(init.env["DATA_DIR"], "/tmp/taskgate-data");
        let shipper = task(&job, "log-shipper");
        assert!(shipper.is_prestart() && shipper.is_sidecar());
        assert_eq!(shipper.kill_signal, "SIGTERM");
        assert_eq!(shipper.kill_timeout, Duration::from_secs(1));
        assert_eq!(
            shipper.resources,
            Resources {
                cpu: 50,
                memory_mb: 32
            }
        );
        assert!(task(&job, "announce").is_poststart());
        assert_eq!(task(&job, "announce").args, ["announce: server started"]);
        let cleanup = task(&job, "cleanup");
        assert!(cleanup.is_poststop() && !cleanup.is_sidecar());
        assert_eq!(cleanup.kill_timeout, Duration::from_secs(90));

        let server = task(&job, "server");
        assert!(server.is_main() && server.leader);
        assert_eq!(server.user.as_deref(), Some("nobody"));
        assert_eq!(server.command, "/bin/sh");
        assert_eq!(server.args[0], "-c");
        assert_eq!(
            server.logs,
            Logs {
                max_files: 3,
                max_file_size_mb: 5
            }
        );
        // The task's restart block overrides the group's field by field.
        assert_eq!(
            server.restart,
            RestartPolicy {
                attempts: 1,
                interval: Duration::from_secs(600),
                delay: Duration::from_millis(250),
                mode: RestartMode::Delay,
            }
        );
        assert_eq!(
            init.restart,
            RestartPolicy {
                attempts: 3,
                interval: Duration::from_secs(600),
                delay: Duration::from_millis(250),
                mode: RestartMode::Fail,
            }
        );
    }

    #[test]
    fn minimal_task_gets_nomad_defaults() {
        let job = parse(&with_task(""), "job.hcl").unwrap();
        let t = task(&job, "t");
        assert_eq!(*t, Task::new("t", "/bin/true", Vec::new()));
        assert_eq!(
            t.resources,
            Resources {
                cpu: 100,
                memory_mb: 300
            }
        );
        assert_eq!(t.kill_timeout, Duration::from_secs(5));
        assert_eq!(t.kill_signal, "SIGINT");
        assert_eq!(
            t.restart,
            RestartPolicy {
                attempts: 2,
                interval: Duration::from_secs(30 * 60),
                delay: Duration::from_secs(15),
                mode: RestartMode::Fail,
            }
        );
        assert_eq!(
            t.logs,
            Logs {
                max_files: 10,
                max_file_size_mb: 10
            }
        );
        assert!(t.is_main() && !t.leader && t.user.is_none() && t.env.is_empty());
    }

    #[test]
    fn env_numbers_and_booleans_become_strings() {
        let job = parse(
            &with_task("      env {\n        PORT = 8080\n        DEBUG = true\n      }"),
            "job.hcl",
        )
        .unwrap();
        let env = &task(&job, "t").env;
        assert_eq!(env["PORT"], "8080");
        assert_eq!(env["DEBUG"], "true");
    }

    #[test]
    fn jobs_round_trip_through_serde() {
        let job = parse(LIFECYCLE_HCL, "lifecycle.hcl").unwrap();
        let json = serde_json::to_string(&job).unwrap();
        assert_eq!(serde_json::from_str::<Job>(&json).unwrap(), job);
    }

    #[test]
    fn error_display_is_file_line_col_message() {
        let err = parse(&with_task("      drivr = \"exec\""), "web.hcl").unwrap_err();
        assert_eq!(
            err.to_string(),
            "web.hcl:6:7: unknown attribute `drivr` in task \"t\"; did you mean `driver`?"
        );
    }

    #[test]
    fn parse_file_labels_errors_with_the_path() {
        let dir = std::env::temp_dir().join(format!("taskgate-jobspec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.hcl");
        std::fs::write(&path, "job \"j\" {}\n").unwrap();
        let err = parse_file(&path).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            err.starts_with(&format!("{}:1:1: ", path.display())),
            "{err}"
        );
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let path = examples_dir().join("does-not-exist.hcl");
        let err = parse_file(&path).unwrap_err();
        assert!(matches!(err, JobspecError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("does-not-exist.hcl"), "{err}");
    }

    #[rstest]
    #[case::unknown_task_attribute(
        "      drivr = \"exec\"",
        6,
        "unknown attribute `drivr` in task \"t\"; did you mean `driver`?"
    )]
    #[case::unknown_block(
        "      network {\n      }",
        6,
        "unknown block `network` in task \"t\" (expected one of: config, env"
    )]
    #[case::duplicate_attribute(
        "      driver = \"exec\"",
        6,
        "syntax error: invalid attribute; expected unique attribute key"
    )]
    #[case::duplicate_block(
        "      config { command = \"/bin/false\" }",
        6,
        "duplicate `config` block in task \"t\" (first on line 5)"
    )]
    #[case::block_as_attribute(
        "      resources = { cpu = 1 }",
        6,
        "`resources` is a block, not an attribute"
    )]
    #[case::attribute_as_block(
        "      leader {\n      }",
        6,
        "`leader` is an attribute, not a block"
    )]
    #[case::labeled_singleton(
        "      restart \"x\" {\n      }",
        6,
        "`restart` block takes no labels"
    )]
    #[case::memory_string(
        "      resources {\n        memory = \"64\"\n      }",
        7,
        "`memory` must be a number, got a string"
    )]
    #[case::memory_zero(
        "      resources {\n        cpu = 10\n        memory = 0\n      }",
        8,
        "`memory` must be at least 1 (MB)"
    )]
    #[case::memory_negative(
        "      resources {\n        memory = -5\n      }",
        7,
        "`memory` must be a non-negative whole number"
    )]
    #[case::memory_float(
        "      resources {\n        memory = 1.5\n      }",
        7,
        "`memory` must be a non-negative whole number"
    )]
    #[case::memory_abbreviated(
        "      resources {\n        mem = 64\n      }",
        7,
        "unknown attribute `mem` in resources; did you mean `memory`?"
    )]
    #[case::restart_mode(
        "      restart {\n        mode = \"retry\"\n      }",
        7,
        "invalid restart mode \"retry\": expected \"fail\" or \"delay\""
    )]
    #[case::restart_attempts_overflow(
        "      restart {\n        attempts = 5000000000\n      }",
        7,
        "`attempts` is too large"
    )]
    #[case::restart_interval(
        "      restart {\n        interval = \"30 minutes\"\n      }",
        7,
        "invalid duration \"30 minutes\" for `interval`"
    )]
    #[case::lifecycle_hook(
        "      lifecycle {\n        hook = \"prestrat\"\n      }",
        7,
        "invalid lifecycle hook \"prestrat\""
    )]
    #[case::lifecycle_without_hook(
        "      lifecycle {\n        sidecar = true\n      }",
        6,
        "missing required attribute `hook` in lifecycle"
    )]
    #[case::lifecycle_sidecar_string(
        "      lifecycle {\n        hook = \"prestart\"\n        sidecar = \"yes\"\n      }",
        8,
        "`sidecar` must be a boolean"
    )]
    #[case::kill_timeout_garbage(
        "      kill_timeout = \"5 seconds\"",
        6,
        "invalid duration \"5 seconds\" for `kill_timeout`: unknown unit"
    )]
    #[case::kill_timeout_number(
        "      kill_timeout = 5",
        6,
        "`kill_timeout` must be a duration string like \"5s\", got a number"
    )]
    #[case::kill_signal("      kill_signal = \"SIGFOO\"", 6, "unknown kill_signal \"SIGFOO\"")]
    #[case::leader_string(
        "      leader = \"true\"",
        6,
        "`leader` must be a boolean (true or false), got a string"
    )]
    #[case::user_empty("      user = \"\"", 6, "`user` must not be empty")]
    #[case::user_unquoted("      user = nobody", 6, "got a bare identifier (missing quotes?)")]
    #[case::env_list(
        "      env {\n        FOO = [\"a\"]\n      }",
        7,
        "env `FOO` must be a string, number or boolean, got a list"
    )]
    #[case::env_template(
        "      env {\n        FOO = \"${bar}\"\n      }",
        7,
        "interpolation is not supported"
    )]
    #[case::env_block(
        "      env {\n        nested {\n        }\n      }",
        7,
        "unexpected block `nested` in env"
    )]
    #[case::logs_zero(
        "      logs {\n        max_files = 0\n      }",
        7,
        "`max_files` must be at least 1"
    )]
    #[case::logs_size_zero(
        "      logs {\n        max_file_size = 0\n      }",
        7,
        "`max_file_size` must be at least 1 (MB)"
    )]
    fn task_errors_point_at_the_offending_line(
        #[case] extra: &str,
        #[case] line: usize,
        #[case] fragment: &str,
    ) {
        let (got_line, _, message) = expect_error(&with_task(extra));
        assert!(message.contains(fragment), "{message:?} lacks {fragment:?}");
        assert_eq!(got_line, line, "{message}");
    }

    #[rstest]
    #[case::empty_file("", 1, "no `job` block found")]
    #[case::two_jobs(
        "job \"a\" {\n}\njob \"b\" {\n}\n",
        3,
        "only one `job` block is allowed (the first is on line 1)"
    )]
    #[case::top_level_attribute(
        "name = \"x\"\n",
        1,
        "unknown attribute `name` in the top level; no attributes are allowed here"
    )]
    #[case::unlabeled_job("job {\n}\n", 1, "`job` block needs exactly one name label")]
    #[case::no_groups("job \"j\" {\n}\n", 1, "job \"j\" has no `group` blocks")]
    #[case::no_tasks(
        "job \"j\" {\n  group \"g\" {\n  }\n}\n",
        2,
        "group \"g\" has no `task` blocks"
    )]
    #[case::syntax_error(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver \"exec\"\n",
        4,
        "syntax error"
    )]
    #[case::unclosed_block("job \"j\" {\n  group \"g\" {\n", 2, "syntax error")]
    #[case::driver_missing(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      config { command = \"/x\" }\n    }\n  }\n}\n",
        3,
        "task \"t\" is missing required attribute `driver`"
    )]
    #[case::driver_docker(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"docker\"\n      config { command = \"/x\" }\n    }\n  }\n}\n",
        4,
        "unsupported driver \"docker\": only \"exec\" is supported"
    )]
    #[case::config_missing(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n    }\n  }\n}\n",
        3,
        "task \"t\" is missing its `config` block"
    )]
    #[case::command_missing(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        args = []\n      }\n    }\n  }\n}\n",
        5,
        "missing required attribute `command` in config"
    )]
    #[case::command_typo(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        comand = \"/bin/sh\"\n      }\n    }\n  }\n}\n",
        6,
        "unknown attribute `comand` in config; did you mean `command`?"
    )]
    #[case::command_empty(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        command = \"\"\n      }\n    }\n  }\n}\n",
        6,
        "`command` must not be empty"
    )]
    #[case::args_not_a_list(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        command = \"/bin/echo\"\n        args = \"hi\"\n      }\n    }\n  }\n}\n",
        7,
        "`args` must be a list of strings, got a string"
    )]
    #[case::args_element(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        command = \"/bin/echo\"\n        args = [\n          \"a\",\n          1,\n        ]\n      }\n    }\n  }\n}\n",
        9,
        "`args` must be a list of strings, but element 1 is a number"
    )]
    #[case::task_name_slash(
        "job \"j\" {\n  group \"g\" {\n    task \"a/b\" {\n    }\n  }\n}\n",
        3,
        "task name \"a/b\" must not contain `/`"
    )]
    #[case::task_name_dotdot(
        "job \"j\" {\n  group \"g\" {\n    task \"..\" {\n    }\n  }\n}\n",
        3,
        "task name \"..\" must not contain `..`"
    )]
    #[case::task_name_empty(
        "job \"j\" {\n  group \"g\" {\n    task \"\" {\n    }\n  }\n}\n",
        3,
        "task name \"\" must not be empty"
    )]
    #[case::duplicate_task(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n    }\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n    }\n  }\n}\n",
        7,
        "duplicate task name \"t\" in group \"g\" (first defined on line 3)"
    )]
    #[case::duplicate_group(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n    }\n  }\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n    }\n  }\n}\n",
        8,
        "duplicate group name \"g\" in job \"j\" (first defined on line 2)"
    )]
    #[case::two_leaders(
        "job \"j\" {\n  group \"g\" {\n    task \"a\" {\n      driver = \"exec\"\n      leader = true\n      config { command = \"/x\" }\n    }\n    task \"b\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n      leader = true\n    }\n  }\n}\n",
        11,
        "task \"b\" sets `leader = true` but task \"a\" is already the leader of group \"g\""
    )]
    #[case::group_restart_mode(
        "job \"j\" {\n  group \"g\" {\n    restart {\n      mode = \"never\"\n    }\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n    }\n  }\n}\n",
        4,
        "invalid restart mode \"never\""
    )]
    #[case::group_attribute(
        "job \"j\" {\n  group \"g\" {\n    count = 2\n  }\n}\n",
        3,
        "unknown attribute `count` in group \"g\"; no attributes are allowed here"
    )]
    fn structure_errors_point_at_the_offending_line(
        #[case] source: &str,
        #[case] line: usize,
        #[case] fragment: &str,
    ) {
        let (got_line, _, message) = expect_error(source);
        assert!(message.contains(fragment), "{message:?} lacks {fragment:?}");
        assert_eq!(got_line, line, "{message}");
    }

    #[test]
    fn semantic_errors_report_the_column_of_the_value() {
        let source = with_task("      kill_timeout = \"soon\"");
        assert_eq!(expect_error(&source).1, 22);
    }

    #[rstest]
    #[case("comand", &["command", "args"], Some("command"))]
    #[case("mem", &["cpu", "memory"], Some("memory"))]
    #[case("drvier", &["driver", "leader"], Some("driver"))]
    #[case("xyz", &["cpu", "memory"], None)]
    #[case("a", &["args"], None)]
    fn suggests_close_names(
        #[case] name: &str,
        #[case] candidates: &[&'static str],
        #[case] expected: Option<&str>,
    ) {
        assert_eq!(closest(name, candidates), expected);
    }
}

/// What the kernel and the executor refuse is refused here first, at its
/// line, before anything runs.
#[cfg(test)]
mod exec_limits {
    use super::*;
    use rstest::rstest;

    /// A job whose one task's config and task body lines are these.
    fn with(config: &str, body: &str) -> String {
        format!(
            "job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"exec\"\n      config {{\n{config}\n      }}\n{body}\n    }}\n  }}\n}}\n"
        )
    }

    fn error_of(source: &str) -> (usize, String) {
        match parse(source, "job.hcl") {
            Err(JobspecError::Invalid { line, message, .. }) => (line, message),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[rstest]
    #[case::relative_command(with("command = \"sh\"", ""), 6, "must be an absolute path")]
    #[case::nul_in_command(with("command = \"/bin/s\\u0000h\"", ""), 6, "contains a NUL byte")]
    #[case::nul_in_an_arg(
        with("command = \"/bin/sh\"\nargs = [\"a\\u0000\"]", ""),
        7,
        "contains a NUL byte"
    )]
    #[case::nul_in_env(
        with("command = \"/bin/sh\"", "env {\n  A = \"x\\u0000\"\n}"),
        9,
        "contains a NUL byte"
    )]
    #[case::unknown_signal(
        with("command = \"/bin/sh\"", "kill_signal = \"NOPE\""),
        8,
        "unknown kill_signal"
    )]
    fn refused_with_their_line(
        #[case] source: String,
        #[case] line: usize,
        #[case] fragment: &str,
    ) {
        let (got, message) = error_of(&source);
        assert!(message.contains(fragment), "{message}");
        assert_eq!(got, line, "{message}");
    }

    #[test]
    fn task_names_follow_the_executors_rule() {
        let source = with("command = \"/bin/sh\"", "").replace("task \"t\"", "task \".\"");
        let (line, message) = error_of(&source);
        assert_eq!(line, 3);
        assert!(message.contains("task name \".\""), "{message}");
    }

    #[test]
    fn unknown_users_are_named_before_the_job_runs() {
        let mut job = parse(
            &with("command = \"/bin/sh\"", "user = \"no-such-user-xyz\""),
            "j",
        )
        .unwrap();
        assert_eq!(
            unknown_users(&job, "root"),
            ["task \"t\": user \"no-such-user-xyz\" does not exist on this host"]
        );
        job.groups[0].tasks[0].user = None;
        assert!(unknown_users(&job, "root").is_empty());
    }

    #[test]
    fn a_signal_is_named_with_or_without_its_prefix() {
        let job = parse(
            &with("command = \"/bin/sh\"", "kill_signal = \"TERM\""),
            "j",
        )
        .unwrap();
        assert_eq!(job.groups[0].tasks[0].kill_signal, "SIGTERM");
    }

    #[test]
    fn a_megabyte_argument_is_refused_before_it_runs() {
        let big = "x".repeat(1 << 20);
        let (line, message) = error_of(&with(
            &format!("command = \"/bin/sh\"\nargs = [\"{big}\"]"),
            "",
        ));
        assert_eq!(line, 7);
        assert!(message.contains("at most 131071 per string"), "{message}");
    }

    #[test]
    fn argv_and_env_together_must_fit_arg_max() {
        let chunk = "y".repeat(100_000);
        let args: Vec<String> = (0..(limits::arg_max() / 100_000 + 1))
            .map(|_| format!("\"{chunk}\""))
            .collect();
        let (line, message) = error_of(&with(
            &format!("command = \"/bin/sh\"\nargs = [{}]", args.join(", ")),
            "",
        ));
        assert_eq!(line, 7);
        assert!(message.contains("execve takes at most"), "{message}");
    }

    #[test]
    fn thousands_of_nested_blocks_are_an_error_not_a_crash() {
        let source = format!("{}{}", "job \"j\" {\n".repeat(5000), "}\n".repeat(5000));
        let (line, message) = error_of(&source);
        assert_eq!(line, limits::MAX_NESTING + 1);
        assert!(message.contains("nested more than 32 levels"), "{message}");
    }
}
