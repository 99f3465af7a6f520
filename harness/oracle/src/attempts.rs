//! Each task's attempts as the kernel's and the harness's records show
//! them, and when each began and ended, for the checks that hold the
//! restart policy and the run's timers to account ([`crate::policy`],
//! [`crate::kills`]).
//!
//! An attempt is counted by the restart policy whether or not its task was
//! ever exec'd: it began with its executor's exec (a launch), or with a
//! commit that an agent killed before the launch left behind (the restored
//! agent finds it lost), or with a setup the harness made fail (an error
//! injected at a prestart hook).
//!
//! Times are the hits' own (`Hit::at_us`, the host's monotonic clock),
//! stamped by the process that reached the point. An exec carries none: a
//! launch began no later than the launching agent's `ex.spawned`, which it
//! reaches once the executor was exec'd.

use crate::history::{Event, TaskExit};
use crate::timeline::{exits, launches, positions, restarts, task_hits};
use taskgate_faults::points::{AR_STARTED, EX_SPAWNED, TR_START_COMMITTED};
use taskgate_faults::Action;

/// How an attempt began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Began {
    /// Its executor was exec'd.
    Launch,
    /// Committed by an agent that was killed before it launched anything.
    LostCommit,
    /// Its setup failed at a prestart hook, by the harness's fault.
    SetupFailed,
}

/// One attempt of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// Where in the history it began.
    pub at: usize,
    pub began: Began,
    /// It began no later than this (µs); `None` when the records do not
    /// bound it (a launch its agent never saw through).
    pub latest: Option<u64>,
    /// A user restart brought it on (the task's runner took one after the
    /// previous attempt began): outside the restart policy.
    pub by_user: bool,
    /// Its task's recorded exit: where, when (µs), and how.
    pub exit: Option<(usize, u64, TaskExit)>,
}

/// The attempts of `task`, in order.
pub(crate) fn attempts(history: &[Event], task: &str) -> Vec<Attempt> {
    let mut starts: Vec<(usize, Began)> = Vec::new();
    let launches = launches(history, task);
    starts.extend(launches.iter().map(|&at| (at, Began::Launch)));
    let agent_restarts = positions(history, |e| matches!(e, Event::AgentRestarted { .. }));
    for commit in task_hits(history, task, TR_START_COMMITTED) {
        let Some(&death) = agent_restarts.iter().find(|&&r| r > commit) else {
            continue;
        };
        if !launches.iter().any(|&l| l > commit && l < death) {
            starts.push((commit, Began::LostCommit));
        }
    }
    let failed_setup = |e: &Event| {
        matches!(e, Event::FaultHit(h) if h.point.scope() == Some(task)
            && h.point.point.starts_with("hook.prestart.")
            && h.action == Some(Action::Error))
    };
    starts.extend(
        positions(history, failed_setup)
            .into_iter()
            .map(|at| (at, Began::SetupFailed)),
    );
    starts.sort_by_key(|&(at, _)| at);
    let user_restarts = restarts(history, task);
    let exits = exits(history, task);
    let mut out: Vec<Attempt> = Vec::new();
    for (n, &(at, began)) in starts.iter().enumerate() {
        let next = starts.get(n + 1).map_or(history.len(), |s| s.0);
        let previous = n.checked_sub(1).map(|p| starts[p].0);
        let by_user = previous.is_some_and(|p| user_restarts.iter().any(|&r| r > p && r < at));
        let exit = (began == Began::Launch)
            .then(|| exits.iter().find(|(i, _)| *i > at && *i < next))
            .flatten()
            .map(|&(i, exit)| (i, time_at_or_before(history, i).unwrap_or(0), exit));
        let latest = match began {
            Began::Launch => history[at..next].iter().find_map(|e| match e {
                Event::FaultHit(h) if h.is(Some(task), EX_SPAWNED) => Some(h.at_us),
                _ => None,
            }),
            _ => time_at_or_before(history, at),
        };
        out.push(Attempt {
            at,
            began,
            latest,
            by_user,
            exit,
        });
    }
    out
}

/// No restart window of the run began before this (µs): the first alloc
/// runner's start, which every task's restart tracker follows.
pub(crate) fn windows_begin(history: &[Event]) -> Option<u64> {
    history.iter().find_map(|e| match e {
        Event::FaultHit(h) if h.point.scope().is_none() && h.point.point == AR_STARTED => {
            Some(h.at_us)
        }
        _ => None,
    })
}

/// The time of the hit at `at`, or of the last hit before it.
pub(crate) fn time_at_or_before(history: &[Event], at: usize) -> Option<u64> {
    history[..=at.min(history.len().saturating_sub(1))]
        .iter()
        .rev()
        .find_map(hit_time)
}

fn hit_time(event: &Event) -> Option<u64> {
    match event {
        Event::FaultHit(h) => Some(h.at_us),
        _ => None,
    }
}
