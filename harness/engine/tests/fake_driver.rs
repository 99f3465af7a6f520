//! The engine's lifecycle, stop-race and restore logic against the fake
//! driver: no root, no processes, orders forced through fault points.

use serial_test::serial;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use taskgate_engine::alloc::{AllocUpdate, DesiredStatus};
use taskgate_engine::clock::{Clock, SystemClock, VirtualClock};
use taskgate_engine::driver::Driver;
use taskgate_engine::fake_driver::{Call, Exit, FakeDriver};
use taskgate_engine::jobspec::{Group, Job, JobType, Lifecycle, LifecycleHook, Task};
use taskgate_engine::state::{AttemptEnded, EndedBy, StateDb, TaskRecord};
use taskgate_engine::task_state::{EventKind, Outcome, TaskEvent, TaskState};
use taskgate_engine::{
    AllocControl, AllocHandle, AllocSummary, ClientStatus, Engine, EngineConfig, RestartRefused,
    RestartScope,
};
use taskgate_executor::ExitResult;
use taskgate_faults::{points, Action, Await};

fn idle() -> Duration {
    taskgate_faults::patience::step()
}

/// An engine home in a temp dir, run as whoever runs the tests. Declared
/// after the test's runtimes, it drops first: its reset releases any thread
/// still parked, so a failing test cannot hang in the runtime's drop.
struct Home {
    dir: tempfile::TempDir,
    driver: FakeDriver,
}

impl Drop for Home {
    fn drop(&mut self) {
        taskgate_faults::reset();
    }
}

impl Home {
    /// Overwrites `alloc_id`'s record in the state database with bytes
    /// that are not a record.
    fn corrupt_alloc_record(&self, alloc_id: &str) {
        let state =
            taskgate_engine::state::StateDb::open(&self.dir.path().join("data/state.db")).unwrap();
        state.put_raw_alloc(alloc_id, b"{\"alloc_id\": 7}").unwrap();
    }

    fn new() -> Home {
        taskgate_faults::reset();
        let dir = tempfile::tempdir().unwrap();
        let driver = FakeDriver::new(dir.path().join("data/run"));
        Home { dir, driver }
    }

    fn engine(&self) -> Engine {
        self.engine_on(Arc::new(SystemClock::default()))
    }

    /// An engine whose restart and shutdown delays run on `clock`.
    fn engine_on(&self, clock: Arc<dyn Clock>) -> Engine {
        let me = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .expect("the test's own user");
        let config = EngineConfig {
            data_dir: self.dir.path().join("data"),
            executor_bin: "/nonexistent".into(),
            chroot_env: BTreeMap::new(),
            default_user: me.name,
            pids_max: 8,
            clock,
            restart_seed: 0,
            cgroup_parent: FakeDriver::cgroup_parent(),
        };
        Engine::open_with(config, Arc::new(self.driver.clone())).unwrap()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
}

fn task(name: &str, hook: Option<LifecycleHook>, sidecar: bool) -> Task {
    let mut t = Task::new(name, "/bin/true", vec![]);
    t.lifecycle = hook.map(|hook| Lifecycle { hook, sidecar });
    t.restart.attempts = 0;
    t
}

/// A batch job: a task's exit 0 is its end.
fn job(tasks: Vec<Task>) -> Job {
    Job {
        name: "j".into(),
        version: 0,
        job_type: JobType::Batch,
        groups: vec![Group {
            name: "g".into(),
            tasks,
        }],
    }
}

/// The report's alloc: a leader and a poststart sidecar.
fn report_job() -> Job {
    let mut leader = task("leader", None, false);
    leader.leader = true;
    job(vec![
        leader,
        task("sidecar", Some(LifecycleHook::Poststart), true),
    ])
}

/// Submits `job` on `rt` (the alloc runner's tasks are spawned there).
fn submit(rt: &tokio::runtime::Runtime, engine: &Engine, job: &Job) -> AllocHandle {
    let _rt = rt.enter();
    engine.submit(job, None).unwrap()
}

fn wait(rt: &tokio::runtime::Runtime, alloc: AllocHandle) -> AllocSummary {
    rt.block_on(async { tokio::time::timeout(idle(), alloc.wait()).await })
        .expect("alloc hung")
}

fn wait_for(what: Await) {
    taskgate_faults::wait_any(std::slice::from_ref(&what), idle())
        .unwrap_or_else(|e| panic!("engine hung: {e}"));
}

/// The tasks the engine sent a stop signal, in order.
fn stopped(driver: &FakeDriver) -> Vec<String> {
    (driver.stops().into_iter())
        .filter_map(|c| match c {
            Call::Stop { task, .. } => Some(task),
            _ => None,
        })
        .collect()
}

fn starts_in_order(driver: &FakeDriver) -> Vec<String> {
    driver
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Start { task } => Some(task),
            _ => None,
        })
        .collect()
}

#[test]
#[serial]
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
    wait_for(Await::Passed(taskgate_faults::scoped(
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
#[serial]
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
    wait_for(Await::Passed(taskgate_faults::scoped(
        Some("proxy"),
        points::TR_AFTER_DRIVER_START,
    )));
    alloc.stop();
    let summary = wait(&rt, alloc);
    assert_eq!(stopped(&home.driver), ["leader", "worker", "proxy"]);
    // Told only once dead: each kill after the previous wave's exit.
    let history = taskgate_faults::history();
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
#[serial]
fn a_stop_before_the_sidecar_prestart_never_starts_it() {
    let rt = runtime();
    let home = Home::new();
    taskgate_faults::configure(Some("sidecar"), points::TR_BEFORE_PRESTART, Action::Park);
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &report_job());
    wait_for(Await::Parked(taskgate_faults::scoped(
        Some("sidecar"),
        points::TR_BEFORE_PRESTART,
    )));
    alloc.stop();
    // The alloc is terminal and the runners were told; the kill path now
    // waits for the held sidecar, which goes on from where it was held.
    wait_for(Await::Passed(points::AR_TASK_RUNNERS_UPDATED.into()));
    taskgate_faults::release(Some("sidecar"), points::TR_BEFORE_PRESTART);
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

/// Reads the alloc's events until `n` Started events came, and returns them.
fn started_events(
    rt: &tokio::runtime::Runtime,
    events: &mut tokio::sync::mpsc::UnboundedReceiver<TaskEvent>,
    n: usize,
) -> Vec<TaskEvent> {
    let mut started = Vec::new();
    while started.len() < n {
        let event = rt
            .block_on(async { tokio::time::timeout(idle(), events.recv()).await })
            .expect("engine hung")
            .expect("event stream open");
        if event.kind == EventKind::Started {
            started.push(event);
        }
    }
    started
}

/// An agent that dies while attempt 2 runs: the restored agent reattaches
/// to attempt 2's executor (not attempt 1's, whose handle the record held
/// until attempt 2 was committed: B1), and neither finishes attempt 2 as
/// if it were the ended attempt 1 nor starts a third.
#[test]
#[serial]
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
    let alloc = {
        let _rt = second.enter();
        engine.restore().unwrap().allocs.remove(0)
    };
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
#[serial]
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

/// Only an update that makes the alloc terminal starts the kill path.
#[test]
#[serial]
fn an_update_that_does_not_stop_the_alloc_kills_nothing() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &report_job());
    wait_for(Await::Passed(taskgate_faults::scoped(
        Some("sidecar"),
        points::TR_AFTER_DRIVER_START,
    )));
    alloc.update(AllocUpdate {
        desired_status: DesiredStatus::Run,
        job: None,
    });
    wait_for(Await::Passed(points::AR_UPDATE_APPLIED.into()));
    let stops = home.driver.stops();
    assert!(stops.is_empty(), "{stops:?}");
    alloc.stop();
    let summary = wait(&rt, alloc);
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// The leader's exit ends the alloc: the other tasks are killed.
#[test]
#[serial]
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

/// Restore rule: an alloc whose record cannot be decoded is skipped, with
/// its key and why, and every other alloc is restored and runs to its end.
#[test]
#[serial]
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

/// Runs `web` (a service the fake keeps running) in a first engine until it
/// started, then lets that engine die; returns the alloc id. The caller
/// edits what the dead agent left before a second engine restores it.
fn agent_died_while_web_ran(home: &Home, first: &tokio::runtime::Runtime, attempts: u32) -> String {
    let mut web = task("web", None, false);
    web.restart.attempts = attempts;
    web.restart.delay = Duration::ZERO;
    let engine = home.engine();
    let alloc = {
        let _rt = first.enter();
        engine.submit(&job(vec![web]), None).unwrap()
    };
    let alloc_id = alloc.alloc_id.clone();
    let (mut events, _waiter) = alloc.into_parts();
    started_events(first, &mut events, 1);
    drop(engine);
    alloc_id
}

/// Changes the dead agent's record of `web`.
fn edit_web_record(home: &Home, alloc_id: &str, edit: impl FnOnce(&mut TaskRecord)) {
    let state = StateDb::open(&home.dir.path().join("data/state.db")).unwrap();
    let mut web = state.tasks(alloc_id).unwrap().remove(0);
    edit(&mut web);
    state.put_task(alloc_id, &web).unwrap();
}

/// Restore rule: the committed attempt ended (its end persisted) before the
/// agent died; the restored agent finishes it, and never runs it again.
#[test]
#[serial]
fn a_restored_attempt_that_had_ended_is_finished_not_run_again() {
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
    });
    let engine = home.engine();
    let alloc = {
        let _rt = second.enter();
        engine.restore().unwrap().allocs.remove(0)
    };
    // No stop: the restored attempt is over, so the alloc is.
    let summary = wait(&second, alloc);
    assert_eq!(home.driver.starts("web"), 1, "{:?}", home.driver.calls());
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert!(home.driver.live().is_empty(), "its executor was shut down");
}

/// Restore rule: reattach fails (here, the socket answers for another
/// executor than the record names); the remains are destroyed before the
/// restart, so the new attempt is not refused and never runs beside them.
#[test]
#[serial]
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
    let alloc = {
        let _rt = second.enter();
        engine.restore().unwrap().allocs.remove(0)
    };
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
#[serial]
fn a_lost_attempt_with_nothing_left_is_said_so() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    let alloc_id = agent_died_while_web_ran(&home, &first, 1);
    first.shutdown_timeout(idle());
    second
        .block_on(home.driver.destroy_remains(&alloc_id, "web"))
        .unwrap();
    let engine = home.engine();
    let alloc = {
        let _rt = second.enter();
        engine.restore().unwrap().allocs.remove(0)
    };
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

/// Committing attempt 2 forgets attempt 1's handle at once (B1): held right
/// after the commit, the persisted record names no executor.
#[test]
#[serial]
fn committing_an_attempt_forgets_the_previous_attempts_handle() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1)]);
    taskgate_faults::configure_fault(&"web:tr.start_committed@2=park".parse().unwrap());
    let mut web = task("web", None, false);
    web.restart.attempts = 1;
    web.restart.delay = Duration::ZERO;
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &job(vec![web]));
    let committed = taskgate_faults::scoped(Some("web"), points::TR_START_COMMITTED);
    wait_for(Await::Parked(committed.clone()));
    let record = engine.state().tasks(&alloc.alloc_id).unwrap().remove(0);
    assert_eq!(record.committed, Some(2));
    assert_eq!(record.handle, None, "attempt 1's executor still named");
    taskgate_faults::release(Some("web"), points::TR_START_COMMITTED);
    alloc.stop();
    let summary = wait(&rt, alloc);
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// How an attempt ended is persisted before the exited hooks run (B2): held
/// at the first of them, the record already has it.
#[test]
#[serial]
fn an_attempts_end_is_persisted_before_the_exited_hooks() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(3)]);
    let before_hooks = "web:hook.exited.before.executor_shutdown";
    taskgate_faults::configure_fault(&format!("{before_hooks}=park").parse().unwrap());
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &job(vec![task("web", None, false)]));
    wait_for(Await::Parked(before_hooks.into()));
    let record = engine.state().tasks(&alloc.alloc_id).unwrap().remove(0);
    let ended = record.ended.expect("the end was not persisted");
    assert_eq!(
        (ended.attempt, ended.result.exit_code, ended.by),
        (1, Some(3), EndedBy::Exit)
    );
    taskgate_faults::release_all();
    let summary = wait(&rt, alloc);
    assert_eq!(summary.status.client, ClientStatus::Failed);
}

/// Nomad's `onSuccess`: a service's task that exits 0 is restarted, and
/// those restarts count against its policy; once the policy gives up the
/// task has failed. A batch task's exit 0 is its completion.
#[rstest::rstest]
#[case::service(JobType::Service, 3, ClientStatus::Failed)]
#[case::batch(JobType::Batch, 1, ClientStatus::Complete)]
#[serial]
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
#[serial]
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
    let persisted = StateDb::open(&home.dir.path().join("data/state.db"))
        .unwrap()
        .tasks(&summary.alloc_id)
        .unwrap();
    assert_eq!(&persisted[0].events, kept);
}

/// Nomad's `shutdown_delay`: told to die, the leader first waits its delay
/// (on the engine's clock, exactly, and with an event), and only then gets
/// its signal; the kill order stays, and a task without a delay waits none.
#[test]
#[serial]
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
    wait_for(Await::Passed(taskgate_faults::scoped(
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
#[serial]
fn the_client_status_is_running_while_tasks_run() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &report_job());
    let client = || {
        let record = engine.state().alloc(&alloc.alloc_id).unwrap().unwrap();
        record.client
    };
    wait_for(Await::Passed(taskgate_faults::scoped(
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

/// Each attempt's end is recorded under its own number: attempt 2's end
/// is attempt 2's, so a restore that finds it never runs attempt 2 again.
#[test]
#[serial]
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
#[serial]
fn an_in_place_update_holds_from_the_next_attempt() {
    let rt = runtime();
    let home = Home::new();
    home.driver
        .script("web", [Exit::Code(1), Exit::Code(1), Exit::Code(0)]);
    taskgate_faults::configure_fault(&"web:tr.after_driver_start@1=park".parse().unwrap());
    let engine = home.engine();
    let v1 = failing_twice();
    let alloc = submit(&rt, &engine, &v1);
    wait_for(Await::Parked(taskgate_faults::scoped(
        Some("web"),
        points::TR_AFTER_DRIVER_START,
    )));
    let mut v2 = version(&v1, 2);
    v2.groups[0].tasks[0].restart.attempts = 2;
    alloc.update(AllocUpdate::in_place(v2.clone()));
    wait_for(Await::Passed(points::AR_UPDATE_APPLIED.into()));
    let persisted = engine.state().alloc(&alloc.alloc_id).unwrap().unwrap();
    assert_eq!(persisted.job, v2);
    taskgate_faults::release(Some("web"), points::TR_AFTER_DRIVER_START);
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
#[serial]
fn an_update_that_cannot_apply_in_place_is_refused_whole(#[case] spoil: fn(&mut Job)) {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1), Exit::Code(0)]);
    home.driver.script("other", [Exit::Code(0)]);
    taskgate_faults::configure_fault(&"web:tr.after_driver_start@1=park".parse().unwrap());
    let engine = home.engine();
    let mut v1 = failing_twice();
    v1.groups[0].tasks.push(task("other", None, false));
    let alloc = submit(&rt, &engine, &v1);
    wait_for(Await::Parked(taskgate_faults::scoped(
        Some("web"),
        points::TR_AFTER_DRIVER_START,
    )));
    let mut v2 = version(&v1, 2);
    spoil(&mut v2);
    alloc.update(AllocUpdate::in_place(v2));
    wait_for(Await::Passed(points::AR_UPDATE_APPLIED.into()));
    let persisted = engine.state().alloc(&alloc.alloc_id).unwrap().unwrap();
    assert_eq!(persisted.job, v1);
    taskgate_faults::release(Some("web"), points::TR_AFTER_DRIVER_START);
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
#[serial]
fn a_failed_update_hook_leaves_the_update_for_the_next_boundary() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1), Exit::Code(0)]);
    taskgate_faults::configure_fault(&"web:tr.after_driver_start@1=park".parse().unwrap());
    taskgate_faults::configure_fault(&"web:hook.update.before.task_env@1=error".parse().unwrap());
    let engine = home.engine();
    let v1 = failing_twice();
    let alloc = submit(&rt, &engine, &v1);
    wait_for(Await::Parked(taskgate_faults::scoped(
        Some("web"),
        points::TR_AFTER_DRIVER_START,
    )));
    alloc.update(AllocUpdate::in_place(version(&v1, 2)));
    wait_for(Await::Passed(points::AR_UPDATE_APPLIED.into()));
    taskgate_faults::release(Some("web"), points::TR_AFTER_DRIVER_START);
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

/// Restore rule: the agent died after its executor started but before the
/// handle was persisted; the restored agent finds the executor at the
/// task's socket and reattaches, instead of starting the attempt again.
#[test]
#[serial]
fn a_restore_without_a_handle_finds_the_executor_at_its_socket() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    let alloc_id = agent_died_while_web_ran(&home, &first, 0);
    first.shutdown_timeout(idle());
    edit_web_record(&home, &alloc_id, |web| web.handle = None);
    let engine = home.engine();
    let alloc = {
        let _rt = second.enter();
        engine.restore().unwrap().allocs.remove(0)
    };
    alloc.stop();
    let summary = wait(&second, alloc);
    let socket =
        taskgate_executor::socket_path(&home.dir.path().join("data/run"), &alloc_id, "web");
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

/// A task runner that panics after its task started: the cleanup kills
/// the task (found at its socket, its handle not yet persisted), records
/// it dead and failed, with Nomad's failed flag on its last event, and the
/// alloc fails instead of waiting on a runner that is gone.
#[test]
#[serial]
fn a_panicked_runner_kills_its_task_and_fails_it() {
    let rt = runtime();
    let home = Home::new();
    taskgate_faults::configure_fault(&"web:tr.after_driver_start=panic".parse().unwrap());
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

/// A stop is final: an in-place update delivered after it (its desired
/// status is `run`) is taken as a version, never as a new start. The
/// poststop task, held, keeps the alloc alive until the update is applied.
#[test]
#[serial]
fn an_update_after_a_stop_does_not_undo_it() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("cleanup", [Exit::Code(0)]);
    taskgate_faults::configure_fault(&"cleanup:tr.start_condition_met=park".parse().unwrap());
    taskgate_faults::configure_fault(&"ar.update_applied@2=park".parse().unwrap());
    let engine = home.engine();
    let tasks = vec![
        task("web", None, false),
        task("cleanup", Some(LifecycleHook::Poststop), false),
    ];
    let v1 = version(&job(tasks), 1);
    let alloc = submit(&rt, &engine, &v1);
    wait_for(Await::Passed(taskgate_faults::scoped(
        Some("web"),
        points::TR_AFTER_DRIVER_START,
    )));
    alloc.stop();
    alloc.update(AllocUpdate::in_place(version(&v1, 2)));
    wait_for(Await::Parked(points::AR_UPDATE_APPLIED.into()));
    let persisted = engine.state().alloc(&alloc.alloc_id).unwrap().unwrap();
    assert_eq!(
        (persisted.desired, persisted.job.version),
        (DesiredStatus::Stop, 2)
    );
    taskgate_faults::release(None, points::AR_UPDATE_APPLIED);
    taskgate_faults::release(Some("cleanup"), points::TR_START_CONDITION_MET);
    let summary = wait(&rt, alloc);
    assert_eq!(summary.status.desired, DesiredStatus::Stop);
    assert_eq!(
        (home.driver.starts("web"), home.driver.starts("cleanup")),
        (1, 1)
    );
}

/// Every lifecycle at once: a prestart task that completes, a prestart
/// sidecar, a leader and a second main task, a poststart sidecar, and a
/// poststop task; each (but `init`) runs until stopped.
fn lifecycle_job() -> Job {
    let mut leader = task("leader", None, false);
    leader.leader = true;
    job(vec![
        task("init", Some(LifecycleHook::Prestart), false),
        task("proxy", Some(LifecycleHook::Prestart), true),
        leader,
        task("worker", None, false),
        task("logship", Some(LifecycleHook::Poststart), true),
        task("cleanup", Some(LifecycleHook::Poststop), false),
    ])
}

/// Runs [`lifecycle_job`] until its five first starts, then restarts
/// `scope` and reads the events until `restarted` more tasks started.
/// Returns the alloc's control, its waiter, and the tasks started after
/// the restart, in order.
fn restart_lifecycle_job(
    rt: &tokio::runtime::Runtime,
    home: &Home,
    engine: &Engine,
    scope: RestartScope,
    restarted: usize,
) -> (AllocControl, taskgate_engine::AllocWaiter, Vec<String>) {
    home.driver.script("init", [Exit::Code(0), Exit::Code(0)]);
    home.driver.script("cleanup", [Exit::Code(0)]);
    let alloc = submit(rt, engine, &lifecycle_job());
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    started_events(rt, &mut events, 5);
    rt.block_on(control.restart(scope))
        .expect("restart refused");
    let again = started_events(rt, &mut events, restarted);
    (control, waiter, again.into_iter().map(|e| e.task).collect())
}

/// Where `task` is in `order` (panics if it is not there).
fn index_of(order: &[String], task: &str) -> usize {
    (order.iter().position(|t| t == task)).unwrap_or_else(|| panic!("{task} not in {order:?}"))
}

/// Nomad's `alloc restart` (#19403): the running tasks go down in the kill
/// order (leader, other main tasks, sidecars), each wave dead before the
/// next is told; they come back in lifecycle order; the completed prestart
/// task is not run again, and nothing counts against the restart policy
/// (every task here allows no restart at all).
#[test]
#[serial]
fn restarting_the_running_tasks_follows_the_lifecycle_and_keeps_the_completed_prestart() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let (control, waiter, again) =
        restart_lifecycle_job(&rt, &home, &engine, RestartScope::Running, 4);
    let stops = stopped(&home.driver);
    assert_eq!(stops[..2], ["leader", "worker"], "{stops:?}");
    let mut sidecars = stops[2..].to_vec();
    sidecars.sort();
    assert_eq!(sidecars, ["logship", "proxy"]);
    let history = taskgate_faults::history();
    let at = |task: &str, point: &str| {
        (history.iter().position(|h| h.is(Some(task), point)))
            .unwrap_or_else(|| panic!("{task}:{point} never reached"))
    };
    assert!(at("leader", points::EX_TASK_EXITED) < at("worker", points::TR_RESTART_SIGNALED));
    assert!(at("worker", points::EX_TASK_EXITED) < at("proxy", points::TR_RESTART_SIGNALED));
    assert_eq!(again[0], "proxy", "{again:?}");
    assert_eq!(again[3], "logship", "{again:?}");
    assert_eq!(home.driver.starts("init"), 1);
    control.stop();
    let summary = rt.block_on(async { tokio::time::timeout(idle(), waiter.wait()).await });
    let summary = summary.expect("alloc hung");
    assert_eq!(summary.status.client, ClientStatus::Complete);
    for task in &summary.tasks {
        assert_eq!(
            task.restarts, 0,
            "{}: a user restart was counted",
            task.task
        );
    }
    assert_eq!(home.driver.starts("cleanup"), 1);
}

/// Restarting all tasks runs the completed prestart task again, and the
/// main tasks wait for it as on the first start.
#[test]
#[serial]
fn restarting_all_tasks_runs_the_prestart_task_again_before_the_main_tasks() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let (control, waiter, again) = restart_lifecycle_job(&rt, &home, &engine, RestartScope::All, 5);
    assert_eq!(home.driver.starts("init"), 2);
    for main in ["leader", "worker"] {
        assert!(
            index_of(&again, "init") < index_of(&again, main),
            "{again:?}"
        );
        assert!(
            index_of(&again, "proxy") < index_of(&again, main),
            "{again:?}"
        );
        assert!(
            index_of(&again, main) < index_of(&again, "logship"),
            "{again:?}"
        );
    }
    control.stop();
    let summary = rt.block_on(async { tokio::time::timeout(idle(), waiter.wait()).await });
    assert_eq!(
        summary.expect("alloc hung").status.client,
        ClientStatus::Complete
    );
}

/// One task restarts alone; the others run on untouched.
#[test]
#[serial]
fn restarting_one_task_leaves_the_others_running() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let (control, waiter, again) =
        restart_lifecycle_job(&rt, &home, &engine, RestartScope::Task("worker".into()), 1);
    assert_eq!(again, ["worker"]);
    assert_eq!(stopped(&home.driver), ["worker"]);
    control.stop();
    rt.block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
}

/// What cannot be restarted is refused, with why, and changes nothing.
#[test]
#[serial]
fn a_restart_that_cannot_apply_is_refused() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("init", [Exit::Code(0)]);
    home.driver.script("cleanup", [Exit::Code(0)]);
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &lifecycle_job());
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    started_events(&rt, &mut events, 5);
    let restart = |scope| rt.block_on(control.restart(scope));
    let task = |name: &str| RestartScope::Task(name.into());
    assert_eq!(
        restart(task("nope")),
        Err(RestartRefused::NoSuchTask("nope".into()))
    );
    assert_eq!(
        restart(task("cleanup")),
        Err(RestartRefused::PoststopTask("cleanup".into()))
    );
    assert_eq!(
        restart(task("init")),
        Err(RestartRefused::TaskNotRunning("init".into()))
    );
    assert!(home.driver.stops().is_empty());
    control.stop();
    assert_eq!(
        restart(RestartScope::Running),
        Err(RestartRefused::AllocTerminal)
    );
    rt.block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(
        restart(RestartScope::All),
        Err(RestartRefused::AllocFinished)
    );
    assert_eq!(home.driver.starts("leader"), 1);
}

/// A stop sent while a restart is under way is applied once it is done,
/// and the alloc ends stopped: nothing is started after the stop made it
/// terminal, and nothing of it runs on.
#[test]
#[serial]
fn a_restart_racing_a_stop_ends_stopped() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("init", [Exit::Code(0), Exit::Code(0)]);
    home.driver.script("cleanup", [Exit::Code(0)]);
    taskgate_faults::configure_fault(&"ar.restart_targets_down=park".parse().unwrap());
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &lifecycle_job());
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    started_events(&rt, &mut events, 5);
    let restarted = rt.spawn(control.restart(RestartScope::All));
    wait_for(Await::Parked(points::AR_RESTART_TARGETS_DOWN.into()));
    control.stop();
    taskgate_faults::release(None, points::AR_RESTART_TARGETS_DOWN);
    let summary = rt.block_on(async { tokio::time::timeout(idle(), waiter.wait()).await });
    let summary = summary.expect("alloc hung");
    assert_eq!(rt.block_on(restarted).unwrap(), Ok(()));
    assert_eq!(summary.status.desired, DesiredStatus::Stop);
    assert!(summary.tasks.iter().all(|t| t.state.is_dead()));
    let history = taskgate_faults::history();
    let terminal = (history
        .iter()
        .position(|h| h.is(None, points::AR_ALLOC_TERMINAL)))
    .expect("the stop made the alloc terminal");
    let late = history[terminal..]
        .iter()
        .filter(|h| h.point.point == points::TR_START_COMMITTED)
        .filter(|h| h.point.scope() != Some("cleanup"))
        .count();
    assert_eq!(late, 0, "started after the stop: {history:?}");
    assert_eq!(home.driver.starts("cleanup"), 1);
}
