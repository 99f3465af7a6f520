//! Invariants over whole task lifecycles: restarts, restores, kills, exits
//! and what outlives a run. They judge the kernel's and the harness's
//! records (execs, the executors' exit records, fault hits, cgroup
//! membership, what was alive after the run), never the engine's own
//! account of itself; only the final status and the restart counters are
//! the engine's, and those are what they check.

use crate::identity::ExecIdentity;
use crate::invariants::{Event, TaskExit, TaskRole, TaskShape, Violation};
use taskgate_faults::points::{TR_KILLING, TR_RESTART_SIGNALED};
use taskgate_faults::{scoped, Action, Intervention};

pub const NO_RESTART_AFTER_COMPLETION: &str =
    "no completed task or attempt is started again after a restore";
pub const NO_EXEC_AFTER_KILL: &str = "no task is started after its runner was told to die";
pub const ONE_LIVE_TREE: &str = "at most one live process tree and one executor per task";
pub const KILL_ORDER: &str =
    "leader killed first, main tasks dead before sidecars are killed, poststop after all";
pub const POSTSTOP_ONCE: &str = "a poststop task runs exactly once";
pub const STATUS_MATCHES_EXITS: &str =
    "the alloc's final status is the one its recorded exits give";
pub const NO_SURVIVORS: &str = "no process of a task outlives its executor unobserved";
pub const RESTARTS_MONOTONIC: &str = "a task's restart count never goes backwards";
pub const ATTEMPTS_WITHIN_POLICY: &str =
    "no task runs more attempts than its restart policy allows";
pub const EXITS_OBSERVED: &str =
    "every task tree's end is recorded by its own executor, unless the harness killed it";
pub const START_ORDER: &str =
    "main tasks start after every prestart task completed, poststart tasks after the main tasks";

/// Every lifecycle invariant.
pub fn check(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let mut v = check_no_restart_after_completion(history, tasks);
    v.extend(check_no_exec_after_kill(history, tasks));
    v.extend(check_one_live_tree(history, tasks));
    v.extend(check_kill_order(history, tasks));
    v.extend(check_poststop_once(history, tasks));
    v.extend(check_status_matches_exits(history, tasks));
    v.extend(check_no_survivors(history));
    v.extend(check_restarts_monotonic(history));
    v.extend(check_start_order(history, tasks));
    v.extend(check_attempts_within_policy(history, tasks));
    v.extend(check_exits_observed(history, tasks));
    v
}

fn violation(invariant: &'static str, task: &str, detail: String) -> Violation {
    Violation {
        invariant,
        task: Some(task.to_string()),
        detail,
    }
}

/// Where an executor for `task` was exec'd: one per launch of an attempt.
pub(crate) fn launches(history: &[Event], task: &str) -> Vec<usize> {
    positions(
        history,
        |e| matches!(e, Event::Exec(r) if matches!(&r.identity, ExecIdentity::Executor { task: t, .. } if t == task)),
    )
}

/// Where each launch's task process was exec'd: the first exec in the
/// task's cgroup after each launch (the tree's root).
pub(crate) fn tree_roots(history: &[Event], task: &str) -> Vec<usize> {
    let launched = launches(history, task);
    launched
        .iter()
        .enumerate()
        .filter_map(|(n, &at)| {
            let end = launched.get(n + 1).copied().unwrap_or(history.len());
            (at..end).find(|&i| is_task_exec(&history[i], task))
        })
        .collect()
}

fn is_task_exec(event: &Event, task: &str) -> bool {
    matches!(event, Event::Exec(r) if matches!(&r.identity, ExecIdentity::Task { task: t, .. } if t == task))
}

pub(crate) fn exits(history: &[Event], task: &str) -> Vec<(usize, TaskExit)> {
    history
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::TaskExited { task: t, exit } if t == task => Some((i, *exit)),
            _ => None,
        })
        .collect()
}

fn kills(history: &[Event], task: &str) -> Vec<usize> {
    let name = scoped(Some(task), TR_KILLING);
    positions(
        history,
        |e| matches!(e, Event::FaultHit(h) if h.name() == name),
    )
}

/// Where the task's runner took a user restart: its live attempt is told
/// to die (or, dead, the task is brought back), and the next attempt is
/// the restart's, outside the restart policy.
pub(crate) fn restarts(history: &[Event], task: &str) -> Vec<usize> {
    let name = scoped(Some(task), TR_RESTART_SIGNALED);
    positions(
        history,
        |e| matches!(e, Event::FaultHit(h) if h.name() == name),
    )
}

/// Where the harness SIGKILLed the task's executor behind the engine's back.
fn executor_kills(history: &[Event], task: &str) -> Vec<usize> {
    positions(history, |e| {
        matches!(e, Event::FaultHit(h) if h.point.scope() == Some(task)
            && h.action == Some(Action::Intervene(Intervention::KillExecutor)))
    })
}

/// Whether the harness killed the executor of `task`'s latest launch
/// before `at`: that tree's end has no record (the engine destroys what the
/// executor left), so no order can be judged on it; what outlives the run
/// is [`NO_SURVIVORS`]'s.
pub(crate) fn end_unrecorded(history: &[Event], task: &str, at: usize) -> bool {
    let Some(launch) = launches(history, task).into_iter().rfind(|&l| l < at) else {
        return false;
    };
    executor_kills(history, task)
        .into_iter()
        .any(|k| k > launch && k < at)
}

pub(crate) fn positions(history: &[Event], f: impl Fn(&Event) -> bool) -> Vec<usize> {
    history
        .iter()
        .enumerate()
        .filter(|(_, e)| f(e))
        .map(|(i, _)| i)
        .collect()
}

pub(crate) fn is_sidecar(role: TaskRole) -> bool {
    matches!(
        role,
        TaskRole::Prestart { sidecar: true } | TaskRole::Poststart { sidecar: true }
    )
}

/// A task whose executor saw it exit successfully before the agent was
/// restarted has completed; the restored agent must not start it again
/// (Nomad #5883: a completed batch alloc re-run after an agent restart).
/// A task restarted on success (a service's, a sidecar) never completes.
pub fn check_no_restart_after_completion(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let restarts = positions(history, |e| matches!(e, Event::AgentRestarted { .. }));
    let mut out = Vec::new();
    for task in tasks.iter().filter(|t| !t.restarts_on_success) {
        let launched = launches(history, &task.name);
        for &restart in &restarts {
            let Some(&(exited, exit)) = exits(history, &task.name)
                .iter()
                .rev()
                .find(|(i, _)| *i < restart)
            else {
                continue;
            };
            let relaunched_before = launched.iter().any(|&l| l > exited && l < restart);
            if !exit.successful() || relaunched_before {
                continue;
            }
            if let Some(again) = launched.iter().find(|&&l| l > restart) {
                out.push(violation(
                    NO_RESTART_AFTER_COMPLETION,
                    &task.name,
                    format!(
                        "completed (exit 0 at #{exited}) before the agent restart at #{restart}, \
                         started again at #{again}"
                    ),
                ));
            }
        }
    }
    out
}

/// Once a task runner was told to die, its task is never launched again,
/// unless a user restart of all tasks brought it back in between.
pub fn check_no_exec_after_kill(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks {
        let launched = launches(history, &task.name);
        let revived = restarts(history, &task.name);
        for killed in kills(history, &task.name) {
            let Some(late) = launched.iter().copied().find(|&l| l > killed) else {
                continue;
            };
            if !revived.iter().any(|&r| r > killed && r < late) {
                out.push(violation(
                    NO_EXEC_AFTER_KILL,
                    &task.name,
                    format!("told to die at #{killed}, launched at #{late}"),
                ));
            }
        }
    }
    out
}

/// When a task's process tree starts, its cgroup holds nothing else: a
/// second tree beside a live one means two copies under one limit (an
/// executor died and left its task behind, or two executors raced). And
/// when a task's executor is launched, no other executor of the task
/// lives (the task lock, B4), bound to its socket or not.
pub fn check_one_live_tree(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks {
        for at in tree_roots(history, &task.name) {
            if let Event::Exec(r) = &history[at] {
                if !r.cgroup_peers.is_empty() {
                    out.push(violation(
                        ONE_LIVE_TREE,
                        &task.name,
                        format!(
                            "tree rooted at pid {} (#{at}) started while pids {:?} lived in its cgroup",
                            r.pid, r.cgroup_peers
                        ),
                    ));
                }
            }
        }
        for at in launches(history, &task.name) {
            if let Event::Exec(r) = &history[at] {
                if !r.executor_peers.is_empty() {
                    out.push(violation(
                        ONE_LIVE_TREE,
                        &task.name,
                        format!(
                            "executor pid {} (#{at}) launched while its task's executors {:?} lived",
                            r.pid, r.executor_peers
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// Nomad's kill order (since #13055), judged within each agent's lifetime:
/// the leader is told to die before any other task; every killed main task
/// has exited before a sidecar is told to die; a poststop task starts only
/// once every task that ran has exited.
pub fn check_kill_order(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let mut out = Vec::new();
    let restarts = positions(history, |e| matches!(e, Event::AgentRestarted { .. }));
    let mut bounds = vec![0];
    bounds.extend(&restarts);
    bounds.push(history.len());
    let within = |v: Vec<usize>, lo: usize, hi: usize| -> Vec<usize> {
        v.into_iter().filter(|&i| i >= lo && i < hi).collect()
    };
    for window in bounds.windows(2) {
        let (lo, hi) = (window[0], window[1]);
        let first_kill = |t: &TaskShape| within(kills(history, &t.name), lo, hi).first().copied();
        out.extend(told_in_kill_order(
            history,
            tasks,
            &first_kill,
            KILL_ORDER,
            "die",
        ));
    }
    for poststop in tasks.iter().filter(|t| t.role == TaskRole::Poststop) {
        let Some(&start) = launches(history, &poststop.name).first() else {
            continue;
        };
        for other in tasks.iter().filter(|t| t.role != TaskRole::Poststop) {
            if end_unrecorded(history, &other.name, start) {
                continue;
            }
            let ran = !tree_roots(history, &other.name).is_empty();
            let exited = exits(history, &other.name).iter().any(|(i, _)| *i < start);
            if ran && !exited {
                out.push(violation(
                    KILL_ORDER,
                    &poststop.name,
                    format!("poststop started at #{start} before {} exited", other.name),
                ));
            }
        }
    }
    out
}

/// Nomad's kill order among the tasks `told` (where each was told, if it
/// was) to `what` (die, restart): the leader before any other task; every
/// main task told has ended by the time a sidecar is told. Ended means its
/// current process exited (perhaps before it was even told), it never
/// ran, or the harness killed its executor (then the end has no record).
pub(crate) fn told_in_kill_order(
    history: &[Event],
    tasks: &[TaskShape],
    told: &dyn Fn(&TaskShape) -> Option<usize>,
    invariant: &'static str,
    what: &str,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let leader = tasks
        .iter()
        .find(|t| t.role == TaskRole::Main { leader: true });
    if let Some((leader, at)) = leader.and_then(|l| Some((l, told(l)?))) {
        for other in tasks.iter().filter(|t| t.name != leader.name) {
            if let Some(early) = told(other).filter(|&o| o < at) {
                out.push(violation(
                    invariant,
                    &other.name,
                    format!(
                        "told to {what} at #{early}, before the leader {} at #{at}",
                        leader.name
                    ),
                ));
            }
        }
    }
    for sidecar in tasks.iter().filter(|t| is_sidecar(t.role)) {
        let Some(sidecar_told) = told(sidecar) else {
            continue;
        };
        for main in tasks
            .iter()
            .filter(|t| matches!(t.role, TaskRole::Main { .. }))
        {
            let Some(main_told) = told(main) else {
                continue;
            };
            let current = launches(history, &main.name)
                .into_iter()
                .rfind(|&l| l < sidecar_told);
            let ended = current.is_none_or(|l| {
                exits(history, &main.name)
                    .into_iter()
                    .any(|(i, _)| i > l && i < sidecar_told)
            }) || end_unrecorded(history, &main.name, sidecar_told);
            if !ended {
                out.push(violation(
                    invariant,
                    &sidecar.name,
                    format!(
                        "sidecar told to {what} at #{sidecar_told} while main task {} (told at #{main_told}) had not exited",
                        main.name
                    ),
                ));
            }
        }
    }
    out
}

/// A poststop task runs once (or as often as its restart policy allows),
/// and does run once the alloc finished after any task ran.
pub fn check_poststop_once(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let finished = history.iter().any(|e| {
        matches!(
            e,
            Event::AllocStatus(
                crate::invariants::AllocStatus::Complete | crate::invariants::AllocStatus::Failed
            )
        )
    });
    let any_ran = tasks
        .iter()
        .filter(|t| t.role != TaskRole::Poststop)
        .any(|t| !tree_roots(history, &t.name).is_empty());
    tasks
        .iter()
        .filter(|t| t.role == TaskRole::Poststop)
        .filter_map(|task| {
            let runs = tree_roots(history, &task.name).len();
            let most = task.restart_attempts as usize + 1;
            if runs > most {
                Some(violation(
                    POSTSTOP_ONCE,
                    &task.name,
                    format!("ran {runs} times; its restart policy allows {most}"),
                ))
            } else if runs == 0 && finished && any_ran {
                Some(violation(
                    POSTSTOP_ONCE,
                    &task.name,
                    "never ran, though the alloc finished after its tasks ran".into(),
                ))
            } else {
                None
            }
        })
        .collect()
}

/// The status the records give: failed if a task's executor was killed
/// (by the harness) with no attempt after it and none left in its policy,
/// if a task's last recorded
/// exit was a failure it was not told to die for and its restart policy
/// had no attempt left, or if a task never ran and its runner gave up
/// before any stop; complete otherwise. (A task killed by
/// the kill path exits by a signal, or 0 from its trap: neither fails it.)
pub fn check_status_matches_exits(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    use crate::invariants::AllocStatus;
    let Some(reported) = history.iter().rev().find_map(|e| match e {
        Event::AllocStatus(s @ (AllocStatus::Complete | AllocStatus::Failed)) => Some(*s),
        _ => None,
    }) else {
        return Vec::new();
    };
    let stop = history.iter().position(|e| {
        matches!(
            e,
            Event::StopDelivered { .. } | Event::AgentRestarted { stop: true }
        )
    });
    let gave_up = |task: &str| {
        let exited = scoped(Some(task), taskgate_faults::points::TR_MAIN_EXITED);
        history
            .iter()
            .position(|e| matches!(e, Event::FaultHit(h) if h.name() == exited))
            .is_some_and(|at| stop.is_none_or(|s| at < s))
    };
    let mut why = None;
    for task in tasks {
        // A user restart's kill tells the attempt to die too.
        let mut killed = kills(history, &task.name);
        killed.extend(restarts(history, &task.name));
        let launched = launches(history, &task.name);
        // Killed with the restart's kill on its way (at its very point) is
        // the restart's end.
        let restarted = restarts(history, &task.name);
        // A failed exit (or a lost attempt) the policy would retry is last
        // only because a stop came: the task was ended, not failed. The
        // policy has granted a restart for every attempt after the first
        // that no user restart brought on, lost ones too.
        let all = crate::attempts::attempts(history, &task.name);
        let policy_gives_up = |at: usize| {
            let granted = (all.iter().skip(1))
                .filter(|a| a.at < at && !a.by_user)
                .count();
            !task.restarts_forever && granted >= task.restart_attempts as usize
        };
        // A loss a restored agent found in a stopping alloc is the stop's.
        let stopped_after = |k: usize| {
            (history[k..].iter()).any(|e| matches!(e, Event::AgentRestarted { stop: true }))
        };
        let lost = executor_kills(history, &task.name).into_iter().find(|&k| {
            !launched.iter().any(|&l| l > k)
                && !killed.iter().any(|&t| t < k)
                && !restarted.contains(&k)
                && policy_gives_up(k)
                && !stopped_after(k)
        });
        if let Some(at) = lost {
            why = Some(format!(
                "{}'s executor died at #{at}, its policy had no attempt left, and none followed",
                task.name
            ));
            continue;
        }
        match exits(history, &task.name).last() {
            Some(&(at, exit))
                if (!exit.successful() || task.restarts_on_success)
                    && !killed.iter().any(|&k| k < at)
                    && policy_gives_up(at) =>
            {
                why = Some(format!(
                    "{} last exited {exit:?} (#{at}) without being told to die",
                    task.name
                ));
            }
            None if tree_roots(history, &task.name).is_empty()
                && task.role != TaskRole::Poststop
                && gave_up(&task.name) =>
            {
                why = Some(format!(
                    "{} never ran and its runner gave up before any stop",
                    task.name
                ));
            }
            _ => {}
        }
    }
    let derived = if why.is_some() {
        AllocStatus::Failed
    } else {
        AllocStatus::Complete
    };
    if derived == reported {
        return Vec::new();
    }
    vec![Violation {
        invariant: STATUS_MATCHES_EXITS,
        task: None,
        detail: format!(
            "reported {reported:?}, the exits give {derived:?}{}",
            why.map_or(String::new(), |w| format!(": {w}"))
        ),
    }]
}

/// Nothing of a task is alive once its alloc finished: not its executor,
/// not its process tree.
pub fn check_no_survivors(history: &[Event]) -> Vec<Violation> {
    history
        .iter()
        .filter_map(|e| match e {
            Event::Survivors { task, pids } if !pids.is_empty() => Some(violation(
                NO_SURVIVORS,
                task,
                format!("pids {pids:?} still alive after the run"),
            )),
            _ => None,
        })
        .collect()
}

/// A restore must not forget restarts: each task's counter, read after
/// each agent process ended, never decreases.
pub fn check_restarts_monotonic(history: &[Event]) -> Vec<Violation> {
    let mut last: std::collections::BTreeMap<&str, u32> = Default::default();
    let mut out = Vec::new();
    for e in history {
        if let Event::RestartCount { task, restarts } = e {
            if let Some(&before) = last.get(task.as_str()) {
                if *restarts < before {
                    out.push(violation(
                        RESTARTS_MONOTONIC,
                        task,
                        format!("went from {before} to {restarts}"),
                    ));
                }
            }
            last.insert(task, *restarts);
        }
    }
    out
}

/// Nomad's lifecycle, judged on the kernel's records: every tree of a main
/// or poststart task is rooted after each prestart task's successful exit
/// (a prestart sidecar's start), and a poststart task's after each main
/// task's first start. A restore must keep it too (Kubernetes #36485 and
/// #140309: init containers re-run, or skipped, after a node restart).
pub fn check_start_order(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let completed = |task: &str, before: usize| {
        exits(history, task)
            .iter()
            .any(|&(at, exit)| at < before && exit.successful())
    };
    let started =
        |task: &str, before: usize| tree_roots(history, task).iter().any(|&at| at < before);
    let mut out = Vec::new();
    for task in tasks {
        let poststart = match task.role {
            TaskRole::Main { .. } => false,
            TaskRole::Poststart { .. } => true,
            TaskRole::Prestart { .. } | TaskRole::Poststop => continue,
        };
        for root in tree_roots(history, &task.name) {
            for before in tasks {
                let missing = match before.role {
                    TaskRole::Prestart { sidecar: false } if !completed(&before.name, root) => {
                        "completed"
                    }
                    TaskRole::Prestart { sidecar: true } if !started(&before.name, root) => {
                        "started"
                    }
                    TaskRole::Main { .. } if poststart && !started(&before.name, root) => "started",
                    _ => continue,
                };
                out.push(violation(
                    START_ORDER,
                    &task.name,
                    format!("started at #{root} before {} had {missing}", before.name),
                ));
            }
        }
    }
    out
}

/// A task in fail mode runs at most once plus its policy's restart attempts
/// in each restart window, across agent restarts too: a restore must not
/// grant the attempts afresh. A window lasts the policy's interval; the
/// run holds at most one more than the intervals that passed between the
/// first tracker's start (`ar.started`) and its last tree's root. Each
/// user restart the task took grants one run more, as it is not counted
/// against the policy. Poststop tasks are bounded by [`POSTSTOP_ONCE`].
pub fn check_attempts_within_policy(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let begin = crate::attempts::windows_begin(history).unwrap_or(0);
    tasks
        .iter()
        .filter(|t| !t.restarts_forever && t.role != TaskRole::Poststop)
        .filter_map(|task| {
            let roots = tree_roots(history, &task.name);
            let runs = roots.len();
            let restarted = restarts(history, &task.name).len();
            let last = roots
                .last()
                .and_then(|&r| crate::attempts::time_at_or_before(history, r))
                .unwrap_or(begin);
            let interval = u64::try_from(task.restart_interval.as_micros()).unwrap_or(u64::MAX);
            let windows = 1 + (last.saturating_sub(begin) / interval.max(1)) as usize;
            let most = task.restart_attempts as usize * windows + 1 + restarted;
            (runs > most).then(|| {
                violation(
                    ATTEMPTS_WITHIN_POLICY,
                    &task.name,
                    format!(
                        "ran {runs} times; its restart policy over {windows} interval(s) and {restarted} user restart(s) allow {most}"
                    ),
                )
            })
        })
        .collect()
}

/// Supervision: each task tree ends under the eyes of the executor that
/// started it, which records the exit, before the task's next launch and
/// by the end of the run. A tree killed behind its executor's back (an
/// agent that destroys an attempt it should have reattached to, B1) or
/// never reaped leaves no record. The harness's own executor kills excuse
/// the tree they orphaned.
pub fn check_exits_observed(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks {
        let launched = launches(history, &task.name);
        let exited: Vec<usize> = exits(history, &task.name)
            .iter()
            .map(|(at, _)| *at)
            .collect();
        let excused = executor_kills(history, &task.name);
        for (n, &launch) in launched.iter().enumerate() {
            let end = launched.get(n + 1).copied().unwrap_or(history.len());
            let Some(root) = (launch..end).find(|&i| is_task_exec(&history[i], &task.name)) else {
                continue;
            };
            let within = |at: &usize| (launch..end).contains(at);
            if !exited.iter().any(within) && !excused.iter().any(within) {
                out.push(violation(
                    EXITS_OBSERVED,
                    &task.name,
                    format!(
                        "the tree rooted at #{root} ended with no exit recorded by its executor"
                    ),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;
