//! Liveness of what a run delivers: a stop, a restart or an update takes
//! effect before the run ends, and never waits on a timer the run did not
//! ask for. The timers a run asks for are kill grace periods, shutdown
//! delays and its faults' delays; a restart delay of the policy is not
//! one a stop or a restart may wait on: both cut it short.
//!
//! Judged on the harness's deliveries, the update handler's progress
//! (`ar.*`), and the task runners' record that a restart delay ran out in
//! full (`tr.restart_delay_elapsed`). The alloc runner's asks
//! (`tr.kill_asked`, `tr.restart_asked`) are recorded once the runner can
//! see them, and a runner records a delay run out only while it sees no
//! ask, so an ask recorded first was there to be seen. A kill that lands
//! as a delay runs out wins that tie; one the runner ignored for the
//! delay's whole rest shows in time: the runner is done only as the delay
//! would have run out, though it was told in the delay's first half. A
//! runner records a restart it decides by its policy
//! (`tr.restart_decided`) only while it sees no kill, too: one recorded
//! after its kill was asked decided it on a task told to die.

use crate::attempts::attempts;
use crate::history::{AllocStatus, Event, TaskShape};
use crate::invariant::{Invariant, Violation};
use std::time::Duration;
use taskgate_faults::points::{
    AR_ALLOC_TERMINAL, AR_RESTART_ACCEPTED, AR_RESTART_TARGETS_DOWN, AR_UPDATE_APPLIED,
    HARNESS_UPDATE_DELIVERED, TR_KILL_ASKED, TR_MAIN_EXITED, TR_RESTART_ASKED, TR_RESTART_DECIDED,
    TR_RESTART_DELAY, TR_RESTART_DELAY_ELAPSED, TR_RESTART_KEPT, TR_START_CONDITION_MET,
};
use taskgate_faults::{patience, scoped};

/// [`Invariant::CommandsTakeEffect`], over each agent's life: no task's restart
/// delay runs out in full once its runner was told to die or asked to
/// restart (until that restart is done); no restart by the policy is
/// decided once the runner was told to die; every restart accepted takes its
/// targets down, and every stop and update delivered is applied, before
/// the run ends (unless the agent was killed first, or, for a stop or an
/// update, the alloc finished first); and an alloc made terminal by a
/// stop ends with its desired status `stop`.
pub fn check_commands_take_effect(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut lives = vec![0];
    lives
        .extend((0..history.len()).filter(|&i| matches!(history[i], Event::AgentRestarted { .. })));
    lives.push(history.len());
    let finished = history.iter().any(|e| {
        matches!(
            e,
            Event::AllocStatus(AllocStatus::Complete | AllocStatus::Failed)
        )
    });
    for (n, life) in lives.windows(2).enumerate() {
        let last = n + 2 == lives.len();
        let (from, to) = (life[0], life[1]);
        for task in tasks {
            out.extend(kills_and_restarts_heard(history, &task.name, from, to));
            out.extend(kills_end_delays(history, task, from, to));
        }
        out.extend(restarts_done(history, from, to, last));
        if last && !finished {
            out.extend(updates_applied(history, from, to));
        }
    }
    for task in tasks {
        out.extend(kept_restarts_cut_delays(history, &task.name));
    }
    let terminal = history.iter().any(|e| e.is_hit(AR_ALLOC_TERMINAL));
    let kept = history.iter().rev().find_map(|e| match e {
        Event::DesiredStop(stop) => Some(*stop),
        _ => None,
    });
    if terminal && kept == Some(false) {
        out.push(Invariant::CommandsTakeEffect.violation(
            None,
            "a stop made the alloc terminal, but it ended with its desired status `run`".into(),
        ));
    }
    out
}

/// What a kill or a restart asked of a task's runner must change, within
/// one agent's life: a restart delay does not run out in full while its
/// task has been told to die, or asked to restart by a restart not yet
/// done; and no restart is decided by the policy once the task was told to
/// die (a stop's kill, or the coordinator's), which would kill it between
/// attempts instead. A restart asked after a kill brings the task back,
/// and its runner may decide again.
fn kills_and_restarts_heard(
    history: &[Event],
    task: &str,
    from: usize,
    to: usize,
) -> Vec<Violation> {
    let (kill, restart, elapsed, decided) = (
        scoped(Some(task), TR_KILL_ASKED),
        scoped(Some(task), TR_RESTART_ASKED),
        scoped(Some(task), TR_RESTART_DELAY_ELAPSED),
        scoped(Some(task), TR_RESTART_DECIDED),
    );
    let mut told = None;
    let mut asked = None;
    let mut out = Vec::new();
    for (i, event) in history.iter().enumerate().take(to).skip(from) {
        if event.is_hit(&kill) {
            told = told.or(Some(i));
        } else if event.is_hit(&restart) {
            told = None;
            asked = Some(i);
        } else if event.is_hit(AR_RESTART_TARGETS_DOWN) {
            asked = None;
        } else if let (true, Some(at)) = (event.is_hit(&decided), told) {
            out.push(Invariant::CommandsTakeEffect.violation(
                Some(task),
                format!("a restart by its policy was decided at #{i}, though it was told to die at #{at}"),
            ));
        } else if event.is_hit(&elapsed) {
            let why = match (told, asked) {
                (Some(at), _) => format!("it was told to die at #{at}"),
                (None, Some(at)) => format!("a restart asked it at #{at} and was not done"),
                (None, None) => continue,
            };
            out.push(Invariant::CommandsTakeEffect.violation(
                Some(task),
                format!("its restart delay ran out in full at #{i}, though {why}"),
            ));
        }
    }
    out
}

/// A restart kept asked (`tr.restart_kept`: it found its attempt already
/// over) is owed until the task's next start condition is met (the first
/// thing a runner does once the delay is over): the restart delay the
/// policy gives meanwhile does not run out in full, in whichever agent
/// waits it (a restored one too, which only the record can tell). A later
/// delay, of a start that then fails, owes it nothing.
fn kept_restarts_cut_delays(history: &[Event], task: &str) -> Vec<Violation> {
    let (kept, elapsed, next_start) = (
        scoped(Some(task), TR_RESTART_KEPT),
        scoped(Some(task), TR_RESTART_DELAY_ELAPSED),
        scoped(Some(task), TR_START_CONDITION_MET),
    );
    let mut owed = None;
    let mut out = Vec::new();
    for (i, event) in history.iter().enumerate() {
        if event.is_hit(&kept) {
            owed = Some(i);
        } else if event.is_hit(&next_start) {
            owed = None;
        } else if let (true, Some(at)) = (event.is_hit(&elapsed), owed) {
            out.push(Invariant::CommandsTakeEffect.violation(
                Some(task),
                format!(
                    "its restart delay ran out in full at #{i}, though a restart that found \
                     its attempt over at #{at} was still owed"
                ),
            ));
        }
    }
    out
}

/// A task told to die in its restart delay is done (`tr.main_exited`)
/// before the delay would have run out, unless it was told in the delay's
/// last half: a runner takes a moment to wind down, never half a delay.
/// The delay is the one the policy draws for that restart (its jitter
/// too); a delay-mode restart past its attempts is not judged (it waits
/// for the next window instead), nor a delay whose half is within what a
/// loaded machine may take to wake a runner (the verdict must not hang on
/// the machine's speed).
/// The longest a runner told to die may take to wind down on an idle
/// machine before its restart delay counts as waited out (scaled by the
/// machine's speed).
const WAKE_MARGIN: Duration = Duration::from_millis(250);

fn kills_end_delays(history: &[Event], task: &TaskShape, from: usize, to: usize) -> Vec<Violation> {
    let (begun, told, done) = (
        scoped(Some(&task.name), TR_RESTART_DELAY),
        scoped(Some(&task.name), TR_KILL_ASKED),
        scoped(Some(&task.name), TR_MAIN_EXITED),
    );
    let all = attempts(history, &task.name);
    let hit_at = |i: usize| match &history[i] {
        Event::FaultHit(h) => h.at_us,
        _ => 0,
    };
    let mut out = Vec::new();
    for b in (from..to).filter(|&i| history[i].is_hit(&begun)) {
        let k = (all.iter().skip(1))
            .filter(|a| a.at < b && !a.by_user)
            .count();
        let exhausted = task.restarts_forever && k >= task.restart_attempts as usize;
        let Some(wait) = task.restart_waits.get(k).filter(|_| !exhausted) else {
            continue;
        };
        if *wait / 2 < patience::scaled(WAKE_MARGIN) {
            continue;
        }
        let wait = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
        let next = all.iter().map(|a| a.at).find(|&a| a > b).unwrap_or(to);
        let Some(t) = (b..next.min(to)).find(|&i| history[i].is_hit(&told)) else {
            continue;
        };
        let Some(d) = (t..to).find(|&i| history[i].is_hit(&done)) else {
            continue;
        };
        let ends = hit_at(b).saturating_add(wait);
        if hit_at(t) < hit_at(b).saturating_add(wait / 2) && hit_at(d) >= ends {
            out.push(Invariant::CommandsTakeEffect.violation(
                Some(&task.name),
                format!(
                    "told to die at #{t} in its restart delay begun at #{b}, and done only at #{d}, as the {:.3}s delay ran out",
                    wait as f64 / 1e6
                ),
            ));
        }
    }
    out
}

/// Every accepted restart's targets go down within the agent's life; in
/// the last life, within the run.
fn restarts_done(history: &[Event], from: usize, to: usize, last: bool) -> Vec<Violation> {
    let mut out = Vec::new();
    for accepted in (from..to).filter(|&i| history[i].is_hit(AR_RESTART_ACCEPTED)) {
        let done = (accepted..to).any(|i| history[i].is_hit(AR_RESTART_TARGETS_DOWN));
        if done || !last {
            continue;
        }
        let queued = (accepted..to)
            .filter(|&i| is_delivery(&history[i]))
            .map(|i| format!("#{i}"))
            .collect::<Vec<_>>();
        out.push(Invariant::CommandsTakeEffect.violation(
            None,
            format!(
                "the restart accepted at #{accepted} never took its targets down{}",
                if queued.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; the stop or update delivered at {} waited behind it",
                        queued.join(", ")
                    )
                }
            ),
        ));
    }
    out
}

/// In the last agent's life of a run whose alloc never finished, every
/// stop and update delivered was applied.
fn updates_applied(history: &[Event], from: usize, to: usize) -> Vec<Violation> {
    let delivered: Vec<usize> = (from..to).filter(|&i| is_delivery(&history[i])).collect();
    let applied = (from..to)
        .filter(|&i| history[i].is_hit(AR_UPDATE_APPLIED))
        .count();
    delivered
        .iter()
        .skip(applied)
        .map(|at| {
            Invariant::CommandsTakeEffect.violation(
                None,
                format!("the stop or update delivered at #{at} never took effect"),
            )
        })
        .collect()
}

fn is_delivery(event: &Event) -> bool {
    matches!(event, Event::StopDelivered { .. }) || event.is_hit(HARNESS_UPDATE_DELIVERED)
}

#[cfg(test)]
mod tests {
    //! Liveness of stops, restarts and updates over recorded histories,
    //! holding and broken.

    use super::*;
    use crate::history::{TaskRole, TaskShape};
    use crate::timed_history::T;
    use rstest::rstest;
    use taskgate_faults::points::{TR_MAIN_EXITED, TR_RESTART_DELAY, TR_RESTART_SIGNALED};

    fn tasks() -> Vec<TaskShape> {
        vec![TaskShape::new("web", TaskRole::Main { leader: false }, 2)]
    }

    fn check(h: &T) -> Vec<Violation> {
        check_commands_take_effect(&h.events, &tasks())
    }

    fn delay_begun() -> T {
        T::run().start("web").task_hit("web", TR_RESTART_DELAY)
    }

    #[rstest]
    #[case::ran_out_before_the_kill(
        delay_begun().task_hit("web", TR_RESTART_DELAY_ELAPSED).task_hit("web", TR_KILL_ASKED), 0)]
    #[case::ran_out_after_the_kill(
        delay_begun().task_hit("web", TR_KILL_ASKED).task_hit("web", TR_RESTART_DELAY_ELAPSED), 1)]
    #[case::ran_out_while_a_restart_was_asked(
        delay_begun().hit(AR_RESTART_ACCEPTED).task_hit("web", TR_RESTART_ASKED)
            .task_hit("web", TR_RESTART_DELAY_ELAPSED).hit(AR_RESTART_TARGETS_DOWN), 1)]
    #[case::ran_out_once_the_restart_was_done(
        delay_begun().hit(AR_RESTART_ACCEPTED).task_hit("web", TR_RESTART_ASKED)
            .hit(AR_RESTART_TARGETS_DOWN).task_hit("web", TR_RESTART_DELAY_ELAPSED), 0)]
    #[case::revived_after_its_kill(
        delay_begun().task_hit("web", TR_KILL_ASKED).hit(AR_RESTART_ACCEPTED)
            .task_hit("web", TR_RESTART_ASKED).task_hit("web", TR_RESTART_SIGNALED)
            .hit(AR_RESTART_TARGETS_DOWN).task_hit("web", TR_RESTART_DELAY_ELAPSED), 0)]
    #[case::told_before_the_agent_died(
        delay_begun().task_hit("web", TR_KILL_ASKED).agent_restart(false)
            .task_hit("web", TR_RESTART_DELAY_ELAPSED), 0)]
    fn no_restart_delay_runs_out_on_a_kill_or_restart(#[case] h: T, #[case] expected: usize) {
        let v = check(&h);
        assert_eq!(v.len(), expected, "{v:#?}");
        assert!(v.iter().all(|v| v.task.as_deref() == Some("web")), "{v:#?}");
    }

    #[rstest]
    #[case::cut_short_then_a_failed_start_waits(
        delay_begun().task_hit("web", TR_RESTART_KEPT).task_hit("web", TR_RESTART_SIGNALED)
            .task_hit("web", TR_START_CONDITION_MET).task_hit("web", TR_RESTART_DELAY)
            .task_hit("web", TR_RESTART_DELAY_ELAPSED), 0)]
    #[case::ran_out(
        delay_begun().task_hit("web", TR_RESTART_KEPT).task_hit("web", TR_RESTART_DELAY_ELAPSED), 1)]
    #[case::ran_out_in_the_restored_agent(
        T::run().start("web").task_hit("web", TR_RESTART_KEPT).agent_restart(false)
            .task_hit("web", TR_RESTART_DELAY).task_hit("web", TR_RESTART_DELAY_ELAPSED), 1)]
    #[case::another_tasks(
        delay_begun().task_hit("proxy", TR_RESTART_KEPT).task_hit("web", TR_RESTART_DELAY_ELAPSED), 0)]
    fn a_kept_restart_cuts_the_next_delay_short(#[case] h: T, #[case] expected: usize) {
        let v = check(&h);
        assert_eq!(v.len(), expected, "{v:#?}");
        assert!(v.iter().all(|v| v.task.as_deref() == Some("web")), "{v:#?}");
    }

    #[rstest]
    #[case::decided_before_the_kill(
        T::run().start("web").task_hit("web", TR_RESTART_DECIDED).task_hit("web", TR_KILL_ASKED), 0)]
    #[case::decided_after_the_kill(
        T::run().start("web").task_hit("web", TR_KILL_ASKED).task_hit("web", TR_RESTART_DECIDED), 1)]
    #[case::another_task_told(
        T::run().start("web").task_hit("proxy", TR_KILL_ASKED).task_hit("web", TR_RESTART_DECIDED), 0)]
    #[case::revived_after_its_kill(
        T::run().start("web").task_hit("web", TR_KILL_ASKED).hit(AR_RESTART_ACCEPTED)
            .task_hit("web", TR_RESTART_ASKED).hit(AR_RESTART_TARGETS_DOWN)
            .task_hit("web", TR_RESTART_DECIDED), 0)]
    #[case::told_before_the_agent_died(
        T::run().start("web").task_hit("web", TR_KILL_ASKED).agent_restart(false)
            .task_hit("web", TR_RESTART_DECIDED), 0)]
    fn no_restart_is_decided_once_told_to_die(#[case] h: T, #[case] expected: usize) {
        let v = check(&h);
        assert_eq!(v.len(), expected, "{v:#?}");
        assert!(v.iter().all(|v| v.task.as_deref() == Some("web")), "{v:#?}");
    }

    /// Bug 2's class: the restart hung on a delay it should have cut short,
    /// and the stop sent meanwhile waited behind it.
    #[rstest]
    #[case::done(
        T::run().hit(AR_RESTART_ACCEPTED).stop().hit(AR_RESTART_TARGETS_DOWN).hit(AR_UPDATE_APPLIED),
        0
    )]
    // A violation for the restart, and one for the stop it held up.
    #[case::hung_with_a_stop_behind_it(T::run().hit(AR_RESTART_ACCEPTED).stop(), 2)]
    #[case::its_agent_was_killed(T::run().hit(AR_RESTART_ACCEPTED).agent_restart(false), 0)]
    fn an_accepted_restart_takes_its_targets_down(#[case] h: T, #[case] expected: usize) {
        let v = check(&h);
        assert_eq!(v.len(), expected, "{v:#?}");
        if let Some(v) = v.first() {
            assert!(v.detail.contains("waited behind it"), "{}", v.detail);
        }
    }

    #[rstest]
    #[case::applied(T::run().stop().hit(AR_UPDATE_APPLIED), 0)]
    #[case::never_applied(T::run().stop(), 1)]
    #[case::the_alloc_had_finished(T::run().status(AllocStatus::Complete).stop(), 0)]
    #[case::lost_with_its_agent(T::run().stop().agent_restart(true).stop().hit(AR_UPDATE_APPLIED), 0)]
    #[case::an_update_never_applied(T::run().hit(HARNESS_UPDATE_DELIVERED), 1)]
    fn every_stop_and_update_takes_effect(#[case] h: T, #[case] expected: usize) {
        assert_eq!(check(&h).len(), expected);
    }

    #[rstest]
    #[case::kept(true, 0)]
    #[case::undone(false, 1)]
    fn a_stop_is_final(#[case] stop: bool, #[case] expected: usize) {
        let h = T::run()
            .stop()
            .hit(AR_ALLOC_TERMINAL)
            .hit(AR_UPDATE_APPLIED)
            .hit(HARNESS_UPDATE_DELIVERED)
            .hit(AR_UPDATE_APPLIED)
            .status(AllocStatus::Complete)
            .desired_stop(stop);
        assert_eq!(check(&h).len(), expected);
    }

    /// Violations of `web`, whose restart delay of `wait_ms` begins at
    /// 1 s, told to die at `told_ms` and done at `done_ms`.
    fn killed_in_delay(wait_ms: u64, told_ms: u64, done_ms: u64) -> Vec<Violation> {
        let web = TaskShape {
            restart_waits: vec![std::time::Duration::from_millis(wait_ms)],
            ..tasks().remove(0)
        };
        let h = T::run()
            .start("web")
            .exit("web", crate::history::TaskExit::Code(1))
            .at(1000)
            .task_hit("web", TR_RESTART_DELAY)
            .at(told_ms)
            .task_hit("web", TR_KILL_ASKED)
            .at(done_ms)
            .task_hit("web", TR_MAIN_EXITED)
            .status(AllocStatus::Complete);
        check_commands_take_effect(&h.events, &[web])
    }

    /// A stop in a 10 s restart delay: the runner is done at once; one that
    /// ignored the kill is done only as the delay ran out. Told in the
    /// delay's last half, the tie may go either way. A delay whose half a
    /// loaded machine may take to wake its runner (100 ms) is not judged:
    /// the verdict would be the machine's speed, not the engine's.
    #[rstest]
    #[case::done_at_once(10_000, 2000, 2_050, 0)]
    #[case::done_as_the_delay_ran_out(10_000, 2000, 11_000, 1)]
    #[case::told_late_in_the_delay(10_000, 10_990, 11_010, 0)]
    #[case::a_delay_shorter_than_a_wake_up(100, 1010, 1120, 0)]
    fn a_kill_ends_a_restart_delay(
        #[case] wait_ms: u64,
        #[case] told_ms: u64,
        #[case] done_ms: u64,
        #[case] expected: usize,
    ) {
        let v = killed_in_delay(wait_ms, told_ms, done_ms);
        assert_eq!(v.len(), expected, "{v:#?}");
    }
}
