//! Restore rules against the fake driver: a new engine restores what the
//! old one's runtime left when it was dropped mid-run.

mod support;

use std::time::Duration;
use support::*;
use taskgate_engine::fake_driver::{Call, Exit};
use taskgate_engine::jobspec::LifecycleHook;
use taskgate_engine::state::{AttemptEnded, DoomedAttempt, EndedBy, MAX_TASK_EVENTS};
use taskgate_engine::task_state::{EventKind, Outcome, TaskEvent, TaskState};
use taskgate_engine::{AllocSummary, ClientStatus, DesiredStatus};
use taskgate_executor::{Doom, ExitResult};
use taskgate_faults::{points, scoped, Await};

/// An agent that dies while attempt 2 runs: the restored agent reattaches
/// to attempt 2's executor (not attempt 1's, whose handle the record held
/// until attempt 2 was committed, docs/bugs.md B1), and neither finishes attempt 2 as
/// if it were the ended attempt 1 nor starts a third.
#[test]
fn a_restore_on_attempt_2_reattaches_to_attempt_2() {
    let first = runtime();
    let second = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1)]);
    let mut web = task("web", None, false);
    web.restart.attempts = 1;
    web.restart.delay = Duration::ZERO;
    let engine = home.engine();
    let alloc = {
        let _rt = first.enter();
        engine.submit(&job(vec![web]), None).unwrap()
    };
    let (mut events, _waiter) = alloc.into_parts();
    let started = started_events(&first, &mut events, 2);
    assert_eq!(
        started.iter().map(|e| e.attempt).collect::<Vec<_>>(),
        [1, 2]
    );
    first.shutdown_timeout(idle());
    drop(engine);

    let engine = home.engine();
    let alloc = restore_one(&engine, &second);
    alloc.stop();
    let summary = wait(&second, alloc);
    assert_eq!(home.driver.starts("web"), 2, "{:?}", home.driver.calls());
    let web = &summary.tasks[0];
    assert_eq!((web.committed, web.launched), (Some(2), Some(2)));
    assert!(
        (web.events.iter()).any(|e| e.kind == EventKind::Restored && e.attempt == 2),
        "{:?}",
        web.events
    );
    assert!(
        matches!(
            &web.state,
            TaskState::Dead {
                outcome: Outcome::Killed { .. }
            }
        ),
        "{:?}",
        web.state
    );
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert!(home.driver.live().is_empty());
}

/// An agent that goes away while its tasks run (its runtime dropped, as a
/// crash would leave them) is restored by a new engine: both tasks are
/// re-attached, none started again, and a stop then ends them.
#[test]
fn a_restored_engine_reattaches_instead_of_starting_again() {
    let first = runtime();
    let second = runtime();
    let home = Home::new();
    let engine = home.engine();
    let alloc = {
        let _rt = first.enter();
        engine.submit(&report_job(), None).unwrap()
    };
    // Started events go out once the task's record (its handle) is persisted.
    let (mut events, _waiter) = alloc.into_parts();
    let mut started = Vec::new();
    while started.len() < 2 {
        let event = first
            .block_on(async { tokio::time::timeout(idle(), events.recv()).await })
            .expect("engine hung")
            .expect("event stream open");
        if event.kind == EventKind::Started {
            started.push(event.task);
        }
    }
    // The old agent is gone: its tasks dropped, its database closed.
    first.shutdown_timeout(idle());
    drop(engine);

    let engine = home.engine();
    let restored = {
        let _rt = second.enter();
        engine.restore().unwrap()
    };
    assert!(restored.skipped.is_empty());
    assert_eq!(restored.allocs.len(), 1);
    let alloc = restored.allocs.into_iter().next().unwrap();
    alloc.stop();
    let summary = wait(&second, alloc);
    assert_eq!(home.driver.starts("leader"), 1, "{:?}", home.driver.calls());
    assert_eq!(
        home.driver.starts("sidecar"),
        1,
        "{:?}",
        home.driver.calls()
    );
    let reattached: Vec<Call> = home
        .driver
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Reattach { .. }))
        .collect();
    assert_eq!(reattached.len(), 2, "{reattached:?}");
    assert!(reattached
        .iter()
        .all(|c| matches!(c, Call::Reattach { found: true, .. })));
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert!(home.driver.live().is_empty());
    // Each task got its own record back, and says it was restored.
    for (record, name) in summary.tasks.iter().zip(["leader", "sidecar"]) {
        assert_eq!(record.task, name);
        assert!(
            record.events.iter().any(|e| e.kind == EventKind::Restored),
            "{name}: {:?}",
            record.events
        );
    }
}

/// Restore rule: an alloc whose record cannot be decoded is skipped, with
/// its key and why, and every other alloc is restored and runs to its end.
#[test]
fn an_undecodable_record_skips_only_its_alloc() {
    let first = runtime();
    let second = runtime();
    let home = Home::new();
    let engine = home.engine();
    let (good, bad) = {
        let _rt = first.enter();
        let good = engine.submit(&report_job(), None).unwrap();
        let bad = engine
            .submit(&job(vec![task("web", None, false)]), None)
            .unwrap();
        (good.alloc_id.clone(), bad.alloc_id.clone())
    };
    first.shutdown_timeout(idle());
    drop(engine);
    // A record an older or damaged agent wrote: not the shape this one reads.
    home.corrupt_alloc_record(&bad);

    let engine = home.engine();
    let restored = {
        let _rt = second.enter();
        engine.restore().unwrap()
    };
    assert_eq!(restored.skipped.len(), 1);
    let skipped = &restored.skipped[0];
    assert_eq!(skipped.key, bad);
    let message = skipped.to_string();
    assert!(
        message.starts_with(&format!(
            "alloc {bad} not restored: state database record {bad}:"
        )),
        "{message}"
    );
    assert_eq!(restored.allocs.len(), 1);
    let alloc = restored.allocs.into_iter().next().unwrap();
    assert_eq!(alloc.alloc_id, good);
    alloc.stop();
    let summary = wait(&second, alloc);
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// Restore rule: the committed attempt ended (its end persisted) before the
/// agent died; the restored agent finishes it, and never runs it again.
#[test]
fn a_restored_attempt_that_had_ended_is_finished_not_run_again() {
    let (home, summary) = web_restored_after_its_end(&[]);
    assert_eq!(home.driver.starts("web"), 1, "{:?}", home.driver.calls());
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert!(home.driver.live().is_empty(), "its executor was shut down");
}

/// The dead agent reported the ended attempt's end (Terminated) before it
/// died: the restored agent finishes the attempt without reporting its end
/// a second time.
#[test]
fn an_end_the_dead_agent_reported_is_not_reported_again() {
    let reported = TaskEvent::new("web", EventKind::Terminated, 1, "Exit Code: 0");
    let (_home, summary) = web_restored_after_its_end(&[reported]);
    let ends = (summary.tasks[0].events.iter())
        .filter(|e| e.kind == EventKind::Terminated)
        .count();
    assert_eq!(ends, 1, "{:?}", summary.tasks[0].events);
}

/// As above, but ten more events came after the end's report before the
/// agent died (a record keeps only its last ten): whether the end was
/// reported must not hang on how many events followed it.
#[test]
fn an_end_reported_ten_events_back_is_not_reported_again() {
    let reported = TaskEvent::new("web", EventKind::Terminated, 1, "Exit Code: 0");
    let later = TaskEvent::new("web", EventKind::HookFailed, 1, "logs: disk full");
    let events: Vec<_> = std::iter::once(reported)
        .chain(std::iter::repeat_n(later, MAX_TASK_EVENTS))
        .collect();
    let (_home, summary) = web_restored_after_its_end(&events);
    let web = &summary.tasks[0];
    let again: Vec<_> = (web.events.iter())
        .filter(|e| e.kind == EventKind::Terminated)
        .collect();
    assert!(
        again.is_empty(),
        "attempt 1's end was reported again: {again:?}"
    );
}

/// Web's attempt 1 exited 0 and its end was persisted, then `events` as the
/// runner adds them (the record keeping its recent ones), before the agent
/// died; a restored agent finishes the alloc (no stop).
fn web_restored_after_its_end(events: &[TaskEvent]) -> (Home, AllocSummary) {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    let alloc_id = agent_died_while_web_ran(&home, &first, 0);
    first.shutdown_timeout(idle());
    edit_web_record(&home, &alloc_id, |web| {
        web.ended = Some(AttemptEnded {
            attempt: 1,
            result: ExitResult::with_code(0),
            by: EndedBy::Exit,
        });
        for event in events {
            web.add_event(event.clone());
        }
        web.keep_recent_events();
    });
    let engine = home.engine();
    let summary = wait(&second, restore_one(&engine, &second));
    (home, summary)
}

/// Restore rule: reattach fails (here, the socket answers for another
/// executor than the record names); the remains are destroyed before the
/// restart, so the new attempt is not refused and never runs beside them.
#[test]
fn a_failed_reattach_destroys_the_remains_before_the_restart() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    let alloc_id = agent_died_while_web_ran(&home, &first, 1);
    first.shutdown_timeout(idle());
    edit_web_record(&home, &alloc_id, |web| {
        let handle = web.handle.as_mut().expect("the handle was persisted");
        handle.executor_pid += 100;
    });
    let engine = home.engine();
    let alloc = restore_one(&engine, &second);
    let updates = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    let started = started_events(&second, &mut events, 1);
    assert_eq!(started[0].attempt, 2);
    let calls = home.driver.calls();
    let destroyed = calls.iter().position(|c| {
        *c == Call::DestroyRemains {
            task: "web".into(),
            found: true,
        }
    });
    let restarted = calls.iter().rposition(|c| matches!(c, Call::Start { .. }));
    assert!(destroyed < restarted && destroyed.is_some(), "{calls:?}");
    assert!(
        !calls.iter().any(|c| matches!(c, Call::StartFailed { .. })),
        "{calls:?}"
    );
    updates.stop();
    let summary = second
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert!(home.driver.live().is_empty());
    assert_eq!(
        lost_attempt_end(&summary),
        "Killed what was left of the lost attempt"
    );
}

/// How the lost attempt 1 was accounted for: its Killed event's message,
/// up to the remains it names.
fn lost_attempt_end(summary: &AllocSummary) -> String {
    let web = &summary.tasks[0];
    let killed = (web.events.iter())
        .find(|e| e.kind == EventKind::Killed && e.attempt == 1)
        .unwrap_or_else(|| panic!("no Killed event for attempt 1: {:?}", web.events));
    killed.message.split(':').next().unwrap().to_string()
}

/// Restore rule: the executor died with its task while the agent was down;
/// reattach fails, and the lost attempt is reported killed with nothing
/// left of it, then restarted.
#[test]
fn a_lost_attempt_with_nothing_left_is_said_so() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    web_lost_while_agent_down(&home, first, &second, 1);
    let engine = home.engine();
    let alloc = restore_one(&engine, &second);
    let updates = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    assert_eq!(started_events(&second, &mut events, 1)[0].attempt, 2);
    updates.stop();
    let summary = second
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(
        lost_attempt_end(&summary),
        "Nothing of the lost attempt was running"
    );
}

/// Restore rule: the executor died with its task while the agent was
/// down, and the dead agent had been told to stop the allocation. The lost
/// attempt is the stop's: it ran, so it ends killed, as a stop ends a
/// task, not "not started", and nothing starts again.
#[test]
fn a_lost_attempt_of_a_stopping_alloc_ends_killed() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    let alloc_id = web_lost_while_agent_down(&home, first, &second, 1);
    edit_alloc_record(&home, &alloc_id, |alloc| {
        alloc.desired = DesiredStatus::Stop;
    });
    let engine = home.engine();
    let alloc = restore_one(&engine, &second);
    let summary = second
        .block_on(async { tokio::time::timeout(idle(), alloc.wait()).await })
        .expect("alloc hung");
    let web = &summary.tasks[0];
    assert!(
        !(web.events.iter()).any(|e| e.kind == EventKind::Started && e.attempt > 1),
        "a stopping alloc started again: {:?}",
        web.events
    );
    assert_eq!(
        summary.status.client,
        ClientStatus::Complete,
        "{:?}",
        summary.status
    );
    assert!(
        !web.events.iter().any(|e| e.kind == EventKind::NotStarted),
        "a task that ran was called not started: {:?}",
        web.events
    );
    assert_eq!(
        lost_attempt_end(&summary),
        "Nothing of the lost attempt was running"
    );
    let last = web.events.last().map(|e| e.kind);
    assert_eq!(last, Some(EventKind::Killed), "{:?}", web.events);
}

/// Committing attempt 2 forgets attempt 1's handle at once (a restore in
/// between used to reattach to attempt 1's executor, docs/bugs.md B1):
/// held right after the commit, the persisted record names no executor.
#[test]
fn committing_an_attempt_forgets_the_previous_attempts_handle() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1)]);
    home.faults
        .configure_fault(&"web:tr.start_committed@2=park".parse().unwrap());
    let mut web = task("web", None, false);
    web.restart.attempts = 1;
    web.restart.delay = Duration::ZERO;
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &job(vec![web]));
    let committed = taskgate_faults::scoped(Some("web"), points::TR_START_COMMITTED);
    home.wait_for(Await::Parked(committed.clone()));
    let record = engine.state().tasks(&alloc.alloc_id).unwrap().remove(0);
    assert_eq!(record.committed, Some(2));
    assert_eq!(record.handle, None, "attempt 1's executor still named");
    home.faults.release(Some("web"), points::TR_START_COMMITTED);
    alloc.stop();
    let summary = wait(&rt, alloc);
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// How an attempt ended is persisted before the exited hooks run (an agent
/// killed in them used to restore a completed task as running and start it
/// again, docs/bugs.md B2): held at the first of them, the record already
/// has it.
#[test]
fn an_attempts_end_is_persisted_before_the_exited_hooks() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(3)]);
    let before_hooks = "web:hook.exited.before.executor_shutdown";
    home.faults
        .configure_fault(&format!("{before_hooks}=park").parse().unwrap());
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &job(vec![task("web", None, false)]));
    home.wait_for(Await::Parked(before_hooks.into()));
    let record = engine.state().tasks(&alloc.alloc_id).unwrap().remove(0);
    let ended = record.ended.expect("the end was not persisted");
    assert_eq!(
        (ended.attempt, ended.result.exit_code, ended.by),
        (1, Some(3), EndedBy::Exit)
    );
    home.faults.release_all();
    let summary = wait(&rt, alloc);
    assert_eq!(summary.status.client, ClientStatus::Failed);
}

/// Each attempt's end is recorded under its own number: attempt 2's end
/// is attempt 2's, so a restore that finds it never runs attempt 2 again.
#[test]
fn an_attempts_end_is_recorded_under_its_number() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1), Exit::Code(0)]);
    let mut web = task("web", None, false);
    web.restart.attempts = 1;
    web.restart.delay = Duration::from_millis(1);
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &job(vec![web]));
    let summary = wait(&rt, alloc);
    let web = &summary.tasks[0];
    let ended = web.ended.as_ref().expect("the end is recorded");
    assert_eq!((ended.attempt, ended.result.exit_code), (2, Some(0)));
    let terminated: Vec<u32> = (web.events.iter())
        .filter(|e| e.kind == EventKind::Terminated)
        .map(|e| e.attempt)
        .collect();
    assert_eq!(terminated, [1, 2]);
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// Restore rule: the agent died after its executor started but before the
/// handle was persisted; the restored agent finds the executor at the
/// task's socket and reattaches, instead of starting the attempt again.
#[test]
fn a_restore_without_a_handle_finds_the_executor_at_its_socket() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    let alloc_id = agent_died_while_web_ran(&home, &first, 0);
    first.shutdown_timeout(idle());
    edit_web_record(&home, &alloc_id, |web| web.handle = None);
    let engine = home.engine();
    let alloc = restore_one(&engine, &second);
    alloc.stop();
    let summary = wait(&second, alloc);
    let socket = taskgate_executor::socket_path(&home.data_dir().run(), &alloc_id, "web");
    let reattached: Vec<Call> = (home.driver.calls().into_iter())
        .filter(|c| matches!(c, Call::Reattach { .. }))
        .collect();
    assert_eq!(
        reattached,
        [Call::Reattach {
            socket,
            found: true
        }]
    );
    assert_eq!(home.driver.starts("web"), 1, "{:?}", home.driver.calls());
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// A task that failed while no agent ran, then stopped by the restored
/// agent: the failure came before any runner was told to die, so it is the
/// task's own end, and with no restart left the alloc fails. (The restored
/// runner took it for its kill's, and reported the alloc complete.)
#[test]
fn a_failure_while_the_agent_was_down_is_not_the_restored_stops() {
    let first = runtime();
    let second = runtime();
    let home = Home::new();
    agent_died_while_web_ran(&home, &first, 0);
    first.shutdown_timeout(idle());
    home.driver.exit("web", 1);
    let engine = home.engine();
    let alloc = restore_one(&engine, &second);
    alloc.stop();
    let summary = wait(&second, alloc);
    assert_eq!(summary.status.client, ClientStatus::Failed);
    assert!(home.driver.stops().is_empty(), "an exited task was stopped");
}

/// A user restart whose runner doomed `web` (its peek found it running),
/// then died with its agent before signalling it; `web` failed since. The
/// restored runner carries the dead runner's restart through: `web` runs
/// again, outside its policy (none left). (It took the failure for the
/// task's own, and the policy failed the alloc.)
#[test]
fn a_restart_a_dead_agent_began_is_carried_through() {
    let first = runtime();
    let second = runtime();
    let home = Home::new();
    agent_died_while_web_ran(&home, &first, 0);
    first.shutdown_timeout(idle());
    home.driver.doom("web", Doom::Restart);
    home.driver.exit("web", 1);
    let engine = home.engine();
    let alloc = restore_one(&engine, &second);
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    let started = started_events(&second, &mut events, 1);
    assert_eq!(started[0].attempt, 2);
    control.stop();
    let summary = second
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert_eq!(home.driver.starts("web"), 2);
}

/// A dead agent's runner doomed `web` (for a user restart, or a kill) and
/// persisted it, then `web`'s executor died while no agent ran: the
/// restored runner finds the attempt lost, and the loss is that restart's
/// (`web` runs again, outside its policy, none left) or that kill's (`web`
/// is done, not failed). (The policy judged it, and failed the alloc.)
#[rstest::rstest]
#[case::for_a_restart(Doom::Restart, 2)]
#[case::for_a_kill(Doom::Kill, 1)]
fn a_lost_attempt_a_dead_agent_doomed_ends_as_it_was_told(#[case] by: Doom, #[case] starts: usize) {
    let second = runtime();
    let home = Home::new();
    let alloc_id = web_lost_while_agent_down(&home, runtime(), &second, 0);
    edit_web_record(&home, &alloc_id, |web| {
        web.doomed = Some(DoomedAttempt { attempt: 1, by });
    });
    let engine = home.engine();
    let alloc = restore_one(&engine, &second);
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    if by == Doom::Restart {
        assert_eq!(started_events(&second, &mut events, 1)[0].attempt, 2);
        control.stop();
    }
    let summary = second
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert_eq!(home.driver.starts("web"), starts);
}

/// A dead agent's runner doomed `web` for a user restart and persisted it,
/// but its peek never reached the executor; the restored runner reattaches,
/// and the executor dies before it answers whether `web` was doomed. The
/// record's word stands: the loss is that restart's (here, with a stop,
/// the stop's), never the policy's (no restart left: the task failed).
#[test]
fn a_doom_the_executor_cannot_tell_is_read_from_the_record() {
    let second = runtime();
    let home = Home::new();
    let first = runtime();
    let alloc_id = agent_died_while_web_ran(&home, &first, 0);
    first.shutdown_timeout(idle());
    edit_web_record(&home, &alloc_id, |web| {
        web.doomed = Some(DoomedAttempt {
            attempt: 1,
            by: Doom::Restart,
        });
    });
    let reattached = scoped(Some("web"), points::TR_REATTACHED);
    home.faults
        .configure_fault(&format!("{reattached}=park").parse().unwrap());
    let engine = home.engine();
    let alloc = restore_one(&engine, &second);
    home.wait_for(Await::Parked(reattached));
    home.driver.lose_executor("web");
    home.faults.release(Some("web"), points::TR_REATTACHED);
    alloc.stop();
    let summary = wait(&second, alloc);
    assert_eq!(
        summary.status.client,
        ClientStatus::Complete,
        "{:?}",
        summary.tasks[0].events.last()
    );
}

/// A user restart of the alloc had `web` doomed, and found the prestart
/// sidecar `proxy` already exited on its own: its runner kept the restart
/// as owed, in the write that recorded the end, and the agent died before
/// the runner wrote `proxy` pending. The restored agent shows `proxy`
/// pending until the owed restart is carried through, so `web`, which
/// starts after it, waits for it as in the restart of a live agent. (Shown
/// running, it let `web` start again first; `proxy`'s runner is held
/// 300 ms as it restores, the window that took.)
#[test]
fn a_restart_owed_across_a_restore_holds_the_tasks_after_it() {
    let first = runtime();
    let second = runtime();
    let home = Home::new();
    let mut proxy = task("proxy", Some(LifecycleHook::Prestart), true);
    proxy.restart.attempts = 1;
    proxy.restart.delay = Duration::from_secs(3600);
    let engine = home.engine();
    let alloc = submit(&first, &engine, &job(vec![proxy, task("web", None, false)]));
    let alloc_id = alloc.alloc_id.clone();
    let (mut events, _waiter) = alloc.into_parts();
    started_events(&first, &mut events, 2);
    drop(engine);
    first.shutdown_timeout(idle());
    home.driver.exit("proxy", 0);
    home.driver.doom("web", Doom::Restart);
    edit_task_record(&home, &alloc_id, "proxy", |proxy| {
        proxy.ended = Some(AttemptEnded {
            attempt: 1,
            result: ExitResult::with_code(0),
            by: EndedBy::Exit,
        });
        proxy.restart_owed = Some(1);
    });
    edit_web_record(&home, &alloc_id, |web| {
        web.doomed = Some(DoomedAttempt {
            attempt: 1,
            by: Doom::Restart,
        });
    });
    let restoring = scoped(Some("proxy"), points::TR_RESTORING);
    home.faults
        .configure_fault(&format!("{restoring}=delay(300)").parse().unwrap());
    let engine = home.engine();
    let alloc = restore_one(&engine, &second);
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    started_events(&second, &mut events, 2);
    control.stop();
    let summary = second
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert_eq!(
        starts_in_order(&home.driver),
        ["proxy", "web", "proxy", "web"],
        "web started again before proxy"
    );
}
