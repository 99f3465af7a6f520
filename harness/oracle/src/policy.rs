//! The restart policy's account of every attempt, across agent restores
//! and restart windows, judged on the kernel's and the harness's records
//! (see [`crate::attempts`]): launches, commits left by killed agents,
//! injected setup failures, the executors' exit records, and the times
//! their hits were stamped at. The engine's own counters are never read.
//!
//! Nomad's tracker, which the engine follows: a window begins with the
//! task's tracker; a decision taken `interval` or more after the window
//! began starts a new one; a window grants `attempts` restarts, then fail
//! mode gives up and delay mode waits for the next window. A restart waits
//! its delay plus the seed's jitter first.

use crate::attempts::{attempts, is_hit, windows_begin, Attempt, Began};
use crate::invariants::{Event, TaskShape, Violation};
use std::time::Duration;
use taskgate_faults::points::{TR_KILLING, TR_KILL_ASKED, TR_MAIN_EXITED, TR_RESTART_ASKED};
use taskgate_faults::rng::SplitMix64;
use taskgate_faults::scoped;

pub const LAUNCHES_ACCOUNTED: &str =
    "every attempt of a task, lost ones too, is one its restart policy grants, interval by interval";
pub const RESTART_WINDOWS: &str =
    "a restart waits its delay and jitter, and a task is given up only once its interval's attempts are used, across restores too";

/// The wait before a task's `n`th restart by its policy (from 0, over its
/// life), as the harness expects it, restated here from Nomad's rule (the
/// engine's own is held to it by a test of the harness's): the policy's
/// `delay` plus a quarter of a draw below it, the draw the `n`th of the
/// stream `seed` gives for `<alloc id>/<task>`. A replay under the same
/// seed waits exactly as its run.
pub fn restart_wait(seed: u64, alloc_id: &str, task: &str, delay: Duration, n: u32) -> Duration {
    let stream = SplitMix64::stream(seed, &format!("{alloc_id}/{task}")).0;
    let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX).max(1);
    let draw = SplitMix64(stream ^ u64::from(n)).draw() % nanos;
    delay + Duration::from_nanos(draw / 4)
}

fn violation(invariant: &'static str, task: &str, detail: String) -> Violation {
    Violation {
        invariant,
        task: Some(task.to_string()),
        detail,
    }
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Milliseconds after `begin`, for messages.
fn since(begin: u64, at: u64) -> String {
    format!("{:.3}s", at.saturating_sub(begin) as f64 / 1e6)
}

/// The restarts the policy granted, each with its number over the task's
/// life (from 0) and the attempt it began: every attempt after the first
/// that no user restart brought on.
fn policy_restarts(attempts: &[Attempt]) -> impl Iterator<Item = (usize, usize)> + '_ {
    (1..attempts.len())
        .filter(|&n| !attempts[n].by_user)
        .enumerate()
}

/// The first restart window the policy's `r`th restart (from 1) can fall
/// in: `None` if the policy grants none. A window holds `attempts`
/// restarts; in delay mode the one that finds them used up opens the next.
fn window_of(task: &TaskShape, r: u64) -> Option<u64> {
    match (task.restarts_forever, u64::from(task.restart_attempts)) {
        (false, 0) => None,
        (true, 0) => Some(r),
        (_, a) => Some((r - 1) / a),
    }
}

/// [`LAUNCHES_ACCOUNTED`]: the `r`th restart the policy granted began no
/// earlier than its window could open: `k` intervals after the first
/// tracker began, for the `k`th window. A restore neither grants a window
/// afresh nor forgets an attempt it found lost.
pub fn check_launches_accounted(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let begin = windows_begin(history).unwrap_or(0);
    let mut out = Vec::new();
    for task in tasks {
        let all = attempts(history, &task.name);
        let interval = us(task.restart_interval);
        for (k, n) in policy_restarts(&all) {
            let (attempt, r) = (&all[n], k as u64 + 1);
            let opens = window_of(task, r).map(|k| match k {
                0 => Some(0),
                k => interval.checked_mul(k).and_then(|t| t.checked_add(begin)),
            });
            let too_early = match (opens, attempt.latest) {
                (None, _) => true,
                // The window never opens within the run.
                (Some(None), _) => true,
                (Some(Some(opens)), Some(latest)) => latest < opens,
                (Some(Some(_)), None) => false,
            };
            if too_early {
                out.push(violation(
                    LAUNCHES_ACCOUNTED,
                    &task.name,
                    format!(
                        "{} at #{} is restart {r} by its policy ({} attempts per {}, {}){}",
                        describe(attempt),
                        attempt.at,
                        task.restart_attempts,
                        interval_text(task.restart_interval),
                        if task.restarts_forever {
                            "delay mode"
                        } else {
                            "fail mode"
                        },
                        match attempt.latest {
                            Some(latest) =>
                                format!(", begun {} into the run", since(begin, latest)),
                            None => String::new(),
                        }
                    ),
                ));
            }
        }
    }
    out
}

fn describe(attempt: &Attempt) -> &'static str {
    match attempt.began {
        Began::Launch => "a launch",
        Began::LostCommit => "an attempt its killed agent committed",
        Began::SetupFailed => "an attempt whose setup failed",
    }
}

fn interval_text(interval: Duration) -> String {
    if interval == Duration::MAX {
        "run".into()
    } else {
        format!("{interval:?}")
    }
}

/// [`RESTART_WINDOWS`]: a restart by the policy begins no sooner after the
/// attempt's recorded exit than its delay and jitter (unless a kill or a
/// user restart cut the wait short; in delay mode, a restart that finds
/// the window's attempts used waits for the next window instead, which
/// [`LAUNCHES_ACCOUNTED`] holds). And a task in fail mode whose runner
/// gives up after an exit (no stop, no kill) has used its interval's
/// attempts: that many restarts were decided within the interval before
/// the exit.
pub fn check_restart_windows(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks {
        let all = attempts(history, &task.name);
        out.extend(delays_kept(history, task, &all));
        out.extend(give_up_earned(history, task, &all));
    }
    out
}

fn delays_kept(history: &[Event], task: &TaskShape, all: &[Attempt]) -> Vec<Violation> {
    let mut out = Vec::new();
    let asked = [
        scoped(Some(&task.name), TR_RESTART_ASKED),
        scoped(Some(&task.name), TR_KILL_ASKED),
    ];
    for (k, n) in policy_restarts(all) {
        let (previous, next) = (&all[n - 1], &all[n]);
        let (Some((exited, exit_us, _)), Some(latest), Some(&wait)) =
            (previous.exit, next.latest, task.restart_waits.get(k))
        else {
            continue;
        };
        let exhausted = task.restarts_forever && k >= task.restart_attempts as usize;
        let cut_short = (exited..next.at).any(|i| asked.iter().any(|a| is_hit(&history[i], a)));
        if exhausted || cut_short || latest >= exit_us.saturating_add(us(wait)) {
            continue;
        }
        out.push(violation(
            RESTART_WINDOWS,
            &task.name,
            format!(
                "restart {k} by its policy began by {} after the exit at #{exited} ({} at #{}); it waits {wait:?}",
                since(exit_us, latest),
                describe(next),
                next.at
            ),
        ));
    }
    out
}

fn give_up_earned(history: &[Event], task: &TaskShape, all: &[Attempt]) -> Vec<Violation> {
    let attempts_per_window = task.restart_attempts as usize;
    if task.restarts_forever || attempts_per_window == 0 {
        return Vec::new();
    }
    let Some(last) = all.last() else {
        return Vec::new();
    };
    let Some((exited, exit_us, exit)) = last.exit else {
        return Vec::new();
    };
    if exit.successful() && !task.restarts_on_success {
        return Vec::new();
    }
    let told = [
        scoped(Some(&task.name), TR_KILLING),
        scoped(
            Some(&task.name),
            taskgate_faults::points::TR_RESTART_SIGNALED,
        ),
    ];
    if (last.at..exited).any(|i| told.iter().any(|t| is_hit(&history[i], t))) {
        return Vec::new();
    }
    let main_exited = scoped(Some(&task.name), TR_MAIN_EXITED);
    let Some(gave_up) = (exited..history.len()).find(|&i| is_hit(&history[i], &main_exited)) else {
        return Vec::new();
    };
    let stopped = history[..gave_up].iter().any(|e| {
        matches!(
            e,
            Event::StopDelivered { .. } | Event::AgentRestarted { stop: true }
        )
    });
    if stopped {
        return Vec::new();
    }
    let window_opened = exit_us.saturating_sub(us(task.restart_interval));
    let within = policy_restarts(all)
        .filter(|&(_, n)| all[n].latest.is_none_or(|l| l > window_opened))
        .count();
    if within >= attempts_per_window {
        return Vec::new();
    }
    vec![violation(
        RESTART_WINDOWS,
        &task.name,
        format!(
            "given up after its exit at #{exited} with {within} restart(s) in the {} before it; its policy allows {attempts_per_window} per interval",
            interval_text(task.restart_interval)
        ),
    )]
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
