//! A run's merged history laid out as a swimlane timeline: which actor
//! (lane) each event belongs to, the parks and prestart phases as bars,
//! the user's commands as lines across every lane. Pure: the drawing is
//! [`super::svg`]'s.
//!
//! The x axis is the history's causal order (one column per drawn event),
//! not time: the history is one order of every process's records, while
//! only fault hits carry a clock. Each event's time since the run's first
//! hit is shown with it where it has one.

use crate::report::describe;
use std::collections::BTreeMap;
use taskgate_faults::points::{
    self, EX_TASK_EXITED, HARNESS_UPDATE_DELIVERED, TR_AFTER_PRESTART, TR_BEFORE_PRESTART,
};
use taskgate_faults::{Action, Detail, Hit, Intervention};
use taskgate_oracle::{Answer, Event, ExecIdentity, TaskExit};

/// One actor of a run, drawn as a lane.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lane {
    /// The agent process: its kills and restores.
    Agent,
    /// The alloc runner's update handler (alloc-wide points).
    Updates,
    /// A task's runner: its `tr.*` points and hooks.
    Runner(String),
    /// A task's executor: its `ex.*` points and the exits it saw.
    Executor(String),
    /// The kernel's answers to the execs the oracle held.
    Kernel,
}

impl Lane {
    /// As the page names it.
    pub fn title(&self) -> String {
        match self {
            Lane::Agent => "agent process".into(),
            Lane::Updates => "update handler".into(),
            Lane::Runner(task) => format!("task runner {task}"),
            Lane::Executor(task) => format!("executor {task}"),
            Lane::Kernel => "kernel exec verdicts".into(),
        }
    }

    /// As the markup's `data-lane` names it.
    pub fn key(&self) -> String {
        match self {
            Lane::Agent => "agent".into(),
            Lane::Updates => "updates".into(),
            Lane::Runner(task) => format!("runner:{task}"),
            Lane::Executor(task) => format!("executor:{task}"),
            Lane::Kernel => "kernel".into(),
        }
    }
}

/// What a mark on a lane is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    /// A fault point passed with no action.
    Point,
    /// A point where a fault acted (its action is in the label).
    Fault,
    /// An exec the kernel let through.
    ExecAllowed,
    /// An exec the kernel denied.
    ExecDenied,
    /// A task's process ended, as its executor saw it.
    Exit,
    /// The agent process was SIGKILLed.
    AgentKilled,
    /// A new agent restored the alloc.
    AgentRestored,
    /// The harness acted on a task's processes behind the engine's back.
    Intervention,
}

impl MarkKind {
    /// As the markup's `data-kind` and class name it.
    pub fn key(self) -> &'static str {
        match self {
            MarkKind::Point => "point",
            MarkKind::Fault => "fault",
            MarkKind::ExecAllowed => "exec-allowed",
            MarkKind::ExecDenied => "exec-denied",
            MarkKind::Exit => "exit",
            MarkKind::AgentKilled => "agent-killed",
            MarkKind::AgentRestored => "agent-restored",
            MarkKind::Intervention => "intervention",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The event's index in the history (`#N`).
    pub index: usize,
    pub lane: Lane,
    pub kind: MarkKind,
    /// Short, for the drawing.
    pub label: String,
    /// The history's line for the event.
    pub detail: String,
}

/// What a bar spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    /// An actor parked at a point, from its arrival to its release.
    Park,
    /// A parked actor never released.
    ParkUnreleased,
    /// A prestart phase in which this many of the task's hooks ran.
    Prestart { hooks: usize },
    /// A prestart phase in which none ran: the hooks were skipped.
    PrestartSkipped,
    /// The agent process alive: from the run's start (or a restore) to
    /// its kill (or the run's end).
    AgentAlive,
}

impl BarKind {
    pub fn key(self) -> &'static str {
        match self {
            BarKind::Park => "park",
            BarKind::ParkUnreleased => "park-unreleased",
            BarKind::Prestart { .. } => "prestart",
            BarKind::PrestartSkipped => "prestart-skipped",
            BarKind::AgentAlive => "agent-alive",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bar {
    pub lane: Lane,
    pub kind: BarKind,
    /// History indices of its two ends (`to` is the history's last drawn
    /// event for a park never released).
    pub from: usize,
    pub to: usize,
    pub label: String,
}

/// A user's command: stop, in-place update, restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub index: usize,
    /// `stop`, `update`, `restart`.
    pub what: &'static str,
    pub label: String,
}

#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// In the order they are drawn, top to bottom.
    pub lanes: Vec<Lane>,
    /// The history indices drawn, left to right: one column each.
    pub columns: Vec<usize>,
    pub marks: Vec<Mark>,
    pub bars: Vec<Bar>,
    pub commands: Vec<Command>,
    /// Microseconds since the run's first fault hit, by history index.
    pub times: BTreeMap<usize, u64>,
}

impl Timeline {
    /// The column of history index `index` (the next drawn one for an
    /// event that is not drawn).
    pub fn column(&self, index: usize) -> usize {
        self.columns.partition_point(|&i| i < index)
    }
}

/// Lays out `history`. What the harness recorded after the run (restart
/// counts, survivors, the final status) and the engine's own task events
/// (whose order against the hits is not known) are not drawn.
pub fn layout(history: &[Event]) -> Timeline {
    let mut t = Timeline::default();
    let first_us = history.iter().find_map(|e| match e {
        Event::FaultHit(h) => Some(h.at_us),
        _ => None,
    });
    for (index, event) in history.iter().enumerate() {
        if let (Event::FaultHit(h), Some(first)) = (event, first_us) {
            t.times.insert(index, h.at_us.saturating_sub(first));
        }
        let detail = describe(event);
        let mut mark = |lane: Lane, kind: MarkKind, label: String| {
            t.marks.push(Mark {
                index,
                lane,
                kind,
                label,
                detail: detail.clone(),
            })
        };
        match event {
            Event::FaultHit(hit) => place_hit(index, hit, &mut mark, &mut t.commands),
            Event::Exec(r) => {
                let (kind, denied) = match r.verdict {
                    Answer::Allow => (MarkKind::ExecAllowed, ""),
                    Answer::Deny => (MarkKind::ExecDenied, " DENIED"),
                };
                let of = match &r.identity {
                    ExecIdentity::Executor { task, .. } => format!("{task} executor"),
                    ExecIdentity::Task { task, .. } => format!("{task} task"),
                    other => format!("{other:?}"),
                };
                mark(Lane::Kernel, kind, format!("exec {of}{denied}"));
            }
            Event::StopDelivered { .. } => t.commands.push(Command {
                index,
                what: "stop",
                label: "stop".into(),
            }),
            Event::AgentRestarted { stop } => mark(
                Lane::Agent,
                MarkKind::AgentRestored,
                if *stop {
                    "restored, stopping".into()
                } else {
                    "restored".into()
                },
            ),
            Event::TaskExited { task, exit } => mark(
                Lane::Executor(task.clone()),
                MarkKind::Exit,
                match exit {
                    TaskExit::Code(c) => format!("exit {c}"),
                    TaskExit::Signal(s) => format!("signal {s}"),
                },
            ),
            Event::TaskEvent { .. }
            | Event::Survivors { .. }
            | Event::RestartCount { .. }
            | Event::AllocStatus(_)
            | Event::DesiredStop(_) => {}
        }
    }
    t.bars = bars(history);
    let mut drawn: Vec<usize> = t
        .marks
        .iter()
        .map(|m| m.index)
        .chain(t.commands.iter().map(|c| c.index))
        .collect();
    drawn.sort_unstable();
    drawn.dedup();
    t.columns = drawn;
    if let (Some(&first), Some(&last)) = (t.columns.first(), t.columns.last()) {
        for bar in t.bars.iter_mut().filter(|b| b.to == usize::MAX) {
            bar.to = last;
        }
        t.bars.extend(agent_lives(&t.marks, first, last));
    }
    t.lanes = lanes(&t);
    t
}

/// Places one fault hit: on its actor's lane, and as a command or an
/// agent kill where it is one.
fn place_hit(
    index: usize,
    hit: &Hit,
    mark: &mut impl FnMut(Lane, MarkKind, String),
    commands: &mut Vec<Command>,
) {
    let point = hit.point.point.as_str();
    // The executor's exit record is drawn as the exit it carries (the
    // history holds both).
    if point == EX_TASK_EXITED && matches!(hit.detail, Some(Detail::Exit { .. })) {
        return;
    }
    if point == points::HARNESS_STOP_DELIVERED {
        return; // merged into Event::StopDelivered
    }
    if point == HARNESS_UPDATE_DELIVERED {
        let label = match hit.detail {
            Some(Detail::JobVersion { version }) => format!("update to v{version}"),
            _ => "update".into(),
        };
        commands.push(Command {
            index,
            what: "update",
            label,
        });
        return;
    }
    let lane = match hit.point.scope() {
        Some(task) if point.starts_with("ex.") => Lane::Executor(task.to_string()),
        Some(task) => Lane::Runner(task.to_string()),
        None => Lane::Updates,
    };
    let short = point
        .strip_prefix("tr.")
        .or_else(|| point.strip_prefix("ex."))
        .or_else(|| point.strip_prefix("ar."))
        .or_else(|| point.strip_prefix("hook."))
        .unwrap_or(point);
    match &hit.action {
        None => mark(lane, MarkKind::Point, short.to_string()),
        Some(Action::KillAgent) => {
            mark(lane, MarkKind::Fault, format!("{short} [kill agent]"));
            mark(Lane::Agent, MarkKind::AgentKilled, "agent SIGKILLed".into());
        }
        Some(Action::Intervene(what)) => {
            mark(
                lane,
                MarkKind::Fault,
                format!("{short} [{}]", what.as_str()),
            );
            match what {
                Intervention::RestartAlloc | Intervention::RestartAllTasks => {
                    commands.push(Command {
                        index,
                        what: "restart",
                        label: what.as_str().into(),
                    })
                }
                Intervention::KillExecutor
                | Intervention::KillTaskTree
                | Intervention::StopExecutor
                | Intervention::ContinueExecutor => {
                    if let Some(task) = hit.point.scope() {
                        mark(
                            Lane::Executor(task.to_string()),
                            MarkKind::Intervention,
                            what.as_str().into(),
                        );
                    }
                }
                // Drawn where they are delivered (the stop's point, the
                // update's record).
                Intervention::StopAlloc | Intervention::UpdateAlloc => {}
            }
        }
        Some(action) => mark(lane, MarkKind::Fault, format!("{short} [{action}]")),
    }
}

/// Parks, from arrival to release (the point's next hit with no action),
/// and each task runner's prestart phases with the hooks that ran in them.
fn bars(history: &[Event]) -> Vec<Bar> {
    let hits: Vec<(usize, &Hit)> = history
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::FaultHit(h) => Some((i, h)),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for (n, (from, hit)) in hits.iter().enumerate() {
        let lane = match hit.point.scope() {
            Some(task) if hit.point.point.starts_with("ex.") => Lane::Executor(task.to_string()),
            Some(task) => Lane::Runner(task.to_string()),
            None => Lane::Updates,
        };
        if matches!(hit.action, Some(Action::Park | Action::AwaitHit { .. })) {
            let release = hits[n + 1..]
                .iter()
                .find(|(_, h)| h.point == hit.point && h.action.is_none());
            out.push(Bar {
                lane: lane.clone(),
                kind: if release.is_some() {
                    BarKind::Park
                } else {
                    BarKind::ParkUnreleased
                },
                from: *from,
                to: release.map_or(usize::MAX, |(i, _)| *i),
                label: format!("parked at {}", hit.point),
            });
        }
        if hit.point.point == TR_AFTER_PRESTART {
            let Some(task) = hit.point.scope() else {
                continue;
            };
            // The phase began at this runner's last pass of before_prestart.
            let Some(start) = hits[..n]
                .iter()
                .rposition(|(_, h)| h.is(Some(task), TR_BEFORE_PRESTART))
            else {
                continue;
            };
            let ran = hits[start..n]
                .iter()
                .filter(|(_, h)| {
                    h.point.scope() == Some(task)
                        && h.point.point.starts_with("hook.prestart.after.")
                })
                .count();
            out.push(Bar {
                lane,
                kind: if ran == 0 {
                    BarKind::PrestartSkipped
                } else {
                    BarKind::Prestart { hooks: ran }
                },
                from: hits[start].0,
                to: *from,
                label: if ran == 0 {
                    "prestart skipped: no hook ran".into()
                } else {
                    format!("prestart: {ran} hooks")
                },
            });
        }
    }
    out
}

/// The agent process's lives: killed, it is down until a new one restores.
fn agent_lives(marks: &[Mark], first: usize, last: usize) -> Vec<Bar> {
    let mut lives = Vec::new();
    let mut since = Some(first);
    let alive = |from: usize, to: usize| Bar {
        lane: Lane::Agent,
        kind: BarKind::AgentAlive,
        from,
        to,
        label: "agent process alive".into(),
    };
    for m in marks.iter().filter(|m| m.lane == Lane::Agent) {
        match (m.kind, since) {
            (MarkKind::AgentKilled, Some(from)) => {
                lives.push(alive(from, m.index));
                since = None;
            }
            (MarkKind::AgentRestored, None) => since = Some(m.index),
            _ => {}
        }
    }
    if let Some(from) = since {
        lives.push(alive(from, last));
    }
    lives
}

/// The lanes with something on them, in a fixed order: the agent, the
/// update handler, each task's runner then its executor (tasks in order
/// of first appearance), the kernel.
fn lanes(t: &Timeline) -> Vec<Lane> {
    let mut tasks: Vec<String> = Vec::new();
    let mut used: Vec<&Lane> = t.marks.iter().map(|m| &m.lane).collect();
    used.extend(t.bars.iter().map(|b| &b.lane));
    for lane in &used {
        if let Lane::Runner(task) | Lane::Executor(task) = lane {
            if !tasks.contains(task) {
                tasks.push(task.clone());
            }
        }
    }
    let mut out = vec![Lane::Agent, Lane::Updates];
    for task in tasks {
        out.push(Lane::Runner(task.clone()));
        out.push(Lane::Executor(task));
    }
    out.push(Lane::Kernel);
    // The agent lane shows even when empty: one process, never killed.
    out.retain(|lane| *lane == Lane::Agent || used.contains(&lane));
    out
}
