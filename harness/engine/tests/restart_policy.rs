//! The restart policy across restores, user restarts and intervals,
//! against the fake driver; restart windows on the engine's virtual clock,
//! where the host's would take minutes.

mod support;

use serial_test::serial;
use std::sync::Arc;
use std::time::Duration;
use support::*;
use taskgate_engine::clock::{Clock, SystemClock, VirtualClock};
use taskgate_engine::driver::Driver;
use taskgate_engine::fake_driver::Exit;
use taskgate_engine::jobspec::{Job, JobType, RestartMode, RestartPolicy, Task};
use taskgate_engine::task_state::EventKind;
use taskgate_engine::{ClientStatus, RestartScope};
use taskgate_faults::{points, scoped, Await};

const MINUTE: Duration = Duration::from_secs(60);

fn policy(attempts: u32, interval: Duration, delay: Duration) -> RestartPolicy {
    RestartPolicy {
        attempts,
        interval,
        delay,
        mode: RestartMode::Fail,
    }
}

fn web_with(restart: RestartPolicy) -> Task {
    let mut web = task("web", None, false);
    web.restart = restart;
    web
}

/// The last event of `task` in `summary`, kind and message.
fn last_event(summary: &taskgate_engine::AllocSummary, task: &str) -> (EventKind, String) {
    let record = (summary.tasks.iter().find(|t| t.task == task)).expect("task");
    let last = record.events.last().expect("an event");
    (last.kind, last.message.clone())
}

/// Bug 1: the executor died with its task while the agent was down and the
/// policy allows no restart; the restored agent finds the attempt lost. It
/// should decide by the policy (the task fails); it starts attempt 2.
#[test]
#[serial]
fn a_lost_attempt_at_restore_is_decided_by_the_policy() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    let alloc_id = agent_died_while_web_ran(&home, &first, 0);
    first.shutdown_timeout(idle());
    second
        .block_on(home.driver.destroy_remains(&alloc_id, "web"))
        .unwrap();
    let engine = home.engine();
    let alloc = {
        let _rt = second.enter();
        engine.restore().unwrap().allocs.remove(0)
    };
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    // BUG 1: attempt 2 starts, no restart decided, none counted.
    assert_eq!(started_events(&second, &mut events, 1)[0].attempt, 2);
    control.stop();
    let summary = second
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(summary.tasks[0].restarts, 0, "bug 1 counts nothing");
}

/// A service alloc: `other` runs until stopped; `web` exits 0 at once the
/// first time (then runs until stopped), restarted on success with
/// `attempts` left and a half-hour delay.
fn exit_0_job() -> Job {
    let mut web = web_with(policy(2, 60 * MINUTE, 30 * MINUTE));
    web.restart.mode = RestartMode::Fail;
    Job {
        job_type: JobType::Service,
        ..job(vec![task("other", None, false), web])
    }
}

/// Bug 2: a user restart reaches `web` as it exits 0 (its stop answers
/// "already exited"). The runner takes the exit for an ordinary one and
/// waits out the restart delay (here on the virtual clock: it moves by the
/// whole half hour) before the restart is acknowledged, and counts it.
#[test]
#[serial]
fn a_restart_that_meets_an_exit_0_is_the_restarts() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(0)]);
    let clock = Arc::new(VirtualClock::default());
    let engine = home.engine_on(clock.clone());
    let after_start = scoped(Some("web"), points::TR_AFTER_DRIVER_START);
    taskgate_faults::configure_fault(&format!("{after_start}=park").parse().unwrap());
    let alloc = submit(&rt, &engine, &exit_0_job());
    wait_for(Await::Passed(scoped(
        Some("other"),
        points::TR_AFTER_DRIVER_START,
    )));
    wait_for(Await::Parked(after_start.clone()));
    let restarted = rt.spawn(alloc.control().restart(RestartScope::Running));
    wait_for(Await::Passed(scoped(Some("web"), points::TR_RESTART_ASKED)));
    taskgate_faults::release(Some("web"), points::TR_AFTER_DRIVER_START);
    let done = rt.block_on(async { tokio::time::timeout(idle(), restarted).await });
    assert_eq!(done.expect("restart hung").unwrap(), Ok(()));
    // BUG 2: the restart waited out web's delay (and its jitter), and it
    // was counted.
    assert!(clock.now() >= 30 * MINUTE, "{:?}", clock.now());
    alloc.stop();
    let summary = wait(&rt, alloc);
    let web = summary.tasks.iter().find(|t| t.task == "web").unwrap();
    assert_eq!(web.restarts, 1);
}

/// `web` fails at once; restarted (one attempt per `interval`) after 10 s
/// on `clock`; its second attempt runs until the fake ends it.
fn failed_once(
    rt: &tokio::runtime::Runtime,
    home: &Home,
    clock: &Arc<VirtualClock>,
    job: &Job,
) -> String {
    home.driver.script("web", [Exit::Code(1)]);
    let engine = home.engine_on(clock.clone());
    let alloc = submit(rt, &engine, job);
    let alloc_id = alloc.alloc_id.clone();
    let (mut events, _waiter) = alloc.into_parts();
    assert_eq!(started_events(rt, &mut events, 2)[1].attempt, 2);
    // The restart delay and its jitter, on the virtual clock.
    assert!(clock.now() >= Duration::from_secs(10), "{:?}", clock.now());
    drop(engine);
    alloc_id
}

/// Bug 3: the agent restarts while attempt 2 runs, an hour after the
/// restart (one per 10 min); attempt 2 then fails. Its interval expired
/// long ago, so it should be restarted; the restored tracker's window
/// begins at the restore with the task's one restart in it, and gives up.
#[test]
#[serial]
fn a_restore_keeps_the_restart_window() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    let clock = Arc::new(VirtualClock::default());
    let job = job(vec![web_with(policy(
        1,
        10 * MINUTE,
        Duration::from_secs(10),
    ))]);
    failed_once(&first, &home, &clock, &job);
    first.shutdown_timeout(idle());
    clock.advance(60 * MINUTE);
    let engine = home.engine_on(clock.clone());
    let alloc = {
        let _rt = second.enter();
        engine.restore().unwrap().allocs.remove(0)
    };
    home.driver.exit("web", 1);
    let summary = wait(&second, alloc);
    // BUG 3: "Exceeded allowed attempts", and the alloc fails.
    assert_eq!(summary.status.client, ClientStatus::Failed);
    let (kind, message) = last_event(&summary, "web");
    assert_eq!(kind, EventKind::NotRestarting, "{message}");
    assert!(
        message.starts_with("Exceeded allowed attempts"),
        "{message}"
    );
}

/// Bug 3's twin: a restart of all tasks brings back `web` (completed an
/// hour after its one restart); its next failure is judged in a window
/// that begins at the revival, holding that old restart.
#[test]
#[serial]
fn a_revived_task_keeps_its_restart_window() {
    let rt = runtime();
    let home = Home::new();
    let clock = Arc::new(VirtualClock::default());
    home.driver
        .script("web", [Exit::Code(1), Exit::Code(0), Exit::Code(1)]);
    let web = web_with(policy(1, 10 * MINUTE, Duration::from_secs(10)));
    let engine = home.engine_on(clock.clone());
    let alloc = submit(&rt, &engine, &job(vec![task("other", None, false), web]));
    wait_for(Await::Passed(scoped(Some("web"), points::TR_MAIN_EXITED)));
    clock.advance(60 * MINUTE);
    let control = alloc.control();
    let restarted = rt.block_on(control.restart(RestartScope::All));
    assert_eq!(restarted, Ok(()));
    let summary = wait(&rt, alloc);
    // BUG 3: the revived task's third attempt fails, and is not restarted.
    assert_eq!(home.driver.starts("web"), 3);
    assert_eq!(summary.status.client, ClientStatus::Failed);
    let (kind, message) = last_event(&summary, "web");
    assert_eq!(kind, EventKind::NotRestarting, "{message}");
}

/// The agent dies inside a restart delay (an hour long here): the
/// restored agent skips the rest of it and starts the next attempt at once.
#[test]
#[serial]
fn a_restart_delay_cut_short_by_an_agent_kill() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1)]);
    let job = job(vec![web_with(policy(1, 60 * MINUTE, 60 * MINUTE))]);
    let engine = home.engine_on(Arc::new(SystemClock::default()));
    let alloc = submit(&first, &engine, &job);
    wait_for(Await::Passed(scoped(Some("web"), points::TR_RESTART_DELAY)));
    drop(alloc);
    drop(engine);
    first.shutdown_timeout(idle());
    let engine = home.engine_on(Arc::new(SystemClock::default()));
    let alloc = {
        let _rt = second.enter();
        engine.restore().unwrap().allocs.remove(0)
    };
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    // The rest of the hour is skipped: attempt 2 starts now.
    assert_eq!(started_events(&second, &mut events, 1)[0].attempt, 2);
    control.stop();
    second
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
}
