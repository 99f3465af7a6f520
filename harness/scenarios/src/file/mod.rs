//! Scenario files: `scenario "name" { ... }` blocks in HCL, read with the
//! jobspec parser's own machinery (positions, schema checks, "did you
//! mean", the `job` block), so a mistake points at `file:line:col` like a
//! jobspec's does. A file holds one or more scenarios; any error fails the
//! whole file.

mod faults;
#[cfg(test)]
mod tests;

use crate::model::{Expect, Kind, KnownViolation, Scenario};
use std::collections::BTreeMap;
use taskgate_engine::jobspec::hcl::edit::structure::{Attribute, Block};
use taskgate_engine::jobspec::hcl::edit::Span;
use taskgate_engine::jobspec::hcl::{self, unknown, Cx, Schema};
use taskgate_engine::jobspec::{self, Job, JobspecError};
use taskgate_engine::ClientStatus;
use taskgate_oracle::invariant::{self, Invariant, ALL};

type Result<T> = std::result::Result<T, JobspecError>;

/// Reads the job file a scenario names (`job = "PATH"`, relative to the
/// scenario file): its name for error messages and its text, or why not.
pub type JobReader<'a> = dyn Fn(&str) -> std::result::Result<(String, String), String> + 'a;

const TOP: Schema = Schema {
    attrs: &[],
    named: &["scenario"],
    single: &[],
    repeated: &[],
};
const SCENARIO: Schema = Schema {
    attrs: &["about", "job"],
    named: &["job"],
    single: &["stop_race", "faults", "expect"],
    repeated: &[],
};
const STOP_RACE: Schema = Schema {
    attrs: &["task"],
    named: &[],
    single: &[],
    repeated: &[],
};
const EXPECT: Schema = Schema {
    attrs: &["status"],
    named: &[],
    single: &["known_violation"],
    repeated: &[],
};
const KNOWN_VIOLATION: Schema = Schema {
    attrs: &["bug", "invariant", "task"],
    named: &[],
    single: &[],
    repeated: &[],
};

/// The scenarios of one file, in the order it holds them.
pub fn parse(src: &str, file: &str, jobs: &JobReader) -> Result<Vec<Scenario>> {
    let cx = Cx { src, file };
    let body = hcl::parse_body(&cx)?;
    cx.check_body(&body, "a scenario file", &TOP)?;
    let mut scenarios: Vec<Scenario> = Vec::new();
    let mut first_line = BTreeMap::new();
    for block in body.get_blocks("scenario") {
        let scenario = self::scenario(&cx, block, jobs)?;
        let line = cx.line_of_span(block.span());
        if let Some(first) = first_line.insert(scenario.name.clone(), line) {
            return Err(cx.error(
                block.labels[0].span(),
                format!(
                    "duplicate scenario name {:?} (first defined on line {first})",
                    scenario.name
                ),
            ));
        }
        scenarios.push(scenario);
    }
    if scenarios.is_empty() {
        return Err(cx.error(
            None,
            "no `scenario` blocks found; expected `scenario \"name\" { ... }`",
        ));
    }
    Ok(scenarios)
}

fn scenario(cx: &Cx, block: &Block, jobs: &JobReader) -> Result<Scenario> {
    let label = &block.labels[0];
    let name = label.as_str().to_owned();
    // Replay tokens are `name@schedule` and `name#n:fingerprint`.
    if name.is_empty() || name.contains(['@', '#', ' ', '\'']) {
        return Err(cx.error(
            label.span(),
            format!("scenario name {name:?} must be non-empty, without `@`, `#`, spaces or quotes"),
        ));
    }
    let within = format!("scenario {name:?}");
    let body = &block.body;
    cx.check_body(body, &within, &SCENARIO)?;
    let about = match body.get_attribute("about") {
        Some(attr) => cx.string(attr)?,
        None => String::new(),
    };
    let job = job(cx, block, &within, jobs)?;
    let kind = match (
        body.get_blocks("stop_race").next(),
        body.get_blocks("faults").next(),
    ) {
        (Some(race), None) => stop_race(cx, race, &job)?,
        (None, Some(faults)) => Kind::Faults(faults::plan(cx, faults, &job)?),
        (Some(_), Some(faults)) => {
            return Err(cx.error(
                faults.ident.span(),
                format!(
                    "{within} has both `stop_race` and `faults`; a scenario is one or the other"
                ),
            ))
        }
        (None, None) => {
            return Err(cx.error(
                block.ident.span(),
                format!("{within} has neither a `stop_race` nor a `faults` block"),
            ))
        }
    };
    let expect = match body.get_blocks("expect").next() {
        Some(expect) => self::expect(cx, expect, &job)?,
        None => {
            return Err(cx.error(
                block.ident.span(),
                format!(
                    "{within} has no `expect` block; `expect {{ status = \"complete\" }}` at least"
                ),
            ))
        }
    };
    Ok(Scenario {
        name,
        about,
        job,
        kind,
        expect,
        file: None,
    })
}

/// `job = "PATH"` (a jobspec file) or an inline `job "name" { ... }`.
fn job(cx: &Cx, block: &Block, within: &str, jobs: &JobReader) -> Result<Job> {
    let mut inline = block.body.get_blocks("job");
    match (block.body.get_attribute("job"), inline.next()) {
        (Some(_), Some(job)) => Err(cx.error(
            job.ident.span(),
            format!("{within} has both `job = \"PATH\"` and an inline `job` block; keep one"),
        )),
        (Some(attr), None) => {
            let path = cx.string(attr)?;
            let (shown, text) = jobs(&path).map_err(|why| {
                cx.error(
                    attr.value.span(),
                    format!("cannot read job file {path:?}: {why}"),
                )
            })?;
            jobspec::parse(&text, &shown)
        }
        (None, Some(job)) => match inline.next() {
            Some(extra) => Err(cx.error(
                extra.ident.span(),
                format!("{within} has more than one `job` block"),
            )),
            None => cx.job_block(job),
        },
        (None, None) => Err(cx.error(
            block.ident.span(),
            format!("{within} has no job: write `job = \"PATH\"` or `job \"name\" {{ ... }}`"),
        )),
    }
}

fn stop_race(cx: &Cx, block: &Block, job: &Job) -> Result<Kind> {
    cx.check_body(&block.body, "stop_race", &STOP_RACE)?;
    let task = job_task(cx, required(cx, block, "task", "stop_race")?, job)?;
    Ok(Kind::StopRace { controlled: task })
}

/// A string attribute that names one of `job`'s tasks.
fn job_task(cx: &Cx, attr: &Attribute, job: &Job) -> Result<String> {
    let task = cx.string(attr)?;
    let tasks = task_names(job);
    if !tasks.contains(&task.as_str()) {
        let within = format!("job {:?}", job.name);
        return Err(cx.error(attr.value.span(), unknown("task", &task, &within, &tasks)));
    }
    Ok(task)
}

fn expect(cx: &Cx, block: &Block, job: &Job) -> Result<Expect> {
    cx.check_body(&block.body, "expect", &EXPECT)?;
    let attr = required(cx, block, "status", "expect")?;
    let status = choice(
        cx,
        attr,
        "status",
        &[
            ("complete", ClientStatus::Complete),
            ("failed", ClientStatus::Failed),
        ],
    )?;
    let known_violation = match block.body.get_blocks("known_violation").next() {
        Some(known) => {
            cx.check_body(&known.body, "known_violation", &KNOWN_VIOLATION)?;
            Some(KnownViolation {
                bug: cx.string(required(cx, known, "bug", "known_violation")?)?,
                invariant: invariant(cx, required(cx, known, "invariant", "known_violation")?)?,
                task: (known.body.get_attribute("task"))
                    .map(|attr| job_task(cx, attr, job))
                    .transpose()?,
            })
        }
        None => None,
    };
    Ok(Expect {
        status,
        known_violation,
    })
}

/// One of the oracle's invariants, by id: a marker naming none could never
/// show, so it would fail every run for a reason nobody meant.
fn invariant(cx: &Cx, attr: &Attribute) -> Result<Invariant> {
    let name = cx.string(attr)?;
    if let Ok(invariant) = name.parse() {
        return Ok(invariant);
    }
    let mut message = unknown("invariant", &name, "the oracle", &invariant::ids());
    if let Some(meant) = ALL.iter().find(|i| i.statement() == name) {
        message += &format!(" (invariants are named by id: `{meant}`)");
    }
    Err(cx.error(attr.value.span(), message))
}

fn task_names(job: &Job) -> Vec<&str> {
    (job.groups.iter())
        .flat_map(|g| &g.tasks)
        .map(|t| t.name.as_str())
        .collect()
}

fn required<'b>(cx: &Cx, block: &'b Block, key: &str, within: &str) -> Result<&'b Attribute> {
    block.body.get_attribute(key).ok_or_else(|| {
        cx.error(
            block.ident.span(),
            format!("missing required attribute `{key}` in {within}"),
        )
    })
}

/// A string attribute that names one of `options`.
fn choice<T: Copy>(cx: &Cx, attr: &Attribute, what: &str, options: &[(&str, T)]) -> Result<T> {
    let value = cx.string(attr)?;
    match options.iter().find(|(name, _)| *name == value) {
        Some((_, v)) => Ok(*v),
        None => {
            let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
            let within = format!("`{}`", attr.key.as_str());
            Err(cx.error(attr.value.span(), unknown(what, &value, &within, &names)))
        }
    }
}
