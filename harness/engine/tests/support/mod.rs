//! What the engine's fake-driver tests share: an engine home in a temp dir,
//! runtimes, small jobs, and ways to wait on the engine and read the fake.

#![allow(dead_code)] // each test target uses its own part

use std::sync::Arc;
use std::time::Duration;
use taskgate_engine::clock::{Clock, SystemClock};
use taskgate_engine::driver::Driver;
use taskgate_engine::fake_driver::{Call, FakeDriver};
use taskgate_engine::jobspec::{Group, Job, JobType, Lifecycle, LifecycleHook, Task};
use taskgate_engine::state::{AllocRecord, StateDb, TaskRecord};
use taskgate_engine::task_state::{EventKind, TaskEvent};
use taskgate_engine::{AllocHandle, AllocSummary, DataDir, Engine, EngineConfig};
use taskgate_faults::{Await, Faults};

pub fn idle() -> Duration {
    taskgate_faults::patience::step()
}

/// An engine home in a temp dir, run as whoever runs the tests, with the
/// test's own fault registry: tests run in parallel, each seeing only its
/// own faults, parks and hits. Declared after the test's runtimes, it drops
/// first: its reset releases any thread still parked, so a failing test
/// cannot hang in the runtime's drop.
pub struct Home {
    pub dir: tempfile::TempDir,
    pub driver: FakeDriver,
    pub faults: Faults,
}

impl Drop for Home {
    fn drop(&mut self) {
        self.faults.reset();
    }
}

impl Home {
    /// Overwrites `alloc_id`'s record in the state database with bytes
    /// that are not a record.
    pub fn corrupt_alloc_record(&self, alloc_id: &str) {
        let state = taskgate_engine::state::StateDb::open(&self.data_dir().state_db()).unwrap();
        state.put_raw_alloc(alloc_id, b"{\"alloc_id\": 7}").unwrap();
    }

    pub fn new() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig::for_fake(DataDir::new(dir.path().join("data")));
        Home {
            driver: config.fake_driver(),
            faults: config.faults,
            dir,
        }
    }

    /// Waits for `what` in this home's runs (see [`idle`]).
    pub fn wait_for(&self, what: Await) {
        (self.faults.wait_any(std::slice::from_ref(&what), idle()))
            .unwrap_or_else(|e| panic!("engine hung: {e}"));
    }

    pub fn data_dir(&self) -> DataDir {
        DataDir::new(self.dir.path().join("data"))
    }

    pub fn engine(&self) -> Engine {
        self.engine_on(Arc::new(SystemClock::default()))
    }

    /// An engine whose restart and shutdown delays run on `clock`.
    pub fn engine_on(&self, clock: Arc<dyn Clock>) -> Engine {
        let config = EngineConfig {
            default_user: own_user(),
            clock,
            faults: self.faults.clone(),
            ..EngineConfig::for_fake(self.data_dir())
        };
        Engine::open_on_fake(config, &self.driver).unwrap()
    }
}

/// The user running the tests: the fake's tasks run as it, so the hooks'
/// chown works without root.
pub fn own_user() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .expect("the test's own user")
        .name
}

pub fn runtime() -> tokio::runtime::Runtime {
    taskgate_engine::engine_runtime().expect("the engine's runtime")
}

pub fn task(name: &str, hook: Option<LifecycleHook>, sidecar: bool) -> Task {
    let mut t = Task::new(name, "/bin/true", vec![]);
    t.lifecycle = hook.map(|hook| Lifecycle { hook, sidecar });
    t.restart.attempts = 0;
    t
}

/// A batch job: a task's exit 0 is its end.
pub fn job(tasks: Vec<Task>) -> Job {
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
pub fn report_job() -> Job {
    let mut leader = task("leader", None, false);
    leader.leader = true;
    job(vec![
        leader,
        task("sidecar", Some(LifecycleHook::Poststart), true),
    ])
}

/// Submits `job` on `rt` (the alloc runner's tasks are spawned there).
pub fn submit(rt: &tokio::runtime::Runtime, engine: &Engine, job: &Job) -> AllocHandle {
    let _rt = rt.enter();
    engine.submit(job, None).unwrap()
}

pub fn wait(rt: &tokio::runtime::Runtime, alloc: AllocHandle) -> AllocSummary {
    rt.block_on(async { tokio::time::timeout(idle(), alloc.wait()).await })
        .expect("alloc hung")
}

/// The tasks the engine sent a stop signal, in order.
pub fn stopped(driver: &FakeDriver) -> Vec<String> {
    (driver.stops().into_iter())
        .filter_map(|c| match c {
            Call::Stop { task, .. } => Some(task),
            _ => None,
        })
        .collect()
}

pub fn starts_in_order(driver: &FakeDriver) -> Vec<String> {
    driver
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Start { task } => Some(task),
            _ => None,
        })
        .collect()
}

/// Reads the alloc's events until `n` Started events came, and returns them.
pub fn started_events(
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

/// [`agent_died_while_web_ran`], then web's executor dies with its task
/// while no agent runs (nothing of it is left); returns the alloc id.
pub fn web_lost_while_agent_down(
    home: &Home,
    first: tokio::runtime::Runtime,
    second: &tokio::runtime::Runtime,
    attempts: u32,
) -> String {
    let alloc_id = agent_died_while_web_ran(home, &first, attempts);
    first.shutdown_timeout(idle());
    second
        .block_on(home.driver.destroy_remains(&alloc_id, "web"))
        .unwrap();
    alloc_id
}

/// The one alloc `engine` restores, its runners on `rt`.
pub fn restore_one(engine: &Engine, rt: &tokio::runtime::Runtime) -> AllocHandle {
    let _rt = rt.enter();
    engine.restore().unwrap().allocs.remove(0)
}

/// Runs `web` (a service the fake keeps running) in a first engine until it
/// started, then lets that engine die; returns the alloc id. The caller
/// edits what the dead agent left before a second engine restores it.
pub fn agent_died_while_web_ran(
    home: &Home,
    first: &tokio::runtime::Runtime,
    attempts: u32,
) -> String {
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
pub fn edit_web_record(home: &Home, alloc_id: &str, edit: impl FnOnce(&mut TaskRecord)) {
    edit_task_record(home, alloc_id, "web", edit)
}

/// Changes the dead agent's record of the allocation.
pub fn edit_alloc_record(home: &Home, alloc_id: &str, edit: impl FnOnce(&mut AllocRecord)) {
    let state = StateDb::open(&home.data_dir().state_db()).unwrap();
    let mut record = state.alloc(alloc_id).unwrap().expect("the alloc's record");
    edit(&mut record);
    state.put_alloc(&record).unwrap();
}

/// Changes the dead agent's record of `task`.
pub fn edit_task_record(
    home: &Home,
    alloc_id: &str,
    task: &str,
    edit: impl FnOnce(&mut TaskRecord),
) {
    let state = StateDb::open(&home.data_dir().state_db()).unwrap();
    let tasks = state.tasks(alloc_id).unwrap();
    let mut record = (tasks.into_iter().find(|t| t.task == task)).expect("the task's record");
    edit(&mut record);
    state.put_task(alloc_id, &record).unwrap();
}
