//! Privileged tests of the task lifecycle engine on the real executor, in
//! process: the race of docs/nomad-prestart-race-report.txt forced through fault points, lifecycle order,
//! leader-first kill, restart policies, poststop, jobspec errors, and restore
//! after a real agent process is SIGKILLed. Every order a test relies on is
//! forced by a fault point (park / release), a channel or a process exit;
//! timeouts are only hang safety nets. Each test ends with the
//! zero-leftovers check. Run as root:
//! `cargo test --features failpoints --test engine -- --test-threads=1`.

#[path = "../common/mod.rs"]
mod common;
mod jobspec_errors;
mod kill_order;
mod lifecycle;
mod report;
mod restarts;
mod restore;

use common::{engine_runtime, require_root, EngineHome};
use rstest::rstest;
use serial_test::serial;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use taskgate_engine::clock::{Clock, SystemClock, VirtualClock};
use taskgate_engine::jobspec::{
    self, Job, JobspecError, LifecycleHook, RestartMode, RestartPolicy, Task,
};
use taskgate_engine::state::{StateDb, TaskRecord};
use taskgate_engine::task_state::TaskEvent;
use taskgate_engine::task_state::{EventKind, Outcome, TaskState};
use taskgate_engine::AllocWaiter;
use taskgate_engine::{AllocHandle, AllocSummary, ClientStatus, DesiredStatus};
use taskgate_engine::{Engine, EngineConfig, Jitter};
use taskgate_faults::points::{self, hook_point, Edge};
use taskgate_faults::{Action, Await, Hit};
use taskgate_scenarios::jobs::{job, leader, lifecycle, report_alloc, script_task, service};
use taskgate_scenarios::until_idle;
use taskgate_scenarios::watchdog::Watchdog;
use tokio::sync::mpsc::UnboundedReceiver;

/// Hang safety net for one forced step or for an alloc (or an agent
/// process) to finish: an idle window that restarts on every fault hit,
/// scaled to the machine's speed (never a synchronisation device).
fn idle() -> Duration {
    taskgate_faults::patience::step()
}

// ---------------------------------------------------------------------------
// Jobs

/// `/alloc` is root's 0755 directory: tasks that write to it run as root.
fn as_root(mut task: Task) -> Task {
    task.user = Some("root".into());
    task
}

// ---------------------------------------------------------------------------
// Faults

thread_local! {
    /// The running test's fault registry, set by [`Faults::reset`]: each
    /// test runs on a thread of its own, and its engine gets the registry
    /// in its config ([`Bench`]).
    static TEST_FAULTS: std::cell::RefCell<taskgate_faults::Faults> = Default::default();
}

/// The running test's fault registry.
fn faults() -> taskgate_faults::Faults {
    TEST_FAULTS.with(|f| f.borrow().clone())
}

/// Gives the test a fresh fault registry, and resets it when dropped (also
/// on a failing test, so no engine thread stays parked).
struct Faults;

impl Faults {
    fn reset() -> Faults {
        TEST_FAULTS.with(|f| *f.borrow_mut() = taskgate_faults::Faults::new());
        Faults
    }
}

impl Drop for Faults {
    fn drop(&mut self) {
        faults().reset();
    }
}

fn name(scope: Option<&str>, point: &str) -> String {
    taskgate_faults::scoped(scope, point)
}

fn park(scope: Option<&str>, point: &str) {
    faults().configure(scope, point, Action::Park);
}

fn wait_for(what: Await) {
    if let Err(err) = faults().wait_any(std::slice::from_ref(&what), idle()) {
        panic!(
            "engine hung: {err}\nhistory: {:#?}",
            names(&faults().history())
        );
    }
}

fn wait_parked(scope: Option<&str>, point: &str) {
    wait_for(Await::Parked(name(scope, point)));
}

fn wait_passed(scope: Option<&str>, point: &str) {
    wait_for(Await::Passed(name(scope, point)));
}

fn names(hits: &[Hit]) -> Vec<String> {
    hits.iter()
        .map(|h| match &h.action {
            Some(a) => format!("{} [{a}]", h.point),
            None => h.name(),
        })
        .collect()
}

/// Index of the first time a thread *passed* `name` (a park's arrival, which
/// carries `Some(Park)`, does not count).
fn passed_at(hits: &[Hit], name: &str) -> Option<usize> {
    hits.iter()
        .position(|h| h.name() == name && h.action != Some(Action::Park))
}

fn arrived_at(hits: &[Hit], name: &str) -> Option<usize> {
    hits.iter().position(|h| h.name() == name)
}

fn passes(hits: &[Hit], name: &str) -> usize {
    hits.iter()
        .filter(|h| h.name() == name && h.action != Some(Action::Park))
        .count()
}

/// Asserts `first` was passed before `then`, both at least once.
fn assert_before(hits: &[Hit], first: &str, then: &str) {
    let a = passed_at(hits, first)
        .unwrap_or_else(|| panic!("{first} never passed; history: {:#?}", names(hits)));
    let b = passed_at(hits, then)
        .unwrap_or_else(|| panic!("{then} never passed; history: {:#?}", names(hits)));
    assert!(
        a < b,
        "expected {first} (#{a}) before {then} (#{b}); history: {:#?}",
        names(hits)
    );
}

fn assert_all_fired() {
    let unfired = faults().unfired();
    assert!(
        unfired.is_empty(),
        "configured faults that never fired: {unfired:?}"
    );
}

// ---------------------------------------------------------------------------
// Running allocs

/// An engine on a throwaway home, with its runtime.
struct Bench {
    home: EngineHome,
    rt: tokio::runtime::Runtime,
    engine: Option<taskgate_engine::Engine>,
}

impl Bench {
    fn new() -> Bench {
        Bench::with_clock(Arc::new(SystemClock::default()))
    }

    /// An engine whose restart intervals and delays run on `clock`.
    fn with_clock(clock: Arc<dyn Clock>) -> Bench {
        let home = EngineHome::new();
        let rt = engine_runtime();
        let config = EngineConfig {
            clock,
            faults: faults(),
            ..home.config()
        };
        let engine = Some(Engine::open(config).expect("open engine"));
        Bench { home, rt, engine }
    }

    fn engine(&self) -> &taskgate_engine::Engine {
        self.engine.as_ref().expect("engine open")
    }

    fn submit(&self, job: &Job) -> AllocHandle {
        let _ctx = self.rt.enter();
        self.engine().submit(job, None).expect("submit")
    }

    /// Waits (with a hang safety net) for the alloc to finish.
    fn wait(&self, alloc: AllocHandle) -> AllocSummary {
        self.rt
            .block_on(until_idle(&faults(), &mut Box::pin(alloc.wait()), idle()))
            .unwrap_or_else(|| {
                panic!(
                    "alloc hung: no progress for {:?}; history: {:#?}",
                    idle(),
                    names(&faults().history())
                )
            })
    }

    fn wait_for(&self, waiter: AllocWaiter) -> AllocSummary {
        self.rt
            .block_on(until_idle(&faults(), &mut Box::pin(waiter.wait()), idle()))
            .unwrap_or_else(|| {
                panic!(
                    "alloc hung: no progress for {:?}; history: {:#?}",
                    idle(),
                    names(&faults().history())
                )
            })
    }

    /// Waits for the alloc to finish, and returns every event it streamed
    /// (a task's record keeps only its last ten).
    fn wait_streamed(&self, alloc: AllocHandle) -> (AllocSummary, Vec<TaskEvent>) {
        let (mut stream, waiter) = alloc.into_parts();
        let summary = self.wait_for(waiter);
        let mut events = Vec::new();
        while let Ok(event) = stream.try_recv() {
            events.push(event);
        }
        (summary, events)
    }

    /// Reads the alloc's event stream until each (task, kind) was seen.
    fn wait_events(
        &self,
        events: &mut UnboundedReceiver<TaskEvent>,
        wanted: &[(&str, EventKind)],
    ) -> Vec<TaskEvent> {
        let mut missing: Vec<(&str, EventKind)> = wanted.to_vec();
        let mut seen = Vec::new();
        self.rt.block_on(async {
            while !missing.is_empty() {
                match until_idle(&faults(), &mut Box::pin(events.recv()), idle()).await {
                    Some(Some(event)) => {
                        missing.retain(|(t, k)| !(*t == event.task && *k == event.kind));
                        seen.push(event);
                    }
                    Some(None) => {
                        panic!("event stream closed while waiting for {missing:?}; seen: {seen:#?}")
                    }
                    None => panic!(
                        "no {missing:?}: no progress for {:?}; seen: {seen:#?}",
                        idle()
                    ),
                }
            }
        });
        seen
    }

    fn tasks_in_db(&self, alloc_id: &str) -> Vec<TaskRecord> {
        self.engine().state().tasks(alloc_id).expect("state db")
    }

    fn alloc_dir(&self, alloc_id: &str) -> PathBuf {
        self.engine()
            .state()
            .alloc(alloc_id)
            .expect("state db")
            .expect("alloc in the state db")
            .alloc_dir
    }

    /// Shuts the engine and runtime down, then asserts nothing is left.
    fn finish(mut self, alloc_ids: &[String]) {
        drop(self.engine.take());
        self.rt.shutdown_timeout(Duration::from_secs(10));
        self.home.finish(alloc_ids);
    }
}

fn task<'a>(tasks: &'a [TaskRecord], name: &str) -> &'a TaskRecord {
    tasks
        .iter()
        .find(|t| t.task == name)
        .unwrap_or_else(|| panic!("no task {name} in {tasks:#?}"))
}

fn count(rec: &TaskRecord, kind: EventKind) -> usize {
    rec.events.iter().filter(|e| e.kind == kind).count()
}

fn kinds(rec: &TaskRecord) -> Vec<EventKind> {
    rec.events.iter().map(|e| e.kind).collect()
}

fn outcome(rec: &TaskRecord) -> &Outcome {
    match &rec.state {
        TaskState::Dead { outcome } => outcome,
        other => panic!("task {} is not dead: {other:?}", rec.task),
    }
}

fn assert_killed(rec: &TaskRecord) {
    assert!(
        matches!(outcome(rec), Outcome::Killed { .. }),
        "task {} should be Killed: {:#?}",
        rec.task,
        rec
    );
    assert_eq!(count(rec, EventKind::Killing), 1, "{:?}", kinds(rec));
    assert_eq!(count(rec, EventKind::Killed), 1, "{:?}", kinds(rec));
}

fn assert_exited_ok(rec: &TaskRecord) {
    assert!(
        matches!(outcome(rec), Outcome::Exited { failed: false, .. }),
        "task {} should have exited successfully: {:#?}",
        rec.task,
        rec
    );
}

/// The zero-leftovers check every test ends with is not vacuous: while a
/// task runs it finds the task's cgroups, its executor and task processes
/// and the executor's socket; once the alloc is stopped it finds nothing.
#[test]
#[serial]
fn leftover_check_sees_a_running_task() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let alloc = bench.submit(&job("leftovers", vec![service("web")]));
    let alloc_id = alloc.alloc_id.clone();
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    bench.wait_events(&mut events, &[("web", EventKind::Started)]);
    let found = common::engine_leftovers(&bench.home.data_dir(), std::slice::from_ref(&alloc_id));
    for kind in ["cgroup ", "process ", "file "] {
        assert!(
            found.iter().any(|f| f.starts_with(kind)),
            "no {kind}found while the task runs: {found:#?}"
        );
    }
    let task_pid = task(&bench.tasks_in_db(&alloc_id), "web")
        .handle
        .as_ref()
        .expect("handle persisted")
        .task_pid;
    assert!(
        found
            .iter()
            .any(|f| f.starts_with(&format!("process {task_pid}:"))),
        "task process {task_pid} not found: {found:#?}"
    );
    control.stop();
    let summary = bench.wait_for(waiter);
    assert_killed(task(&summary.tasks, "web"));
    bench.finish(&[alloc_id]);
}
