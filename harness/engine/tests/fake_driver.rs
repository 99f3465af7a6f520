//! The engine's lifecycle, stop-race and kill logic against the fake
//! driver: no root, no processes, orders forced through fault points.

mod support;

use std::sync::Arc;
use std::time::Duration;
use support::*;
use taskgate_engine::clock::{Clock, VirtualClock};
use taskgate_engine::fake_driver::{Call, Exit};
use taskgate_engine::jobspec::{Job, JobType, LifecycleHook};
use taskgate_engine::state::StateDb;
use taskgate_engine::task_state::{EventKind, Outcome, TaskEvent, TaskState};
use taskgate_engine::{ClientStatus, DesiredStatus};
use taskgate_faults::{points, Action, Await};

#[test]
fn tasks_start_in_lifecycle_order_and_a_stop_ends_them_all() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("init", [Exit::Code(0)]);
    home.driver.script("cleanup", [Exit::Code(0)]);
    let engine = home.engine();
    let alloc = submit(
        &rt,
        &engine,
        &job(vec![
            task("cleanup", Some(LifecycleHook::Poststop), false),
            task("sidecar", Some(LifecycleHook::Poststart), true),
            task("web", None, false),
            task("init", Some(LifecycleHook::Prestart), false),
        ]),
    );
    home.wait_for(Await::Passed(taskgate_faults::scoped(
        Some("sidecar"),
        points::TR_AFTER_DRIVER_START,
    )));
    alloc.stop();
    let summary = wait(&rt, alloc);
    assert_eq!(
        starts_in_order(&home.driver),
        ["init", "web", "sidecar", "cleanup"]
    );
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert!(summary.tasks.iter().all(|t| t.state.is_dead()));
    assert!(home.driver.live().is_empty(), "{:?}", home.driver.live());
}

/// Nomad's kill order (#13055): the leader, then the other main task, then
/// the sidecar, each told only once the ones before it are dead (the fake's
/// stop ends a task at once, so a Stop call after another means after its
/// death).
#[test]
fn a_stop_kills_the_leader_then_the_main_tasks_then_the_sidecars() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let mut leader = task("leader", None, false);
    leader.leader = true;
    let alloc = submit(
        &rt,
        &engine,
        &job(vec![
            task("proxy", Some(LifecycleHook::Poststart), true),
            task("worker", None, false),
            leader,
        ]),
    );
    home.wait_for(Await::Passed(taskgate_faults::scoped(
        Some("proxy"),
        points::TR_AFTER_DRIVER_START,
    )));
    alloc.stop();
    let summary = wait(&rt, alloc);
    assert_eq!(stopped(&home.driver), ["leader", "worker", "proxy"]);
    // Told only once dead: each kill after the previous wave's exit.
    let history = home.faults.history();
    let at = |task: &str, point: &str| {
        history
            .iter()
            .position(|h| h.is(Some(task), point))
            .unwrap_or_else(|| panic!("{task}:{point} never reached"))
    };
    assert!(at("leader", points::EX_TASK_EXITED) < at("worker", points::TR_KILLING));
    assert!(at("worker", points::EX_TASK_EXITED) < at("proxy", points::TR_KILLING));
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// The report's race, forced: the sidecar is held before its prestart while
/// the stop is applied; released, it must never reach the driver.
#[test]
fn a_stop_before_the_sidecar_prestart_never_starts_it() {
    let rt = runtime();
    let home = Home::new();
    home.faults
        .configure(Some("sidecar"), points::TR_BEFORE_PRESTART, Action::Park);
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &report_job());
    home.wait_for(Await::Parked(taskgate_faults::scoped(
        Some("sidecar"),
        points::TR_BEFORE_PRESTART,
    )));
    alloc.stop();
    // The alloc is terminal and the runners were told; the kill path now
    // waits for the held sidecar, which goes on from where it was held.
    home.wait_for(Await::Passed(points::AR_TASK_RUNNERS_UPDATED.into()));
    home.faults
        .release(Some("sidecar"), points::TR_BEFORE_PRESTART);
    let summary = wait(&rt, alloc);
    assert_eq!(
        home.driver.starts("sidecar"),
        0,
        "{:?}",
        home.driver.calls()
    );
    let sidecar = summary.tasks.iter().find(|t| t.task == "sidecar").unwrap();
    assert!(matches!(
        &sidecar.state,
        TaskState::Dead {
            outcome: Outcome::NeverStarted { .. }
        }
    ));
    // Its prestart hooks never ran either: the runner saw the alloc terminal.
    assert!(
        !sidecar
            .events
            .iter()
            .any(|e| e.kind == EventKind::TaskSetup),
        "{:?}",
        sidecar.events
    );
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// The leader's exit ends the alloc: the other tasks are killed.
#[test]
fn the_leaders_exit_kills_the_other_tasks() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("leader", [Exit::Code(0)]);
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &report_job());
    let summary = wait(&rt, alloc);
    assert_eq!(summary.status.client, ClientStatus::Complete);
    // Killed, or never started if the kill came first.
    let sidecar = summary.tasks.iter().find(|t| t.task == "sidecar").unwrap();
    assert!(
        matches!(
            &sidecar.state,
            TaskState::Dead {
                outcome: Outcome::Killed { .. } | Outcome::NeverStarted { .. }
            }
        ),
        "{:?}",
        sidecar.state
    );
    assert!(home.driver.live().is_empty());
}

/// Nomad's `onSuccess`: a service's task that exits 0 is restarted, and
/// those restarts count against its policy; once the policy gives up the
/// task has failed. A batch task's exit 0 is its completion.
#[rstest::rstest]
#[case::service(JobType::Service, 3, ClientStatus::Failed)]
#[case::batch(JobType::Batch, 1, ClientStatus::Complete)]
fn a_success_restarts_a_service_and_completes_a_batch(
    #[case] job_type: JobType,
    #[case] starts: usize,
    #[case] status: ClientStatus,
) {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(0); 3]);
    let mut web = task("web", None, false);
    web.restart.attempts = 2;
    web.restart.delay = Duration::from_millis(10);
    let engine = home.engine();
    let job = Job {
        job_type,
        ..job(vec![web])
    };
    let alloc = submit(&rt, &engine, &job);
    let summary = wait(&rt, alloc);
    assert_eq!(starts_in_order(&home.driver).len(), starts);
    assert_eq!(summary.status.client, status);
    let web = &summary.tasks[0];
    assert_eq!(web.restarts as usize, starts - 1);
    let last = web.events.last().unwrap();
    assert_eq!(last.fails_task, status == ClientStatus::Failed, "{last:?}");
}

/// A task record keeps its last 10 events, as Nomad caps them; the alloc's
/// event stream still carries every one.
#[test]
fn a_task_keeps_its_last_ten_events_and_the_stream_carries_all() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1); 6]);
    let mut web = task("web", None, false);
    web.restart.attempts = 5;
    web.restart.delay = Duration::from_millis(1);
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &job(vec![web]));
    let (mut stream, waiter) = alloc.into_parts();
    let summary = rt
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    let mut streamed = Vec::new();
    while let Ok(event) = stream.try_recv() {
        streamed.push(event);
    }
    let kept = &summary.tasks[0].events;
    let started = |events: &[TaskEvent]| {
        events
            .iter()
            .filter(|e| e.kind == EventKind::Started)
            .count()
    };
    assert_eq!(started(&streamed), 6, "{streamed:#?}");
    assert!(streamed.len() > 10);
    assert_eq!(kept.len(), 10);
    assert_eq!(kept[..], streamed[streamed.len() - 10..]);
    drop(engine);
    let persisted = StateDb::open(&home.data_dir().state_db())
        .unwrap()
        .tasks(&summary.alloc_id)
        .unwrap();
    assert_eq!(&persisted[0].events, kept);
}

/// Nomad's `shutdown_delay`: told to die, the leader first waits its delay
/// (on the engine's clock, exactly, and with an event), and only then gets
/// its signal; the kill order stays, and a task without a delay waits none.
#[test]
fn a_shutdown_delay_holds_the_kill_signal_back() {
    let rt = runtime();
    let home = Home::new();
    let clock = Arc::new(VirtualClock::default());
    let engine = home.engine_on(clock.clone());
    let mut leader = task("leader", None, false);
    leader.leader = true;
    leader.shutdown_delay = Duration::from_secs(7);
    let alloc = submit(
        &rt,
        &engine,
        &job(vec![
            leader,
            task("worker", None, false),
            task("proxy", Some(LifecycleHook::Poststart), true),
        ]),
    );
    home.wait_for(Await::Passed(taskgate_faults::scoped(
        Some("proxy"),
        points::TR_AFTER_DRIVER_START,
    )));
    let before = clock.now();
    alloc.stop();
    let (mut stream, waiter) = alloc.into_parts();
    let summary = rt
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(clock.now() - before, Duration::from_secs(7));
    let mut told = Vec::new();
    while let Ok(e) = stream.try_recv() {
        if matches!(e.kind, EventKind::WaitingShutdownDelay | EventKind::Killing) {
            told.push((e.task, e.kind));
        }
    }
    let told: Vec<(&str, EventKind)> = told.iter().map(|(t, k)| (t.as_str(), *k)).collect();
    assert_eq!(
        told,
        [
            ("leader", EventKind::WaitingShutdownDelay),
            ("leader", EventKind::Killing),
            ("worker", EventKind::Killing),
            ("proxy", EventKind::Killing),
        ]
    );
    assert_eq!(stopped(&home.driver), ["leader", "worker", "proxy"]);
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// Nomad's client status, persisted as it goes: `running` once a task
/// runs. The coordinator persists it in the same pass that opens the
/// poststart sidecar's start condition, so it is on disk once the sidecar
/// is let go; the end is `complete`.
#[test]
fn the_client_status_is_running_while_tasks_run() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &report_job());
    let client = || {
        let record = engine.state().alloc(&alloc.alloc_id).unwrap().unwrap();
        record.client
    };
    home.wait_for(Await::Passed(taskgate_faults::scoped(
        Some("sidecar"),
        points::TR_START_CONDITION_MET,
    )));
    assert_eq!(client(), ClientStatus::Running);
    alloc.stop();
    let summary = wait(&rt, alloc);
    assert_eq!(summary.status.client, ClientStatus::Complete);
    let record = engine.state().alloc(&summary.alloc_id).unwrap().unwrap();
    assert_eq!(record.client, ClientStatus::Complete);
}

/// A task runner that panics after its task started: the cleanup kills
/// the task (found at its socket, its handle not yet persisted), records
/// it dead and failed, with Nomad's failed flag on its last event, and the
/// alloc fails instead of waiting on a runner that is gone.
#[test]
fn a_panicked_runner_kills_its_task_and_fails_it() {
    let rt = runtime();
    let home = Home::new();
    home.faults
        .configure_fault(&"web:tr.after_driver_start=panic".parse().unwrap());
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &job(vec![task("web", None, false)]));
    let summary = wait(&rt, alloc);
    assert_eq!(
        home.driver.stops(),
        [Call::Stop {
            task: "web".into(),
            signal: taskgate_executor::KillSignal::SIGKILL
        }]
    );
    assert!(home.driver.live().is_empty());
    let web = &summary.tasks[0];
    assert!(
        matches!(
            &web.state,
            TaskState::Dead {
                outcome: Outcome::Failed { .. }
            }
        ),
        "{:?}",
        web.state
    );
    let last = web.events.last().unwrap();
    assert_eq!(last.kind, EventKind::NotRestarting);
    assert!(last.fails_task && last.message.contains("task runner panicked"));
    assert_eq!(summary.status.client, ClientStatus::Failed);
}

/// A stop that reaches the alloc as its last task dies is applied (the
/// update handler finishes it before the alloc is done), and the alloc's
/// summary says so: it was taken before the update handler finished, with
/// the desired status `run` that the stop then changed in the record (a
/// gate run judged it "a stop made the alloc terminal, but it ended with
/// its desired status `run`", under heavy load).
#[test]
fn a_stop_taken_as_the_alloc_finishes_is_in_its_summary() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1)]);
    home.faults
        .configure_fault(&"web:tr.after_driver_start=park".parse().unwrap());
    home.faults
        .configure_fault(&"ar.update_received=park".parse().unwrap());
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &job(vec![task("web", None, false)]));
    let alloc_id = alloc.alloc_id.clone();
    home.wait_for(Await::Parked(taskgate_faults::scoped(
        Some("web"),
        points::TR_AFTER_DRIVER_START,
    )));
    alloc.stop();
    home.wait_for(Await::Parked(points::AR_UPDATE_RECEIVED.into()));
    // The task fails and the alloc finishes while the stop is held.
    home.faults
        .release(Some("web"), points::TR_AFTER_DRIVER_START);
    home.wait_for(Await::Passed(points::AR_FINISHED.into()));
    home.faults.release(None, points::AR_UPDATE_RECEIVED);
    let summary = wait(&rt, alloc);
    let persisted = engine
        .state()
        .alloc(&alloc_id)
        .unwrap()
        .expect("the alloc's record");
    assert_eq!(persisted.desired, DesiredStatus::Stop);
    assert_eq!(persisted.client, ClientStatus::Failed);
    assert_eq!(
        summary.status.desired,
        DesiredStatus::Stop,
        "the summary hides the stop the alloc took"
    );
    assert_eq!(summary.status.client, ClientStatus::Failed);
}
