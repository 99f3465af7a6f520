//! What the engine's fake-driver tests share: an engine home in a temp dir,
//! runtimes, small jobs, and ways to wait on the engine and read the fake.

#![allow(dead_code)] // each test target uses its own part

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use taskgate_engine::clock::{Clock, SystemClock};
use taskgate_engine::fake_driver::{Call, FakeDriver};
use taskgate_engine::jobspec::{Group, Job, JobType, Lifecycle, LifecycleHook, Task};
use taskgate_engine::state::{StateDb, TaskRecord};
use taskgate_engine::task_state::{EventKind, TaskEvent};
use taskgate_engine::{AllocHandle, AllocSummary, DataDir, Engine, EngineConfig};
use taskgate_faults::Await;

pub fn idle() -> Duration {
    taskgate_faults::patience::step()
}

/// An engine home in a temp dir, run as whoever runs the tests. Declared
/// after the test's runtimes, it drops first: its reset releases any thread
/// still parked, so a failing test cannot hang in the runtime's drop.
pub struct Home {
    pub dir: tempfile::TempDir,
    pub driver: FakeDriver,
}

impl Drop for Home {
    fn drop(&mut self) {
        taskgate_faults::reset();
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
        taskgate_faults::reset();
        let dir = tempfile::tempdir().unwrap();
        let driver = FakeDriver::new(DataDir::new(dir.path().join("data")).run());
        Home { dir, driver }
    }

    pub fn data_dir(&self) -> DataDir {
        DataDir::new(self.dir.path().join("data"))
    }

    pub fn engine(&self) -> Engine {
        self.engine_on(Arc::new(SystemClock::default()))
    }

    /// An engine whose restart and shutdown delays run on `clock`.
    pub fn engine_on(&self, clock: Arc<dyn Clock>) -> Engine {
        let me = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .expect("the test's own user");
        let config = EngineConfig {
            data_dir: self.data_dir(),
            executor_bin: "/nonexistent".into(),
            chroot_env: BTreeMap::new(),
            default_user: me.name,
            pids_max: 8,
            clock,
            restart_seed: 0,
            cgroup_parent: FakeDriver::cgroup_parent(),
            executor_faults: Default::default(),
        };
        Engine::open_with(config, Arc::new(self.driver.clone())).unwrap()
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap()
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

pub fn wait_for(what: Await) {
    taskgate_faults::wait_any(std::slice::from_ref(&what), idle())
        .unwrap_or_else(|e| panic!("engine hung: {e}"));
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
    let state = StateDb::open(&home.data_dir().state_db()).unwrap();
    let mut web = state.tasks(alloc_id).unwrap().remove(0);
    edit(&mut web);
    state.put_task(alloc_id, &web).unwrap();
}
