//! The walk over a parsed HCL body: each block and attribute checked against
//! its schema and turned into the job model, every error at its position.

use super::limits;
use super::schema::*;
use super::suggest::{kind, unknown};
use super::{parse_duration, JobspecError, Result};
use crate::job::*;
use hcl::edit::expr::{Expression, UnaryOperator};
use hcl::edit::structure::{Attribute, Block, Body, Structure};
use hcl::edit::Span;
use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Duration;
use taskgate_executor::KillSignal;

/// Parsing context: the source text turns spans into line/column positions.
pub struct Cx<'a> {
    pub src: &'a str,
    pub file: &'a str,
}

impl Cx<'_> {
    pub fn error(&self, span: Option<Range<usize>>, message: impl Into<String>) -> JobspecError {
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

    pub fn line_of_span(&self, span: Option<Range<usize>>) -> usize {
        self.line_of(span.map_or(0, |s| s.start))
    }

    /// Rejects unknown, misplaced and repeated attributes/blocks so that a
    /// typo never silently falls back to a default. (The HCL parser itself
    /// already rejects a repeated attribute key as a syntax error.)
    pub fn check_body(&self, body: &Body, within: &str, schema: &Schema) -> Result<()> {
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
                    let repeats = schema.repeated.contains(&ident);
                    let labels = if schema.named.contains(&ident) {
                        1
                    } else if repeats || schema.single.contains(&ident) {
                        0
                    } else {
                        let message = if schema.attrs.contains(&ident) {
                            format!("`{ident}` is an attribute, not a block: write `{ident} = ...`")
                        } else {
                            let blocks: Vec<&str> = (schema.named.iter())
                                .chain(schema.single)
                                .chain(schema.repeated)
                                .copied()
                                .collect();
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
                    if labels == 0 && !repeats {
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
        let problem = if kind == "task" {
            taskgate_executor::task_name_problem(name)
        } else {
            taskgate_executor::component_problem(name)
        };
        match problem {
            Some(problem) => {
                Err(self.error(label.span(), format!("{kind} name {name:?} {problem}")))
            }
            None => Ok(name.to_owned()),
        }
    }

    pub(super) fn job(&self, body: &Body) -> Result<Job> {
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
        self.job_block(job)
    }

    /// One `job "name" { ... }` block, wherever it stands.
    pub fn job_block(&self, job: &Block) -> Result<Job> {
        let name = self.name(job, "job")?;
        let within = format!("job {name:?}");
        self.check_body(&job.body, &within, &JOB)?;
        let job_type = match job.body.get_attribute("type") {
            Some(attr) => self.job_type(attr)?,
            None => JobType::default(),
        };
        let mut groups: Vec<Group> = Vec::new();
        let mut first_line = BTreeMap::new();
        for block in job.body.get_blocks("group") {
            let group = self.group(block, job_type)?;
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
        Ok(Job {
            name,
            version: 0,
            job_type,
            groups,
        })
    }

    fn job_type(&self, attr: &Attribute) -> Result<JobType> {
        match self.string(attr)?.as_str() {
            "service" => Ok(JobType::Service),
            "batch" => Ok(JobType::Batch),
            other => Err(self.error(
                attr.value.span(),
                format!(
                    "invalid job type {other:?}: expected \"service\" or \"batch\" \
                     (a client runs no \"system\" or \"sysbatch\" scheduling)"
                ),
            )),
        }
    }

    fn group(&self, block: &Block, job_type: JobType) -> Result<Group> {
        let name = self.name(block, "group")?;
        let within = format!("group {name:?}");
        self.check_body(&block.body, &within, &GROUP)?;
        let restart = match block.body.get_blocks("restart").next() {
            Some(restart) => self.restart(restart, job_type.default_restart())?,
            None => job_type.default_restart(),
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
            task.env = self.string_map(env, "env")?;
        }
        if let Some(meta) = body.get_blocks("meta").next() {
            task.meta = self.string_map(meta, "meta")?;
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
        if let Some(attr) = body.get_attribute("shutdown_delay") {
            task.shutdown_delay = self.duration(attr)?;
        }
        if let Some(attr) = body.get_attribute("kill_timeout") {
            task.kill_timeout = self.duration(attr)?;
        }
        if let Some(attr) = body.get_attribute("kill_signal") {
            let signal = self.string(attr)?;
            // The executor's rule, so both accept the same names; stored
            // in its full form.
            task.kill_signal = match KillSignal::parse(&signal) {
                Ok(parsed) => parsed,
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

    /// An `env` or `meta` block: names that can be exec'd (a meta entry is
    /// the task's `NOMAD_META_<key>`), with string values.
    fn string_map(&self, block: &Block, what: &str) -> Result<BTreeMap<String, String>> {
        let mut env = BTreeMap::new();
        for structure in block.body.iter() {
            let attr = match structure {
                Structure::Attribute(attr) => attr,
                Structure::Block(inner) => {
                    return Err(self.error(
                        inner.ident.span(),
                        format!(
                            "unexpected block `{}` in {what}; {what} holds `NAME = \"value\"` attributes",
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
                            "{what} `{}` must be a string, number or boolean, got {}",
                            attr.key.as_str(),
                            kind(other)
                        ),
                    ))
                }
            };
            let key = attr.key.as_str();
            if !is_execable_name(key) {
                return Err(self.error(
                    attr.key.span(),
                    format!("{what} name {key:?} cannot be exec'd: it must not be empty or hold `=` or NUL"),
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
            resources.memory_mb = self.megabytes(attr, taskgate_executor::MAX_MEMORY_MB)?;
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
            logs.max_file_size_mb = self.megabytes(attr, Logs::MAX_FILE_SIZE_MB)?;
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
        let (size, allowed) = task.exec_size();
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
                "task {:?}: its command, args, env and meta take {size} bytes; execve takes at most {allowed} here (ARG_MAX {} less {} for the engine's own variables)",
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

    pub fn string(&self, attr: &Attribute) -> Result<String> {
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

    pub fn u32(&self, attr: &Attribute) -> Result<u32> {
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

    /// A size in MB, from 1 to `most`.
    fn megabytes(&self, attr: &Attribute, most: u64) -> Result<u64> {
        let value = self.at_least_one(attr, "MB")?;
        if value > most {
            return Err(self.error(
                attr.value.span(),
                format!("`{}` is too large (at most {most} MB)", attr.key.as_str()),
            ));
        }
        Ok(value)
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
        Ok(self
            .string_items(attr)?
            .into_iter()
            .map(|(s, _)| s)
            .collect())
    }

    /// A list of strings, each with its span for errors about one element.
    pub fn string_items(&self, attr: &Attribute) -> Result<Vec<(String, Option<Range<usize>>)>> {
        let Expression::Array(array) = &attr.value else {
            return Err(self.type_error(attr, "a list of strings"));
        };
        array
            .iter()
            .enumerate()
            .map(|(i, element)| match element {
                Expression::String(s) => Ok((s.value().clone(), element.span())),
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
