//! In-place updates against the fake driver: taken between attempts,
//! whole, and never undoing a stop.

mod support;

use std::time::Duration;
use support::*;
use taskgate_engine::alloc::{AllocUpdate, DesiredStatus};
use taskgate_engine::fake_driver::{Exit, FakeDriver};
use taskgate_engine::jobspec::{Job, LifecycleHook};
use taskgate_engine::task_state::EventKind;
use taskgate_engine::ClientStatus;
use taskgate_faults::{points, Await};

/// Only an update that makes the alloc terminal starts the kill path.
#[test]
fn an_update_that_does_not_stop_the_alloc_kills_nothing() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &report_job());
    home.wait_for(Await::Passed(taskgate_faults::scoped(
        Some("sidecar"),
        points::TR_AFTER_DRIVER_START,
    )));
    alloc.update(AllocUpdate {
        desired_status: DesiredStatus::Run,
        job: None,
    });
    home.wait_for(Await::Passed(points::AR_UPDATE_APPLIED.into()));
    let stops = home.driver.stops();
    assert!(stops.is_empty(), "{stops:?}");
    alloc.stop();
    let summary = wait(&rt, alloc);
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// `job` as version `version`, with every task's env `V` and meta `v` set
/// to it.
fn version(job: &Job, version: u64) -> Job {
    let mut job = job.clone();
    job.version = version;
    for task in &mut job.groups[0].tasks {
        task.env.insert("V".into(), version.to_string());
        task.meta.insert("v".into(), version.to_string());
    }
    job
}

/// The `V` and `NOMAD_META_v` each of `task`'s starts got.
fn versions_started(driver: &FakeDriver, task: &str) -> Vec<(String, String)> {
    (driver.envs(task).into_iter())
        .map(|env| (env["V"].clone(), env["NOMAD_META_v"].clone()))
        .collect()
}

fn pair(v: &str) -> (String, String) {
    (v.to_string(), v.to_string())
}

/// A batch task that fails, exits 1 again, then succeeds: with the
/// original policy (one restart) it would give up on its second failure.
fn failing_twice() -> Job {
    let mut web = task("web", None, false);
    web.restart.attempts = 1;
    web.restart.delay = Duration::from_millis(1);
    version(&job(vec![web]), 1)
}

/// An in-place update reaching a running attempt holds from the next one:
/// its env and meta together, its restart policy from the next decision;
/// it is persisted, and taken once.
#[test]
fn an_in_place_update_holds_from_the_next_attempt() {
    let rt = runtime();
    let home = Home::new();
    home.driver
        .script("web", [Exit::Code(1), Exit::Code(1), Exit::Code(0)]);
    home.faults
        .configure_fault(&"web:tr.after_driver_start@1=park".parse().unwrap());
    let engine = home.engine();
    let v1 = failing_twice();
    let alloc = submit(&rt, &engine, &v1);
    home.wait_for(Await::Parked(taskgate_faults::scoped(
        Some("web"),
        points::TR_AFTER_DRIVER_START,
    )));
    let mut v2 = version(&v1, 2);
    v2.groups[0].tasks[0].restart.attempts = 2;
    alloc.update(AllocUpdate::in_place(v2.clone()));
    home.wait_for(Await::Passed(points::AR_UPDATE_APPLIED.into()));
    let persisted = engine.state().alloc(&alloc.alloc_id).unwrap().unwrap();
    assert_eq!(persisted.job, v2);
    home.faults
        .release(Some("web"), points::TR_AFTER_DRIVER_START);
    // The record keeps the last 10 events; the stream carries every one.
    let (mut events, waiter) = alloc.into_parts();
    let summary = rt
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(
        versions_started(&home.driver, "web"),
        [pair("1"), pair("2"), pair("2")]
    );
    let mut updated = Vec::new();
    while let Ok(e) = events.try_recv() {
        if e.kind == EventKind::Updated {
            updated.push(format!("{}: {}", e.attempt, e.message));
        }
    }
    assert_eq!(
        updated,
        [
            "1: Environment changed for the next attempt: NOMAD_META_v, V",
            "1: Updated in place: env, meta, restart"
        ]
    );
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// An update that is not newer, or changes what only a new alloc can
/// take, is refused whole: no task takes any of it.
#[rstest::rstest]
#[case::not_newer(|job: &mut Job| job.version = 1)]
#[case::new_command(|job: &mut Job| job.groups[0].tasks[1].command = "/bin/other".into())]
#[case::over_arg_max(|job: &mut Job| {
    for n in 0..64 {
        job.groups[0].tasks[1].env.insert(format!("BIG{n}"), "x".repeat(100 * 1024));
    }
})]
#[case::unexecable_env(|job: &mut Job| { job.groups[0].tasks[1].env.insert("A=B".into(), "x".into()); })]
fn an_update_that_cannot_apply_in_place_is_refused_whole(#[case] spoil: fn(&mut Job)) {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1), Exit::Code(0)]);
    home.driver.script("other", [Exit::Code(0)]);
    home.faults
        .configure_fault(&"web:tr.after_driver_start@1=park".parse().unwrap());
    let engine = home.engine();
    let mut v1 = failing_twice();
    v1.groups[0].tasks.push(task("other", None, false));
    let alloc = submit(&rt, &engine, &v1);
    home.wait_for(Await::Parked(taskgate_faults::scoped(
        Some("web"),
        points::TR_AFTER_DRIVER_START,
    )));
    let mut v2 = version(&v1, 2);
    spoil(&mut v2);
    alloc.update(AllocUpdate::in_place(v2));
    home.wait_for(Await::Passed(points::AR_UPDATE_APPLIED.into()));
    let persisted = engine.state().alloc(&alloc.alloc_id).unwrap().unwrap();
    assert_eq!(persisted.job, v1);
    home.faults
        .release(Some("web"), points::TR_AFTER_DRIVER_START);
    let summary = wait(&rt, alloc);
    assert_eq!(
        versions_started(&home.driver, "web"),
        [pair("1"), pair("1")]
    );
    assert!(summary
        .tasks
        .iter()
        .all(|t| t.events.iter().all(|e| e.kind != EventKind::Updated)));
}

/// An update hook that fails leaves the runner on its old definition, and
/// the update is offered again at the next boundary: never lost, never
/// half-taken.
#[test]
fn a_failed_update_hook_leaves_the_update_for_the_next_boundary() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1), Exit::Code(0)]);
    home.faults
        .configure_fault(&"web:tr.after_driver_start@1=park".parse().unwrap());
    home.faults
        .configure_fault(&"web:hook.update.before.task_env@1=error".parse().unwrap());
    let engine = home.engine();
    let v1 = failing_twice();
    let alloc = submit(&rt, &engine, &v1);
    home.wait_for(Await::Parked(taskgate_faults::scoped(
        Some("web"),
        points::TR_AFTER_DRIVER_START,
    )));
    alloc.update(AllocUpdate::in_place(version(&v1, 2)));
    home.wait_for(Await::Passed(points::AR_UPDATE_APPLIED.into()));
    home.faults
        .release(Some("web"), points::TR_AFTER_DRIVER_START);
    let summary = wait(&rt, alloc);
    assert_eq!(
        versions_started(&home.driver, "web"),
        [pair("1"), pair("2")]
    );
    let kinds: Vec<(EventKind, u32)> = (summary.tasks[0].events.iter())
        .filter(|e| matches!(e.kind, EventKind::Updated | EventKind::HookFailed))
        .map(|e| (e.kind, e.attempt))
        .collect();
    assert_eq!(
        kinds,
        [
            (EventKind::HookFailed, 1),
            (EventKind::Updated, 2),
            (EventKind::Updated, 2)
        ]
    );
}

/// A stop is final: an in-place update delivered after it (its desired
/// status is `run`) is taken as a version, never as a new start. The
/// poststop task, held, keeps the alloc alive until the update is applied.
#[test]
fn an_update_after_a_stop_does_not_undo_it() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("cleanup", [Exit::Code(0)]);
    home.faults
        .configure_fault(&"cleanup:tr.start_condition_met=park".parse().unwrap());
    home.faults
        .configure_fault(&"ar.update_applied@2=park".parse().unwrap());
    let engine = home.engine();
    let tasks = vec![
        task("web", None, false),
        task("cleanup", Some(LifecycleHook::Poststop), false),
    ];
    let v1 = version(&job(tasks), 1);
    let alloc = submit(&rt, &engine, &v1);
    home.wait_for(Await::Passed(taskgate_faults::scoped(
        Some("web"),
        points::TR_AFTER_DRIVER_START,
    )));
    alloc.stop();
    alloc.update(AllocUpdate::in_place(version(&v1, 2)));
    home.wait_for(Await::Parked(points::AR_UPDATE_APPLIED.into()));
    let persisted = engine.state().alloc(&alloc.alloc_id).unwrap().unwrap();
    assert_eq!(
        (persisted.desired, persisted.job.version),
        (DesiredStatus::Stop, 2)
    );
    home.faults.release(None, points::AR_UPDATE_APPLIED);
    home.faults
        .release(Some("cleanup"), points::TR_START_CONDITION_MET);
    let summary = wait(&rt, alloc);
    assert_eq!(summary.status.desired, DesiredStatus::Stop);
    assert_eq!(
        (home.driver.starts("web"), home.driver.starts("cleanup")),
        (1, 1)
    );
}
