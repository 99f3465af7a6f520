//! Invariants over whole task lifecycles: restarts, restores, kills, exits
//! and what outlives a run. They judge the kernel's and the harness's
//! records (execs, the executors' exit records, fault hits, cgroup
//! membership, what was alive after the run), never the engine's own
//! account of itself; only the final status and the restart counters are
//! the engine's, and those are what they check.

use crate::attempts::{attempts, time_at_or_before, windows_begin, Attempt, Began};
use crate::history::{AllocStatus, Event, TaskRole, TaskShape};
use crate::invariant::{Invariant, Violation};
use crate::timeline::{
    end_unrecorded, executor_kills, exit_taken, exits, kills, launches, peeks, positions, restarts,
    task_hits, tree_roots,
};
use taskgate_faults::points::{
    panics_task_runner, AR_ALLOC_TERMINAL, TR_BEFORE_DRIVER_START, TR_BEFORE_PRESTART,
    TR_KILL_ASKED, TR_MAIN_EXITED,
};
use taskgate_faults::{scoped, Action};

/// A task whose executor saw it exit successfully before the agent was
/// restarted has completed; the restored agent must not start it again
/// (Nomad #5883: a completed batch alloc re-run after an agent restart).
/// A task restarted on success (a service's, a sidecar) never completes,
/// nor does an attempt that exited once its runner was told to die or to
/// restart (after its executor's peek): that exit 0 is the kill's or the
/// restart's (a trap's answer to its signal), and a restart goes on. A
/// user restart after the completion brings the task back: its launch is
/// the restart's.
pub fn check_no_restart_after_completion(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let agent_restarts = positions(history, |e| matches!(e, Event::AgentRestarted { .. }));
    let mut out = Vec::new();
    for task in tasks.iter().filter(|t| !t.restarts_on_success) {
        let launched = launches(history, &task.name);
        let peeked = peeks(history, &task.name);
        let revived = restarts(history, &task.name);
        for &restart in &agent_restarts {
            let Some(&(exited, exit)) = exits(history, &task.name)
                .iter()
                .rev()
                .find(|(i, _)| *i < restart)
            else {
                continue;
            };
            let relaunched_before = launched.iter().any(|&l| l > exited && l < restart);
            let launch = launched.iter().copied().rfind(|&l| l < exited);
            let told = peeked
                .iter()
                .any(|&p| p < exited && launch.is_none_or(|l| p > l));
            if !exit.successful() || relaunched_before || told {
                continue;
            }
            let rerun = |&&l: &&usize| l > restart && !revived.iter().any(|&r| r > exited && r < l);
            if let Some(again) = launched.iter().find(rerun) {
                out.push(Invariant::NoRestartAfterCompletion.violation(
                    Some(&task.name),
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
/// unless a user restart of all tasks brought it back in between. A runner
/// whose kill path began (`tr.killing`) launches nothing after it; one told
/// between attempts (`tr.kill_asked`, by the alloc runner) launches no start
/// it decided after it was told, in that agent's life (one decided before
/// may have been committed first, and the kill path then kills it).
pub fn check_no_exec_after_kill(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let agent_restarts = positions(history, |e| matches!(e, Event::AgentRestarted { .. }));
    let mut out = Vec::new();
    for task in tasks {
        let launched = launches(history, &task.name);
        let revived = restarts(history, &task.name);
        let decided = task_hits(history, &task.name, TR_BEFORE_DRIVER_START);
        let revived_between = |from: usize, to: usize| revived.iter().any(|&r| r > from && r < to);
        for killed in kills(history, &task.name) {
            let Some(late) = launched.iter().copied().find(|&l| l > killed) else {
                continue;
            };
            if !revived_between(killed, late) {
                out.push(Invariant::NoExecAfterKill.violation(
                    Some(&task.name),
                    format!("told to die at #{killed}, launched at #{late}"),
                ));
            }
        }
        for asked in task_hits(history, &task.name, TR_KILL_ASKED) {
            let life_end =
                (agent_restarts.iter().copied().find(|&r| r > asked)).unwrap_or(history.len());
            let late = launched.iter().copied().find(|&l| {
                let decision = decided.iter().copied().rfind(|&d| d < l);
                l < life_end && decision.is_some_and(|d| d > asked) && !revived_between(asked, l)
            });
            if let Some(late) = late {
                out.push(Invariant::NoExecAfterKill.violation(
                    Some(&task.name),
                    format!(
                        "told to die at #{asked}, launched at #{late} on a start decided after"
                    ),
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
                    out.push(Invariant::OneLiveTree.violation(
                        Some(&task.name),
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
                    out.push(Invariant::OneLiveTree.violation(
                        Some(&task.name),
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
    let agent_restarts = positions(history, |e| matches!(e, Event::AgentRestarted { .. }));
    let mut bounds = vec![0];
    bounds.extend(&agent_restarts);
    bounds.push(history.len());
    let within = |v: Vec<usize>, lo: usize, hi: usize| -> Vec<usize> {
        v.into_iter().filter(|&i| i >= lo && i < hi).collect()
    };
    for window in bounds.windows(2) {
        let (lo, hi) = (window[0], window[1]);
        // A restored agent that is stopping takes no restart: a restart its
        // runner carries through (a dead agent's runner's) ends the task as
        // a kill does, and keeps the kill order too.
        let stopping = matches!(history.get(lo), Some(Event::AgentRestarted { stop: true }));
        let first_kill = |t: &TaskShape| {
            let mut told = within(kills(history, &t.name), lo, hi);
            if stopping {
                told.extend(within(restarts(history, &t.name), lo, hi));
            }
            told.into_iter().min()
        };
        out.extend(told_in_kill_order(
            history,
            tasks,
            &first_kill,
            Invariant::KillOrder,
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
            // Its tree when the poststop task started: the last one rooted
            // before it, which must have exited since.
            let Some(last) = tree_roots(history, &other.name)
                .into_iter()
                .rfind(|&root| root < start)
            else {
                continue;
            };
            let exited = (exits(history, &other.name).iter()).any(|&(i, _)| i > last && i < start);
            if !exited {
                out.push(Invariant::KillOrder.violation(
                    Some(&poststop.name),
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
    invariant: Invariant,
    what: &str,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let leader = tasks
        .iter()
        .find(|t| t.role == TaskRole::Main { leader: true });
    if let Some((leader, at)) = leader.and_then(|l| Some((l, told(l)?))) {
        for other in tasks.iter().filter(|t| t.name != leader.name) {
            if let Some(early) = told(other).filter(|&o| o < at) {
                out.push(invariant.violation(
                    Some(&other.name),
                    format!(
                        "told to {what} at #{early}, before the leader {} at #{at}",
                        leader.name
                    ),
                ));
            }
        }
    }
    for sidecar in tasks.iter().filter(|t| t.role.is_sidecar()) {
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
                out.push(invariant.violation(
                    Some(&sidecar.name),
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
            Event::AllocStatus(AllocStatus::Complete | AllocStatus::Failed)
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
                Some(Invariant::PoststopOnce.violation(
                    Some(&task.name),
                    format!("ran {runs} times; its restart policy allows {most}"),
                ))
            } else if runs == 0 && finished && any_ran {
                Some(Invariant::PoststopOnce.violation(
                    Some(&task.name),
                    "never ran, though the alloc finished after its tasks ran".into(),
                ))
            } else {
                None
            }
        })
        .collect()
}

/// The status the records give: failed if, for some task,
/// - its executor was killed (by the harness) with no attempt after it and
///   none left in its policy, its attempt not told to die or to restart;
/// - its last attempt failed to start (its setup failed, or its executor
///   never exec'd it) with none left, stop or no stop, unless that attempt
///   was decided once the alloc was terminal;
/// - its last attempt, none left, was lost with the agent that committed
///   it before any launch, and no stop came before the next agent found
///   it (if that agent told the task to die, either status is right);
/// - its last recorded exit was a failure its attempt was not told to die
///   or to restart for (a kill, restart or peek since its launch), and its
///   policy had no attempt left;
/// - it never ran and its runner gave up before any stop, untold (not a
///   sidecar the alloc runner told to die once the main tasks were done);
/// - the harness panicked its runner (the runner's cleanup fails it).
///
/// Complete otherwise. (A task killed by the kill path exits by a signal,
/// or 0 from its trap: neither fails it.)
pub fn check_status_matches_exits(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
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
    // Gave up untold: a runner the alloc runner told to die first (a
    // sidecar once the main tasks are done) ended as told, not failed.
    let gave_up = |task: &str| {
        let exited = scoped(Some(task), TR_MAIN_EXITED);
        let told = task_hits(history, task, TR_KILL_ASKED);
        history
            .iter()
            .position(|e| e.is_hit(&exited))
            .is_some_and(|at| stop.is_none_or(|s| at < s) && !told.iter().any(|&k| k < at))
    };
    let mut why = None;
    // A task that may have failed or not: either status is right.
    let mut may_have_failed = false;
    for task in tasks {
        // A user restart's kill tells the attempt to die too, and a runner
        // told to die decides at its peek.
        let mut killed = kills(history, &task.name);
        killed.extend(restarts(history, &task.name));
        killed.extend(peeks(history, &task.name));
        let launched = launches(history, &task.name);
        // Whether `i` lies in the attempt `at` reaches, after its launch:
        // a kill tells only the attempt it reached (the kill of an earlier
        // attempt, or the restart that brought this one on, says nothing of
        // how this one ended at `at`), and an exit is only its own.
        let this_attempt = |i: usize, at: usize| {
            let launch = launched.iter().copied().rfind(|&l| l < at);
            i < at && launch.is_none_or(|l| i > l)
        };
        let told_before = |at: usize| killed.iter().any(|&k| this_attempt(k, at));
        // Killed with the restart's kill on its way (at its very point) is
        // the restart's end.
        let restarted = restarts(history, &task.name);
        // A failed exit (or a lost attempt) the policy would retry is last
        // only because a stop came: the task was ended, not failed. The
        // policy has granted a restart for every attempt after the first
        // that no user restart brought on, lost ones too.
        let all = attempts(history, &task.name);
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
        // An exit recorded since the latest launch, which the engine took
        // by then: it has the attempt's result, whatever befalls its
        // executor after it.
        let exited_before = |at: usize| {
            (exits(history, &task.name).iter())
                .any(|&(i, _)| this_attempt(i, at) && exit_taken(history, &task.name, i, at))
        };
        let lost = executor_kills(history, &task.name).into_iter().find(|&k| {
            !launched.iter().any(|&l| l > k)
                && !exited_before(k)
                && !told_before(k)
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
        // A runner the harness panicked is cleaned up after, and its task
        // recorded failed, whatever its policy or a stop.
        let panicked = history.iter().position(|e| {
            matches!(e, Event::FaultHit(h) if h.point.scope() == Some(&task.name)
                && h.action == Some(Action::Panic)
                && panics_task_runner(&h.point.point))
        });
        if let Some(at) = panicked {
            why = Some(format!("{}'s runner panicked at #{at}", task.name));
            continue;
        }
        // A start that failed is the policy's to judge even if a stop came
        // meanwhile: the stop did not end it (Nomad's runner too asks its
        // restart tracker about a driver's failure, killed or not). Not one
        // decided once the alloc was terminal: a correct engine never
        // makes it (`no-exec-after-terminal` judges that), so its end is the
        // stop's. One an agent restart followed is the restored agent's,
        // judged by the rules below.
        let roots = tree_roots(history, &task.name);
        let executor_killed = executor_kills(history, &task.name);
        let failed_start = all.last().filter(|a| {
            let after = |v: &[usize]| v.iter().any(|&i| i > a.at);
            let never_exec = match a.began {
                Began::SetupFailed => true,
                // An exit recorded is a task that ran (the fake driver
                // execs none).
                Began::Launch => a.exit.is_none() && !after(&roots) && !after(&executor_killed),
                Began::LostCommit => false,
            };
            let restored =
                (history[a.at..].iter()).any(|e| matches!(e, Event::AgentRestarted { .. }));
            // The attempt's own grant counts: its start is past `a.at`.
            never_exec
                && !restored
                && decided_before_terminal(history, &task.name, a)
                && policy_gives_up(a.at + 1)
        });
        if let Some(a) = failed_start {
            why = Some(format!(
                "{}'s start at #{} failed (its task never exec'd) and its policy had no attempt left",
                task.name, a.at
            ));
            continue;
        }
        // An attempt whose agent was killed between its commit and its
        // launch is lost to the agent restored next, which counts it as a
        // failed start; unless a stop came first (the loss is the stop's).
        // If that agent told the task to die (a leader dead, the main
        // tasks done), it may have done so before or after the runner
        // found the loss: either status is the engine's to report.
        let lost_commit = all.last().filter(|a| {
            let found =
                (a.at..history.len()).find(|&i| matches!(history[i], Event::AgentRestarted { .. }));
            matches!(a.began, Began::LostCommit)
                && found.is_some_and(|r| stop.is_none_or(|s| s > r))
                && policy_gives_up(a.at + 1)
        });
        if let Some(a) = lost_commit {
            let kill_asked = scoped(Some(&task.name), TR_KILL_ASKED);
            let told = history[a.at..].iter().any(|e| e.is_hit(&kill_asked));
            let failed = format!(
                "{}'s last attempt, committed at #{}, was lost with its agent, and its policy had no attempt left",
                task.name, a.at
            );
            if told {
                may_have_failed = true;
            } else {
                why = Some(failed);
            }
            continue;
        }
        match exits(history, &task.name).last() {
            Some(&(at, exit))
                if (!exit.successful() || task.restarts_on_success)
                    && !told_before(at)
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
    if derived == reported || (may_have_failed && reported == AllocStatus::Failed) {
        return Vec::new();
    }
    vec![Invariant::StatusMatchesExits.violation(
        None,
        format!(
            "reported {reported:?}, the exits give {derived:?}{}",
            why.map_or(String::new(), |w| format!(": {w}"))
        ),
    )]
}

/// Whether the runner decided on attempt `a` (its prestart, for a failed
/// setup; its driver start, for a launch) before a stop made the alloc
/// terminal, or no stop did.
fn decided_before_terminal(history: &[Event], task: &str, a: &Attempt) -> bool {
    let point = match a.began {
        Began::SetupFailed => TR_BEFORE_PRESTART,
        Began::Launch | Began::LostCommit => TR_BEFORE_DRIVER_START,
    };
    let decision = scoped(Some(task), point);
    let decided = history[..a.at].iter().rposition(|e| e.is_hit(&decision));
    let terminal = history.iter().position(|e| e.is_hit(AR_ALLOC_TERMINAL));
    match (decided, terminal) {
        (_, None) => true,
        (Some(d), Some(t)) => d < t,
        (None, Some(_)) => false,
    }
}

/// Nothing of a task is alive once its alloc finished: not its executor,
/// not its process tree.
pub fn check_no_survivors(history: &[Event]) -> Vec<Violation> {
    history
        .iter()
        .filter_map(|e| match e {
            Event::Survivors { task, pids } if !pids.is_empty() => {
                Some(Invariant::NoSurvivors.violation(
                    Some(task),
                    format!("pids {pids:?} still alive after the run"),
                ))
            }
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
                    out.push(
                        Invariant::RestartsMonotonic
                            .violation(Some(task), format!("went from {before} to {restarts}")),
                    );
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
                out.push(Invariant::StartOrder.violation(
                    Some(&task.name),
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
/// against the policy. Poststop tasks are bounded by
/// [`Invariant::PoststopOnce`].
pub fn check_attempts_within_policy(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let begin = windows_begin(history).unwrap_or(0);
    tasks
        .iter()
        .filter(|t| !t.restarts_forever && t.role != TaskRole::Poststop)
        .filter_map(|task| {
            let roots = tree_roots(history, &task.name);
            let runs = roots.len();
            let restarted = restarts(history, &task.name).len();
            let last = roots
                .last()
                .and_then(|&r| time_at_or_before(history, r))
                .unwrap_or(begin);
            let interval = u64::try_from(task.restart_interval.as_micros()).unwrap_or(u64::MAX);
            let windows = 1 + (last.saturating_sub(begin) / interval.max(1)) as usize;
            let most = task.restart_attempts as usize * windows + 1 + restarted;
            (runs > most).then(|| {
                Invariant::AttemptsWithinPolicy.violation(
                    Some(&task.name),
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
            let Some(root) = (launch..end).find(|&i| history[i].is_task_exec_of(&task.name)) else {
                continue;
            };
            let within = |at: &usize| (launch..end).contains(at);
            if !exited.iter().any(within) && !excused.iter().any(within) {
                out.push(Invariant::ExitsObserved.violation(
                    Some(&task.name),
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
mod tests;
