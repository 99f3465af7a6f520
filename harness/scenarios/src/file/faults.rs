//! The `faults` block: where the engine runs, when the stop comes, and the
//! cases, from `each` (one run per point) and `pairs` (one run per parked
//! point x event point) blocks. Point names may hold `*` wildcards, which
//! expand over the known points in their canonical order.

use super::{choice, required, task_names, Result};
use crate::model::{FaultCase, FaultPlan, Host, Restore, Then};
use std::ops::Range;
use taskgate_engine::jobspec::hcl::edit::structure::{Attribute, Block};
use taskgate_engine::jobspec::hcl::edit::Span;
use taskgate_engine::jobspec::hcl::{closest, unknown, Cx, Schema};
use taskgate_engine::jobspec::Job;
use taskgate_faults::points::{ALLOC_POINTS, RECORDED_TASK_POINTS, TASK_POINTS};
use taskgate_faults::{Action, Fault, Intervention, PointName};

const FAULTS: Schema = Schema {
    attrs: &["host", "restore", "then"],
    named: &[],
    single: &[],
    repeated: &["each", "pairs"],
};
const EACH: Schema = Schema {
    attrs: &["points", "action", "hit", "with", "restored_kill"],
    named: &[],
    single: &[],
    repeated: &[],
};
const PAIRS: Schema = Schema {
    attrs: &["park", "event", "at", "hit", "with"],
    named: &[],
    single: &[],
    repeated: &[],
};

pub(super) fn plan(cx: &Cx, block: &Block, job: &Job) -> Result<FaultPlan> {
    cx.check_body(&block.body, "faults", &FAULTS)?;
    let body = &block.body;
    let agent = match body.get_attribute("host") {
        Some(attr) => choice(cx, attr, "host", &[("process", false), ("agent", true)])?,
        None => false,
    };
    let restore = match body.get_attribute("restore") {
        Some(attr) if !agent => {
            return Err(cx.error(
                attr.key.span(),
                "`restore` applies only with `host = \"agent\"`",
            ))
        }
        Some(attr) => choice(
            cx,
            attr,
            "restore",
            &[("stop", Restore::Stop), ("run", Restore::Run)],
        )?,
        None => Restore::Stop,
    };
    let then = match body.get_attribute("then") {
        Some(attr) => choice(
            cx,
            attr,
            "then",
            &[
                ("stop-when-settled", Then::StopWhenSettled),
                ("stop-when-running", Then::StopWhenRunning),
                ("run-to-end", Then::RunToEnd),
            ],
        )?,
        None => Then::StopWhenSettled,
    };
    let points = Points::of(job);
    let mut cases = Vec::new();
    for block in body.iter().filter_map(|s| s.as_block()) {
        match block.ident.as_str() {
            "each" => cases.extend(each(cx, block, &points, agent)?),
            _ => cases.extend(pairs(cx, block, &points)?),
        }
    }
    if cases.is_empty() {
        return Err(cx.error(
            block.ident.span(),
            "`faults` has no cases: add an `each { ... }` or `pairs { ... }` block",
        ));
    }
    Ok(FaultPlan {
        cases,
        host: if agent {
            Host::Agent { restore }
        } else {
            Host::InProcess
        },
        then,
    })
}

/// One case per point, its fault alone (with the block's `with` faults);
/// with `restored_kill`, one per point and restored agent's kill point.
fn each(cx: &Cx, block: &Block, points: &Points, agent: bool) -> Result<Vec<FaultCase>> {
    cx.check_body(&block.body, "each", &EACH)?;
    let at = points.expand_all(cx, required(cx, block, "points", "each")?)?;
    let action = action(cx, required(cx, block, "action", "each")?)?;
    let (nth, with) = (hit(cx, block)?, with(cx, block, points)?);
    let restored_kills: Vec<Option<PointName>> = match block.body.get_attribute("restored_kill") {
        None => vec![None],
        Some(attr) if !agent => {
            return Err(cx.error(
                attr.key.span(),
                "`restored_kill` applies only with `host = \"agent\"`",
            ))
        }
        Some(attr) => (points.expand_all(cx, attr)?.into_iter())
            .map(Some)
            .collect(),
    };
    let mut cases = Vec::new();
    for point in at {
        for restored_kill in &restored_kills {
            cases.push(FaultCase {
                faults: std::iter::once(Fault {
                    point: point.clone(),
                    action: action.clone(),
                    nth,
                })
                .chain(with.iter().cloned())
                .collect(),
                pair: None,
                restored_kill: restored_kill.clone(),
            });
        }
    }
    Ok(cases)
}

/// One case per (p, q): an actor parked at p while `event` happens at q.
fn pairs(cx: &Cx, block: &Block, points: &Points) -> Result<Vec<FaultCase>> {
    cx.check_body(&block.body, "pairs", &PAIRS)?;
    let park = points.expand_all(cx, required(cx, block, "park", "pairs")?)?;
    let event_attr = required(cx, block, "event", "pairs")?;
    let event = action(cx, event_attr)?;
    if event == Action::Park {
        return Err(cx.error(
            event_attr.value.span(),
            "the `event` of `pairs` cannot be `park` (the held side already parks)",
        ));
    }
    let at = points.expand_all(cx, required(cx, block, "at", "pairs")?)?;
    let (nth, with) = (hit(cx, block)?, with(cx, block, points)?);
    let mut cases = Vec::new();
    for p in &park {
        for q in &at {
            let held = Fault {
                point: p.clone(),
                action: Action::Park,
                nth: 1,
            };
            // The event's side waits at q until the held side is parked at
            // p, so the pair happens in this order on any machine.
            let after_held = Fault {
                point: q.clone(),
                action: Action::AwaitHit {
                    point: p.clone(),
                    nth: 1,
                },
                nth,
            };
            let happens = Fault {
                point: q.clone(),
                action: event.clone(),
                nth,
            };
            cases.push(FaultCase {
                faults: [held, after_held, happens]
                    .into_iter()
                    .chain(with.iter().cloned())
                    .collect(),
                pair: Some((p.clone(), q.clone())),
                restored_kill: None,
            });
        }
    }
    Ok(cases)
}

fn hit(cx: &Cx, block: &Block) -> Result<u32> {
    let Some(attr) = block.body.get_attribute("hit") else {
        return Ok(1);
    };
    match cx.u32(attr)? {
        0 => Err(cx.error(
            attr.value.span(),
            "`hit` counts from 1 (the first time the point is reached)",
        )),
        n => Ok(n),
    }
}

/// Extra faults in `Fault` syntax, configured alongside every case.
fn with(cx: &Cx, block: &Block, points: &Points) -> Result<Vec<Fault>> {
    let Some(attr) = block.body.get_attribute("with") else {
        return Ok(Vec::new());
    };
    let mut faults = Vec::new();
    for (text, span) in cx.string_items(attr)? {
        let fault: Fault = text
            .parse()
            .map_err(|e: String| cx.error(span.clone(), action_hint(e, &text)))?;
        points.check(cx, &fault.point, span.clone())?;
        if let Action::AwaitHit { point, .. } = &fault.action {
            points.check_awaited(cx, point, span.clone())?;
        }
        faults.push(fault);
    }
    Ok(faults)
}

fn action(cx: &Cx, attr: &Attribute) -> Result<Action> {
    let text = cx.string(attr)?;
    text.parse()
        .map_err(|e| cx.error(attr.value.span(), action_hint(e, &text)))
}

/// Adds "did you mean" to an action's parse error when its name is close
/// to a known one.
fn action_hint(message: String, text: &str) -> String {
    let name = text.rsplit_once('=').map_or(text, |(_, a)| a).trim();
    let head = name.split_once('(').map_or(name, |(h, _)| h);
    let mut names = vec!["park", "delay", "error", "panic", "kill", "await"];
    names.extend(Intervention::ALL.map(Intervention::as_str));
    match closest(head, &names) {
        Some(near) if near != head => format!("{message}; did you mean `{near}`?"),
        _ => message,
    }
}

/// The points a scenario's job can name: per-task points scoped by one of
/// its tasks, alloc-wide points bare.
struct Points<'a> {
    job: &'a Job,
    tasks: Vec<&'a str>,
    task_points: Vec<String>,
}

impl<'a> Points<'a> {
    fn of(job: &'a Job) -> Points<'a> {
        let task_points = (TASK_POINTS.iter().map(|p| p.to_string()))
            .chain(taskgate_engine::hook_points())
            .collect();
        Points {
            job,
            tasks: task_names(job),
            task_points,
        }
    }

    fn expand_all(&self, cx: &Cx, attr: &Attribute) -> Result<Vec<PointName>> {
        let mut all = Vec::new();
        for (text, span) in cx.string_items(attr)? {
            let name: PointName = text.parse().map_err(|e| cx.error(span.clone(), e))?;
            all.extend(self.expand(cx, &name, span)?);
        }
        if all.is_empty() {
            return Err(cx.error(
                attr.value.span(),
                format!("`{}` names no points", attr.key.as_str()),
            ));
        }
        Ok(all)
    }

    /// A point a fault may await: one it could act at, or a task's point
    /// that only records (an executor's record of its task's exit).
    fn check_awaited(&self, cx: &Cx, name: &PointName, span: Option<Range<usize>>) -> Result<()> {
        match name.scope() {
            Some(task)
                if RECORDED_TASK_POINTS.contains(&name.point.as_str())
                    && self.tasks.contains(&task) =>
            {
                Ok(())
            }
            _ => self.check(cx, name, span),
        }
    }

    /// A point name exactly as the engine reaches it (no wildcard).
    fn check(&self, cx: &Cx, name: &PointName, span: Option<Range<usize>>) -> Result<()> {
        if name.point.contains('*') {
            return Err(cx.error(span, format!("`{name}`: no wildcards in a single fault")));
        }
        self.expand(cx, name, span).map(drop)
    }

    fn expand(
        &self,
        cx: &Cx,
        name: &PointName,
        span: Option<Range<usize>>,
    ) -> Result<Vec<PointName>> {
        let pattern = name.point.as_str();
        let alloc: Vec<&str> = ALLOC_POINTS
            .into_iter()
            .filter(|p| glob(pattern, p))
            .collect();
        let task: Vec<&str> = (self.task_points.iter())
            .map(String::as_str)
            .filter(|p| glob(pattern, p))
            .collect();
        let (matched, candidates, kind) = match name.scope() {
            Some(scope) if !self.tasks.contains(&scope) => {
                let within = format!("job {:?}", self.job.name);
                return Err(cx.error(span, unknown("task", scope, &within, &self.tasks)));
            }
            Some(_) if task.is_empty() && !alloc.is_empty() => {
                return Err(cx.error(
                    span,
                    format!("`{pattern}` is alloc-wide: write it without a task, `{pattern}`"),
                ))
            }
            Some(_) => (
                task,
                self.task_points.iter().map(String::as_str).collect(),
                "per-task",
            ),
            None if alloc.is_empty() && !task.is_empty() => {
                return Err(cx.error(
                    span,
                    format!(
                    "`{pattern}` is a per-task point: scope it with a task, like `{}:{pattern}`",
                    self.tasks[0]
                ),
                ))
            }
            None => (alloc, ALLOC_POINTS.to_vec(), "alloc-wide"),
        };
        if matched.is_empty() {
            let message = if pattern.contains('*') {
                format!("`{pattern}` matches no {kind} point")
            } else {
                unknown("point", pattern, &format!("the {kind} points"), &candidates)
            };
            return Err(cx.error(span, message));
        }
        Ok(matched
            .into_iter()
            .map(|p| PointName::new(name.scope(), p))
            .collect())
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of
/// characters.
fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(mut rest) = name.strip_prefix(parts.next().unwrap_or_default()) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}
