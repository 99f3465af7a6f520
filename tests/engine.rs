//! Privileged tests of the task lifecycle engine on the real executor, in
//! process: the report's race forced through fault points, lifecycle order,
//! leader-first kill, restart policies, poststop, jobspec errors, and restore
//! after a real agent process is SIGKILLed. Every order a test relies on is
//! forced by a fault point (park / release), a channel or a process exit;
//! timeouts are only hang safety nets. Each test ends with the
//! zero-leftovers check. Run as root:
//! `cargo test --features failpoints --test engine -- --test-threads=1`.

mod common;

use common::{engine_runtime, require_root, EngineHome};
use rstest::rstest;
use serial_test::serial;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use taskgate_engine::alloc_runner::AllocWaiter;
use taskgate_engine::clock::{Clock, SystemClock, VirtualClock};
use taskgate_engine::jobspec::{
    self, Job, JobspecError, LifecycleHook, RestartMode, RestartPolicy, Task,
};
use taskgate_engine::state::{StateDb, TaskRecord};
use taskgate_engine::task_state::TaskEvent;
use taskgate_engine::task_state::{EventKind, Outcome, TaskState};
use taskgate_engine::{AllocHandle, AllocSummary, AllocUpdate, ClientStatus, DesiredStatus};
use taskgate_engine::{Engine, EngineConfig};
use taskgate_faults::points::{self, hook_point, Edge};
use taskgate_faults::{Action, Await, Hit};
use taskgate_scenarios::jobs::{job, leader, lifecycle, report_alloc, script_task, service};
use taskgate_scenarios::run::until_idle;
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

/// Resets the global fault registry now and again when dropped (also on a
/// failing test, so no engine thread stays parked).
struct Faults;

impl Faults {
    fn reset() -> Faults {
        taskgate_faults::reset();
        Faults
    }
}

impl Drop for Faults {
    fn drop(&mut self) {
        taskgate_faults::reset();
    }
}

fn name(scope: Option<&str>, point: &str) -> String {
    taskgate_faults::scoped(scope, point)
}

fn park(scope: Option<&str>, point: &str) {
    taskgate_faults::configure(scope, point, Action::Park);
}

fn wait_for(what: Await) {
    if let Err(err) = taskgate_faults::wait_any(std::slice::from_ref(&what), idle()) {
        panic!(
            "engine hung: {err}\nhistory: {:#?}",
            names(&taskgate_faults::history())
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
            Some(a) => format!("{} [{a}]", h.name),
            None => h.name.clone(),
        })
        .collect()
}

/// Index of the first time a thread *passed* `name` (a park's arrival, which
/// carries `Some(Park)`, does not count).
fn passed_at(hits: &[Hit], name: &str) -> Option<usize> {
    hits.iter()
        .position(|h| h.name == name && h.action != Some(Action::Park))
}

fn arrived_at(hits: &[Hit], name: &str) -> Option<usize> {
    hits.iter().position(|h| h.name == name)
}

fn passes(hits: &[Hit], name: &str) -> usize {
    hits.iter()
        .filter(|h| h.name == name && h.action != Some(Action::Park))
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
    let unfired = taskgate_faults::unfired();
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
            .block_on(until_idle(&mut Box::pin(alloc.wait()), idle()))
            .unwrap_or_else(|| {
                panic!(
                    "alloc hung: no progress for {:?}; history: {:#?}",
                    idle(),
                    names(&taskgate_faults::history())
                )
            })
    }

    fn wait_for(&self, waiter: AllocWaiter) -> AllocSummary {
        self.rt
            .block_on(until_idle(&mut Box::pin(waiter.wait()), idle()))
            .unwrap_or_else(|| {
                panic!(
                    "alloc hung: no progress for {:?}; history: {:#?}",
                    idle(),
                    names(&taskgate_faults::history())
                )
            })
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
                match until_idle(&mut Box::pin(events.recv()), idle()).await {
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
    let updater = alloc.updater();
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
    updater
        .send(AllocUpdate::stop())
        .expect("alloc runner listening");
    let summary = bench.wait_for(waiter);
    assert_killed(task(&summary.tasks, "web"));
    bench.finish(&[alloc_id]);
}

// ---------------------------------------------------------------------------
// 1. The report

/// The report's interleaving, forced: the sidecar's runner is between its
/// start condition and prestart when the stop lands; the update has told the
/// task runners but not killed anything yet when the sidecar runs prestart.
/// The sidecar must never be exec'd, and its prestart (which would build its
/// task dir) must not have run either.
#[test]
#[serial]
fn report_stop_before_sidecar_prestart_never_execs_the_sidecar() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    park(Some("sidecar"), points::TR_BEFORE_PRESTART);
    park(None, points::AR_TASK_RUNNERS_UPDATED);
    let alloc = bench.submit(&report_alloc());
    let alloc_id = alloc.alloc_id.clone();

    wait_parked(Some("sidecar"), points::TR_BEFORE_PRESTART);
    // The sidecar's start condition opened only because the leader runs.
    assert!(passed_at(&taskgate_faults::history(), "leader:tr.after_driver_start").is_some());
    alloc.stop();
    wait_parked(None, points::AR_TASK_RUNNERS_UPDATED);
    taskgate_faults::release(Some("sidecar"), points::TR_BEFORE_PRESTART);
    wait_passed(Some("sidecar"), points::TR_MAIN_EXITED);
    taskgate_faults::release(None, points::AR_TASK_RUNNERS_UPDATED);
    let summary = bench.wait(alloc);
    let hits = taskgate_faults::history();
    assert_all_fired();

    // The forced order really happened: the sidecar decided while the update
    // was held between "task runners updated" and the kill.
    let held = arrived_at(&hits, points::AR_TASK_RUNNERS_UPDATED).expect("update parked");
    let sidecar_done = passed_at(&hits, "sidecar:tr.main_exited").expect("sidecar runner exited");
    let update_on = passed_at(&hits, points::AR_TASK_RUNNERS_UPDATED).expect("update released");
    assert!(
        held < sidecar_done && sidecar_done < update_on,
        "{:#?}",
        names(&hits)
    );
    assert_before(
        &hits,
        points::AR_TASK_RUNNERS_UPDATED,
        points::AR_KILL_STARTED,
    );
    assert!(
        passed_at(&hits, "sidecar:tr.observed_terminal").is_some(),
        "{:#?}",
        names(&hits)
    );

    // Never exec'd, never even prepared.
    let sidecar = task(&summary.tasks, "sidecar");
    assert!(
        matches!(outcome(sidecar), Outcome::NeverStarted { .. }),
        "{sidecar:#?}"
    );
    assert_eq!(
        count(sidecar, EventKind::Started),
        0,
        "{:?}",
        kinds(sidecar)
    );
    assert_eq!(
        count(sidecar, EventKind::NotStarted),
        1,
        "{:?}",
        kinds(sidecar)
    );
    assert_eq!(
        (sidecar.prestart_done, sidecar.committed, sidecar.launched),
        (None, None, None),
        "{sidecar:#?}"
    );
    assert!(sidecar.handle.is_none());
    for point in [
        "tr.after_prestart",
        "tr.before_driver_start",
        "tr.after_driver_start",
    ] {
        assert_eq!(
            passes(&hits, &format!("sidecar:{point}")),
            0,
            "sidecar reached {point}: {:#?}",
            names(&hits)
        );
    }
    assert!(
        !hits
            .iter()
            .any(|h| h.name.starts_with("sidecar:hook.prestart.")),
        "a sidecar prestart hook ran: {:#?}",
        names(&hits)
    );
    let alloc_dir = bench.alloc_dir(&alloc_id);
    assert!(!alloc_dir.join("sidecar/executor.out").exists());
    assert!(
        !alloc_dir.join("sidecar").exists(),
        "the sidecar's task dir exists although its prestart never ran"
    );
    assert!(!alloc_dir.join("alloc/logs/sidecar.stdout.0").exists());

    let leader = task(&summary.tasks, "leader");
    assert_killed(leader);
    assert_eq!(count(leader, EventKind::Started), 1);
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert_eq!(summary.status.desired, DesiredStatus::Stop);
    // What the engine persisted agrees with what it returned.
    assert_eq!(
        bench
            .tasks_in_db(&alloc_id)
            .iter()
            .map(|t| (&t.task, &t.state))
            .collect::<Vec<_>>(),
        summary
            .tasks
            .iter()
            .map(|t| (&t.task, &t.state))
            .collect::<Vec<_>>()
    );
    bench.finish(&[alloc_id]);
}

// ---------------------------------------------------------------------------
// 2. Lifecycle order

/// A prestart (non-sidecar) task runs to a successful exit before the main
/// task's start condition opens: the main task fails unless the prestart
/// task's file is already in /alloc.
#[test]
#[serial]
fn prestart_task_completes_before_the_main_task_starts() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let init = lifecycle(
        as_root(script_task("init", "echo ready > /alloc/ready")),
        LifecycleHook::Prestart,
        false,
    );
    let web = script_task("web", "test \"$(cat /alloc/ready)\" = ready");
    // Hold the main task right at its start condition to look at the world then.
    park(Some("web"), points::TR_START_CONDITION_MET);
    let alloc = bench.submit(&job("prestart", vec![init, web]));
    let alloc_id = alloc.alloc_id.clone();
    wait_parked(Some("web"), points::TR_START_CONDITION_MET);
    let at_start = taskgate_faults::history();
    assert!(
        passed_at(&at_start, "init:tr.main_exited").is_some(),
        "web's start opened before init finished: {:#?}",
        names(&at_start)
    );
    let ready = bench.alloc_dir(&alloc_id).join("alloc/ready");
    assert_eq!(
        std::fs::read_to_string(&ready).expect("init's file").trim(),
        "ready"
    );
    taskgate_faults::release(Some("web"), points::TR_START_CONDITION_MET);
    let summary = bench.wait(alloc);
    let hits = taskgate_faults::history();
    assert_all_fired();

    assert_before(&hits, "init:tr.main_exited", "web:tr.start_condition_met");
    let (init, web) = (task(&summary.tasks, "init"), task(&summary.tasks, "web"));
    assert_exited_ok(init);
    assert_exited_ok(web);
    let terminated = init
        .events
        .iter()
        .find(|e| e.kind == EventKind::Terminated)
        .expect("init terminated");
    let started = web
        .events
        .iter()
        .find(|e| e.kind == EventKind::Started)
        .expect("web started");
    assert!(terminated.time_ms <= started.time_ms, "{init:#?}\n{web:#?}");
    assert_eq!(summary.status.client, ClientStatus::Complete);
    bench.finish(&[alloc_id]);
}

/// A prestart task that fails for good keeps the main task from ever
/// starting: the main task is killed before its start condition, never
/// exec'd, and the alloc fails.
#[test]
#[serial]
fn failed_prestart_task_keeps_the_main_task_from_starting() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let init = lifecycle(
        script_task("init", "exit 3"),
        LifecycleHook::Prestart,
        false,
    );
    let alloc = bench.submit(&job("prestart-fails", vec![init, service("web")]));
    let alloc_id = alloc.alloc_id.clone();
    let summary = bench.wait(alloc);
    let hits = taskgate_faults::history();

    let (init, web) = (task(&summary.tasks, "init"), task(&summary.tasks, "web"));
    assert!(
        matches!(outcome(init), Outcome::Exited { failed: true, .. }),
        "{init:#?}"
    );
    assert!(
        matches!(outcome(web), Outcome::NeverStarted { .. }),
        "{web:#?}"
    );
    assert_eq!(count(web, EventKind::Started), 0, "{web:#?}");
    assert_eq!(
        passes(&hits, "web:tr.start_condition_met"),
        0,
        "{:#?}",
        names(&hits)
    );
    assert!(
        !bench.alloc_dir(&alloc_id).join("web").exists(),
        "web's prestart ran"
    );
    assert_eq!(summary.status.client, ClientStatus::Failed);
    bench.finish(&[alloc_id]);
}

/// A prestart sidecar must be running (exec'd) before the main task starts,
/// and it is killed once the main task is done.
#[test]
#[serial]
fn prestart_sidecar_runs_before_the_main_task_starts() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let side = lifecycle(service("side"), LifecycleHook::Prestart, true);
    let web = script_task("web", "echo web done");
    park(Some("web"), points::TR_START_CONDITION_MET);
    let alloc = bench.submit(&job("prestart-sidecar", vec![side, web]));
    let alloc_id = alloc.alloc_id.clone();
    wait_parked(Some("web"), points::TR_START_CONDITION_MET);
    let at_start = taskgate_faults::history();
    assert!(
        passed_at(&at_start, "side:tr.after_driver_start").is_some(),
        "web's start opened before the prestart sidecar was started: {:#?}",
        names(&at_start)
    );
    assert_eq!(
        passes(&at_start, "side:tr.main_exited"),
        0,
        "the prestart sidecar is already gone: {:#?}",
        names(&at_start)
    );
    taskgate_faults::release(Some("web"), points::TR_START_CONDITION_MET);
    let summary = bench.wait(alloc);
    let hits = taskgate_faults::history();
    assert_all_fired();

    assert_before(
        &hits,
        "side:tr.after_driver_start",
        "web:tr.start_condition_met",
    );
    // Killed only after the main task was done (MainTasksDone).
    assert_before(&hits, "web:tr.main_exited", "side:tr.main_exited");
    let (side, web) = (task(&summary.tasks, "side"), task(&summary.tasks, "web"));
    assert_exited_ok(web);
    assert_killed(side);
    assert_eq!(count(side, EventKind::Started), 1);
    assert_eq!(summary.status.client, ClientStatus::Complete);
    bench.finish(&[alloc_id]);
}

// ---------------------------------------------------------------------------
// 3. Leader-first kill

/// On stop the leader is killed first, and only once it is dead do the
/// other tasks get their Killing event.
#[test]
#[serial]
fn stop_kills_the_leader_first_and_the_others_only_after_it_is_dead() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let job = job(
        "leader-first",
        vec![service("a"), leader(service("lead")), service("b")],
    );
    // Hold the leader's runner once its kill completed, before it is recorded dead.
    park(Some("lead"), points::TR_MAIN_EXITED);
    let alloc = bench.submit(&job);
    let alloc_id = alloc.alloc_id.clone();
    let updater = alloc.updater();
    let (mut events, waiter) = alloc.into_parts();
    // Events stream out after the record is persisted: once all three
    // Started events arrived, the state db shows all three running.
    bench.wait_events(
        &mut events,
        &[
            ("a", EventKind::Started),
            ("lead", EventKind::Started),
            ("b", EventKind::Started),
        ],
    );
    updater
        .send(AllocUpdate::stop())
        .expect("alloc runner listening");
    wait_parked(Some("lead"), points::TR_MAIN_EXITED);
    // The leader's kill is done (its Killed event was emitted before this
    // point), but it is not dead yet: nobody else may have been told to die.
    let held = taskgate_faults::history();
    assert!(
        passed_at(&held, "lead:hook.exited.before.executor_shutdown").is_some(),
        "{:#?}",
        names(&held)
    );
    for t in ["a", "b"] {
        assert!(
            !held
                .iter()
                .any(|h| h.name.starts_with(&format!("{t}:hook.exited."))),
            "{t} was stopped while the leader was still alive: {:#?}",
            names(&held)
        );
        let rec = task(&bench.tasks_in_db(&alloc_id), t).clone();
        assert_eq!(
            count(&rec, EventKind::Killing),
            0,
            "{t} got Killing while the leader was alive: {:?}",
            kinds(&rec)
        );
        assert_eq!(rec.state, TaskState::Running { attempt: 1 }, "{t}");
    }
    taskgate_faults::release(Some("lead"), points::TR_MAIN_EXITED);
    let summary = bench.wait_for(waiter);
    let hits = taskgate_faults::history();
    assert_all_fired();

    let lead = task(&summary.tasks, "lead");
    assert_killed(lead);
    let lead_killed = lead
        .events
        .iter()
        .find(|e| e.kind == EventKind::Killed)
        .unwrap();
    for t in ["a", "b"] {
        let rec = task(&summary.tasks, t);
        assert_killed(rec);
        assert_before(
            &hits,
            "lead:tr.main_exited",
            &format!("{t}:hook.exited.before.executor_shutdown"),
        );
        assert_before(&hits, "lead:tr.main_exited", &format!("{t}:tr.main_exited"));
        let killing = rec
            .events
            .iter()
            .find(|e| e.kind == EventKind::Killing)
            .unwrap();
        assert!(
            lead_killed.time_ms <= killing.time_ms,
            "{lead:#?}\n{rec:#?}"
        );
    }
    assert_eq!(summary.status.client, ClientStatus::Complete);
    bench.finish(&[alloc_id]);
}

// ---------------------------------------------------------------------------
// 4. Restart policies

fn failing(attempts: u32, mode: RestartMode, interval: Duration, script: &str) -> Task {
    let mut task = as_root(script_task("web", script));
    task.restart = RestartPolicy {
        attempts,
        interval,
        delay: Duration::from_millis(10),
        mode,
    };
    task
}

/// The lifecycle events that matter for restarts, in order.
fn restart_story(rec: &TaskRecord) -> Vec<EventKind> {
    use EventKind::*;
    kinds(rec)
        .into_iter()
        .filter(|k| matches!(k, Started | Terminated | Restarting | NotRestarting))
        .collect()
}

/// Fail mode: `attempts` restarts, then Not Restarting and a failed alloc.
#[rstest]
#[case::no_restarts(0)]
#[case::two_restarts(2)]
#[serial]
fn fail_mode_restarts_exactly_attempts_times_then_fails(#[case] attempts: u32) {
    use EventKind::*;
    require_root();
    let _faults = Faults::reset();
    // On virtual time the 60s window cannot run out between two failures,
    // however slow the machine: exactly `attempts` restarts fit in it.
    let bench = Bench::with_clock(Arc::new(VirtualClock::default()));
    let alloc = bench.submit(&job(
        "restarts",
        vec![failing(
            attempts,
            RestartMode::Fail,
            Duration::from_secs(60),
            "exit 1",
        )],
    ));
    let alloc_id = alloc.alloc_id.clone();
    let summary = bench.wait(alloc);
    let hits = taskgate_faults::history();

    let web = task(&summary.tasks, "web");
    let mut expected = Vec::new();
    for i in 0..=attempts {
        expected.extend([Started, Terminated]);
        expected.push(if i < attempts {
            Restarting
        } else {
            NotRestarting
        });
    }
    assert_eq!(restart_story(web), expected, "{web:#?}");
    assert_eq!(count(web, Started) as u32, attempts + 1);
    assert_eq!(web.restarts, attempts);
    assert_eq!(
        passes(&hits, "web:tr.before_driver_start") as u32,
        attempts + 1,
        "one launch per attempt"
    );
    // Every attempt ran its own prestart.
    assert_eq!(
        passes(&hits, "web:hook.prestart.before.task_dir") as u32,
        attempts + 1
    );
    let last = web.events.last().unwrap();
    assert_eq!(last.kind, NotRestarting);
    assert!(
        last.message.contains("Exceeded allowed attempts"),
        "{last:?}"
    );
    let attempt_numbers: Vec<u32> = web
        .events
        .iter()
        .filter(|e| e.kind == Started)
        .map(|e| e.attempt)
        .collect();
    assert_eq!(attempt_numbers, (1..=attempts + 1).collect::<Vec<_>>());
    match outcome(web) {
        Outcome::Exited {
            result,
            failed: true,
        } => assert_eq!(result.exit_code, Some(1)),
        other => panic!("expected a failed exit, got {other:?}"),
    }
    assert_eq!(summary.status.client, ClientStatus::Failed);
    bench.finish(&[alloc_id]);
}

/// Delay mode: once the attempts of the interval are used up, the next
/// restart waits out the rest of the interval instead of failing. The task
/// fails twice and then succeeds (a counter in /alloc), so the alloc ends on
/// its own. Restart windows run on the engine's virtual clock, which moves
/// only by the engine's own restart delays: the verdict cannot depend on how
/// long the real task took, so the waits are exact.
#[test]
#[serial]
fn delay_mode_waits_out_the_interval_instead_of_failing() {
    use EventKind::*;
    require_root();
    let _faults = Faults::reset();
    let clock = Arc::new(VirtualClock::default());
    let bench = Bench::with_clock(clock.clone());
    let interval = Duration::from_secs(2);
    let script =
        "n=$(cat /alloc/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /alloc/n; [ $n -ge 3 ]";
    let alloc = bench.submit(&job(
        "delay",
        vec![failing(1, RestartMode::Delay, interval, script)],
    ));
    let alloc_id = alloc.alloc_id.clone();
    let summary = bench.wait(alloc);

    let web = task(&summary.tasks, "web");
    assert_eq!(
        restart_story(web),
        vec![
            Started,
            Terminated,
            Restarting,
            Started,
            Terminated,
            Restarting,
            Started,
            Terminated,
            NotRestarting
        ],
        "{web:#?}"
    );
    let restarting: Vec<&str> = web
        .events
        .iter()
        .filter(|e| e.kind == Restarting)
        .map(|e| e.message.as_str())
        .collect();
    // The first failure uses the interval's one attempt after the 10ms
    // delay; the second, 10ms into the window, waits out the other 1.99s.
    assert_eq!(
        restarting,
        [
            "task exited unsuccessfully; restart 1 of 1; restarting in 10ms",
            "task exited unsuccessfully; attempts exhausted, waiting out the interval; restarting in 1.99s",
        ],
        "{web:#?}"
    );
    assert_eq!(
        clock.now(),
        interval,
        "the restarts slept exactly the interval"
    );
    assert!(web
        .events
        .last()
        .unwrap()
        .message
        .contains("completed successfully"));
    assert_eq!(web.restarts, 2);
    assert_exited_ok(web);
    assert_eq!(
        std::fs::read_to_string(bench.alloc_dir(&alloc_id).join("alloc/n"))
            .unwrap()
            .trim(),
        "3"
    );
    assert_eq!(summary.status.client, ClientStatus::Complete);
    bench.finish(&[alloc_id]);
}

/// A stop that lands while a failed task waits out its restart delay ends
/// the task through the kill path, not as a failure: as in Nomad ("task
/// killed between restarts": the task is dead but not failed), the stopped
/// alloc is complete. The long delay is the engine behaviour under test (the
/// stop must cut it short), not synchronisation: the test moves on from the
/// Restarting event.
#[test]
#[serial]
fn stop_during_a_restart_delay_does_not_fail_the_alloc() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let mut web = failing(2, RestartMode::Fail, Duration::from_secs(600), "exit 1");
    web.restart.delay = Duration::from_secs(30);
    let alloc = bench.submit(&job("stop-in-delay", vec![web]));
    let alloc_id = alloc.alloc_id.clone();
    let updater = alloc.updater();
    let (mut events, waiter) = alloc.into_parts();
    bench.wait_events(&mut events, &[("web", EventKind::Restarting)]);
    updater
        .send(AllocUpdate::stop())
        .expect("alloc runner listening");
    let summary = bench.wait_for(waiter);

    let web = task(&summary.tasks, "web");
    assert_eq!(
        count(web, EventKind::Started),
        1,
        "restarted despite the stop: {web:#?}"
    );
    assert_eq!(count(web, EventKind::Restarting), 1, "{web:#?}");
    assert!(web.state.is_dead());
    assert!(
        !outcome(web).failed(),
        "a task stopped during its restart delay is recorded as failed: {:?}",
        outcome(web)
    );
    assert_eq!(
        summary.status.client,
        ClientStatus::Complete,
        "a stopped alloc ends failed because its task was waiting to restart"
    );
    bench.finish(&[alloc_id]);
}

// ---------------------------------------------------------------------------
// 5, 6. Poststop, leader exit

/// A poststop task still runs after the alloc was stopped, once the other
/// tasks are dead.
#[test]
#[serial]
fn poststop_task_runs_after_a_stop() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let cleanup = lifecycle(
        as_root(script_task("cleanup", "echo cleaned > /alloc/poststop-ran")),
        LifecycleHook::Poststop,
        false,
    );
    let alloc = bench.submit(&job("poststop", vec![leader(service("leader")), cleanup]));
    let alloc_id = alloc.alloc_id.clone();
    wait_passed(Some("leader"), points::TR_AFTER_DRIVER_START);
    alloc.stop();
    let summary = bench.wait(alloc);
    let hits = taskgate_faults::history();

    assert_before(
        &hits,
        points::AR_ALLOC_STATE_SET,
        "cleanup:tr.start_condition_met",
    );
    assert_before(
        &hits,
        "leader:tr.main_exited",
        "cleanup:tr.start_condition_met",
    );
    let cleanup = task(&summary.tasks, "cleanup");
    assert_eq!(count(cleanup, EventKind::Started), 1, "{cleanup:#?}");
    assert_eq!(count(cleanup, EventKind::Terminated), 1, "{cleanup:#?}");
    assert_exited_ok(cleanup);
    let file = bench.alloc_dir(&alloc_id).join("alloc/poststop-ran");
    assert_eq!(
        std::fs::read_to_string(&file)
            .expect("poststop's file")
            .trim(),
        "cleaned"
    );
    assert_killed(task(&summary.tasks, "leader"));
    assert_eq!(summary.status.client, ClientStatus::Complete);
    bench.finish(&[alloc_id]);
}

/// When the leader exits on its own, the alloc runner kills the (running)
/// poststart sidecar, and the alloc completes without any stop.
#[test]
#[serial]
fn leader_exit_kills_the_sidecar() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let lead = leader(script_task("leader", "echo leader done"));
    let sidecar = lifecycle(service("sidecar"), LifecycleHook::Poststart, true);
    // Hold the leader right after its process exited (before it is dead)
    // until the sidecar has been started, so the sidecar really is killed
    // rather than never started.
    let held = hook_point("exited", Edge::Before, "executor_shutdown");
    park(Some("leader"), &held);
    let alloc = bench.submit(&job("leader-exit", vec![lead, sidecar]));
    let alloc_id = alloc.alloc_id.clone();
    wait_parked(Some("leader"), &held);
    wait_passed(Some("sidecar"), points::TR_AFTER_DRIVER_START);
    taskgate_faults::release(Some("leader"), &held);
    let summary = bench.wait(alloc);
    let hits = taskgate_faults::history();
    assert_all_fired();

    assert!(
        arrived_at(&hits, points::AR_UPDATE_RECEIVED).is_none(),
        "nobody sent an update"
    );
    assert_before(
        &hits,
        "leader:tr.main_exited",
        "sidecar:hook.exited.before.executor_shutdown",
    );
    let leader = task(&summary.tasks, "leader");
    assert_exited_ok(leader);
    assert_eq!(count(leader, EventKind::Killing), 0);
    let sidecar = task(&summary.tasks, "sidecar");
    assert_eq!(count(sidecar, EventKind::Started), 1);
    assert_killed(sidecar);
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert_eq!(summary.status.desired, DesiredStatus::Run);
    bench.finish(&[alloc_id]);
}

// ---------------------------------------------------------------------------
// 7. Jobspec errors

const GOOD_TASK: &str =
    "    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/bin/true\" }\n";

/// Errors surface as `file:line:col: message`, pointing at the offending line.
#[rstest]
#[case::unknown_attribute(
    format!("job \"j\" {{\n  group \"g\" {{\n{GOOD_TASK}      drivr = \"x\"\n    }}\n  }}\n}}\n"),
    6,
    "drivr"
)]
#[case::bad_duration(
    format!("job \"j\" {{\n  group \"g\" {{\n{GOOD_TASK}\n      kill_timeout = \"soon\"\n    }}\n  }}\n}}\n"),
    7,
    "soon"
)]
#[case::second_leader(
    format!("job \"j\" {{\n  group \"g\" {{\n{}      leader = true\n    }}\n{}      leader = true\n    }}\n  }}\n}}\n",
        GOOD_TASK, GOOD_TASK.replace("\"t\"", "\"u\"")),
    11,
    "already the leader"
)]
#[case::unclosed_block("job \"j\" {\n  group \"g\" {\n".to_string(), 2, "syntax error")]
fn jobspec_errors_carry_the_line(
    #[case] source: String,
    #[case] line: usize,
    #[case] needle: &str,
) {
    require_root();
    let err = jobspec::parse(&source, "web.hcl").expect_err("must not parse");
    match &err {
        JobspecError::Invalid {
            file,
            line: got,
            message,
            ..
        } => {
            assert_eq!(file, "web.hcl");
            assert_eq!(*got, line, "{err}\n{source}");
            assert!(message.contains(needle), "{err}");
        }
        other => panic!("expected an Invalid error, got {other:?}"),
    }
    assert!(
        err.to_string().starts_with(&format!("web.hcl:{line}:")),
        "{err}"
    );
}

/// The example file is the built-in job (and so parses).
#[test]
fn example_jobspec_is_the_builtin_default() {
    require_root();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sidecar.hcl");
    assert_eq!(
        jobspec::parse_file(&path).expect("examples/sidecar.hcl parses"),
        jobspec::builtin_default()
    );
}

// ---------------------------------------------------------------------------
// 8. Restore after the agent is SIGKILLed

/// Runs `taskgate agent` with these arguments (and faults), appending fault
/// hits to `log`; returns its exit status. Killed (and the test failed) if
/// it outlives the safety net.
fn agent(
    home: &EngineHome,
    extra: &[&str],
    faults: Option<&str>,
    log: &Path,
    tag: &str,
) -> ExitStatus {
    let out = home.path().join(format!("agent-{tag}.log"));
    let file = std::fs::File::create(&out).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_taskgate"));
    cmd.arg("agent")
        .arg("--data-dir")
        .arg(home.data_dir())
        .arg("--executor-bin")
        .arg(env!("CARGO_BIN_EXE_taskgate-executor"))
        .args(home.chroot_env_args())
        .args(extra)
        .env(taskgate_faults::FAULT_LOG_ENV, log)
        .env_remove(taskgate_faults::FAULTS_ENV)
        .env_remove(taskgate_executor::FAILPOINTS_ENV)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    if let Some(faults) = faults {
        cmd.env(taskgate_faults::FAULTS_ENV, faults);
    }
    let mut child = cmd.spawn().expect("spawn taskgate agent");
    let fault_log = log.to_path_buf();
    let progress = move || std::fs::metadata(&fault_log).map_or(0, |m| m.len());
    let watchdog = Watchdog::arm(child.id(), idle(), progress);
    let status = child.wait().expect("wait for agent");
    let timed_out = watchdog.disarm();
    let output = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        !timed_out,
        "agent {tag} hung: no progress for {:?}; output:\n{output}",
        idle()
    );
    assert!(
        !output.contains("needs a build with fault points"),
        "{} is not a failpoints build (another build overwrote it?):\n{output}",
        env!("CARGO_BIN_EXE_taskgate")
    );
    status
}

struct AgentRestart {
    home: EngineHome,
    /// Every fault hit of both agents, in order.
    hits: Vec<Hit>,
    /// Index in `hits` of the restarted agent's first hit.
    restarted_at: usize,
    alloc_id: String,
    client: ClientStatus,
    desired: DesiredStatus,
    tasks: Vec<TaskRecord>,
}

/// Submits the report's job to an agent that SIGKILLs itself at `kill_at`,
/// then restores with a second agent that stops the alloc.
fn kill_and_restore(kill_at: &str) -> AgentRestart {
    let home = EngineHome::new();
    std::fs::create_dir_all(home.data_dir()).unwrap();
    let job_path = home.path().join("job.json");
    std::fs::write(&job_path, serde_json::to_vec(&report_alloc()).unwrap()).unwrap();
    let log = home.path().join("faults.jsonl");
    let faults = taskgate_faults::env_spec([(kill_at, &Action::KillAgent)]);

    let first = agent(
        &home,
        &[
            "--job-json",
            job_path.to_str().unwrap(),
            "--stop-when-running",
        ],
        Some(&faults),
        &log,
        "1",
    );
    let output = std::fs::read_to_string(home.path().join("agent-1.log")).unwrap_or_default();
    assert_eq!(
        first.signal(),
        Some(libc::SIGKILL),
        "the first agent must die by SIGKILL at {kill_at}, got {first}:\n{output}"
    );
    let before = taskgate_faults::read_log(&log).unwrap();
    let last = before.last().expect("the first agent logged hits");
    assert_eq!(
        (last.name.as_str(), &last.action),
        (kill_at, &Some(Action::KillAgent)),
        "{:#?}",
        names(&before)
    );

    let second = agent(&home, &["--restore", "--stop"], None, &log, "2");
    let output = std::fs::read_to_string(home.path().join("agent-2.log")).unwrap_or_default();
    assert!(
        second.success(),
        "the restored agent failed: {second}\n{output}"
    );

    let hits = taskgate_faults::read_log(&log).unwrap();
    let state = StateDb::open(&home.data_dir().join("state.db")).expect("state db");
    let allocs = state.allocs().unwrap();
    assert_eq!(allocs.len(), 1, "{allocs:#?}");
    let alloc = &allocs[0];
    let tasks = state.tasks(&alloc.alloc_id).unwrap();
    AgentRestart {
        restarted_at: before.len(),
        hits,
        alloc_id: alloc.alloc_id.clone(),
        client: alloc.client,
        desired: alloc.desired,
        tasks,
        home,
    }
}

impl AgentRestart {
    fn passes_after_restart(&self, name: &str) -> usize {
        passes(&self.hits[self.restarted_at..], name)
    }

    /// `leader_started`: Started events the leader has (0 when the first
    /// agent died before it could emit it).
    fn assert_common(&self, leader_started: usize) {
        for t in &self.tasks {
            assert!(t.state.is_dead(), "task {} is not dead: {t:#?}", t.task);
            assert!(
                t.handle.is_none(),
                "task {} still has an executor handle: {t:#?}",
                t.task
            );
        }
        assert!(self.client.is_terminal(), "{:?}", self.client);
        assert_eq!(self.desired, DesiredStatus::Stop);
        // The leader was running when the agent died: re-attached, never
        // started again, its prestart never re-run.
        let leader = task(&self.tasks, "leader");
        assert_eq!(
            passes(&self.hits, "leader:tr.before_driver_start"),
            1,
            "{:#?}",
            names(&self.hits)
        );
        assert_eq!(
            passes(&self.hits, "leader:hook.prestart.before.task_dir"),
            1,
            "{:#?}",
            names(&self.hits)
        );
        assert_eq!(
            self.passes_after_restart("leader:hook.prestart.before.task_dir"),
            0
        );
        assert_eq!(
            passes(&self.hits, "leader:tr.after_driver_start"),
            1,
            "{:#?}",
            names(&self.hits)
        );
        assert_eq!(
            self.passes_after_restart("leader:tr.start_condition_met"),
            0,
            "{:#?}",
            names(&self.hits)
        );
        // Started by the first agent (persisted right after the launch, long
        // before the sidecar could launch), re-attached by the second.
        assert_eq!(
            count(leader, EventKind::Started),
            leader_started,
            "{leader:#?}"
        );
        assert_eq!(count(leader, EventKind::Restored), 1, "{leader:#?}");
        assert_killed(leader);
    }
}

/// Killed right after the sidecar's executor launched (before its Started
/// event): the restored agent re-attaches to both tasks, execs nothing
/// again, re-runs no prestart, stops them, and leaves nothing behind.
#[test]
#[serial]
fn agent_killed_after_sidecar_launch_restores_without_restarting_anything() {
    require_root();
    let _faults = Faults::reset();
    let run = kill_and_restore("sidecar:tr.after_driver_start");
    run.assert_common(1);
    let sidecar = task(&run.tasks, "sidecar");
    assert_eq!(
        passes(&run.hits, "sidecar:tr.before_driver_start"),
        1,
        "{:#?}",
        names(&run.hits)
    );
    assert_eq!(
        passes(&run.hits, "sidecar:hook.prestart.before.task_dir"),
        1,
        "{:#?}",
        names(&run.hits)
    );
    assert_eq!(
        run.passes_after_restart("sidecar:hook.prestart.before.task_dir"),
        0
    );
    assert_eq!(
        run.passes_after_restart("sidecar:tr.start_condition_met"),
        0,
        "{:#?}",
        names(&run.hits)
    );
    // Its Started event was never emitted (the agent died first); restore says Restored.
    assert_eq!(count(sidecar, EventKind::Started), 0, "{sidecar:#?}");
    assert_eq!(count(sidecar, EventKind::Restored), 1, "{sidecar:#?}");
    assert_eq!(sidecar.committed, Some(1));
    assert_killed(sidecar);
    assert_eq!(run.client, ClientStatus::Complete, "{:#?}", run.tasks);
    let AgentRestart { home, alloc_id, .. } = run;
    home.finish(&[alloc_id]);
}

/// Killed after the sidecar's prestart but before its start was committed:
/// the restored agent either never starts the sidecar (the stop wins) or
/// starts it only after running its own, complete prestart.
#[test]
#[serial]
fn agent_killed_before_sidecar_commit_never_execs_it_without_its_own_prestart() {
    require_root();
    let _faults = Faults::reset();
    let run = kill_and_restore("sidecar:tr.after_prestart");
    run.assert_common(1);
    let before = &run.hits[..run.restarted_at];
    assert_eq!(
        passes(before, "sidecar:tr.before_driver_start"),
        0,
        "{:#?}",
        names(before)
    );
    assert_sidecar_started_only_after_its_own_prestart(&run);
    assert_eq!(run.client, ClientStatus::Complete, "{:#?}", run.tasks);
    let AgentRestart { home, alloc_id, .. } = run;
    home.finish(&[alloc_id]);
}

/// The sidecar had no committed start when the first agent died: the
/// restored agent either never starts it (the stop wins) or starts it once,
/// only after running the sidecar's whole prestart itself.
fn assert_sidecar_started_only_after_its_own_prestart(run: &AgentRestart) {
    let sidecar = task(&run.tasks, "sidecar");
    // Nothing of it was running to re-attach to.
    assert_eq!(count(sidecar, EventKind::Restored), 0, "{sidecar:#?}");
    let after = &run.hits[run.restarted_at..];
    // Whatever the restored agent did, it reached the start gate with the
    // sidecar only after running the sidecar's whole prestart itself.
    if let Some(to_gate) = passed_at(after, "sidecar:tr.before_driver_start") {
        let prestart = passed_at(after, "sidecar:tr.after_prestart").unwrap_or_else(|| {
            panic!(
                "sidecar went for its start without prestart in the restored agent: {:#?}",
                names(after)
            )
        });
        // Every prestart hook ran in this agent, before the start.
        for hook in ["validate", "task_dir", "log_files", "task_env"] {
            let point = format!("sidecar:{}", hook_point("prestart", Edge::After, hook));
            let at = passed_at(after, &point).unwrap_or_else(|| {
                panic!(
                    "the restored agent took the sidecar to its start without running prestart hook {hook}: {:#?}",
                    names(after)
                )
            });
            assert!(at < prestart, "{:#?}", names(after));
        }
        let task_dir = passed_at(after, "sidecar:hook.prestart.before.task_dir").unwrap();
        assert!(
            task_dir < prestart && prestart < to_gate,
            "{:#?}",
            names(after)
        );
    }
    if sidecar.committed.is_none() {
        // The stop won: refused at its start condition, prestart or the gate.
        assert!(
            matches!(outcome(sidecar), Outcome::NeverStarted { .. }),
            "{sidecar:#?}"
        );
        assert_eq!(count(sidecar, EventKind::Started), 0, "{sidecar:#?}");
        assert_eq!(
            passes(after, "sidecar:tr.after_driver_start"),
            0,
            "{:#?}",
            names(after)
        );
    } else {
        // Started by the restored agent, once, after its own prestart (above).
        assert_eq!(sidecar.committed, Some(1), "{sidecar:#?}");
        assert_eq!(
            passes(after, "sidecar:tr.after_driver_start"),
            1,
            "{:#?}",
            names(after)
        );
        assert_eq!(count(sidecar, EventKind::Started), 1, "{sidecar:#?}");
        assert_killed(sidecar);
    }
}

/// Killed right after the leader's executor launched (before its Running
/// state and Started event were persisted, and before the sidecar could
/// start): the restored agent finds the leader's executor by its socket,
/// re-attaches without a second exec or prestart, and the sidecar is only
/// ever started after a prestart of its own.
#[test]
#[serial]
fn agent_killed_after_leader_launch_reattaches_the_leader() {
    require_root();
    let _faults = Faults::reset();
    let run = kill_and_restore("leader:tr.after_driver_start");
    run.assert_common(0);
    let before = &run.hits[..run.restarted_at];
    assert!(
        !before.iter().any(|h| h.name.starts_with("sidecar:")),
        "{:#?}",
        names(before)
    );
    assert_sidecar_started_only_after_its_own_prestart(&run);
    assert_eq!(run.client, ClientStatus::Complete, "{:#?}", run.tasks);
    let AgentRestart { home, alloc_id, .. } = run;
    home.finish(&[alloc_id]);
}

/// The task's own dirs belong to the user it runs as (here the default,
/// nobody), as in Nomad: an unprivileged task can write all three.
#[test]
#[serial]
fn an_unprivileged_task_writes_its_own_dirs() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let writer = script_task(
        "writer",
        "for d in /local /tmp /secrets; do echo hi > $d/f || exit 1; done; id -u",
    );
    assert_eq!(writer.user, None, "runs as the engine's default user");
    let alloc = bench.submit(&job("dirs", vec![writer]));
    let alloc_id = alloc.alloc_id.clone();
    let summary = bench.wait(alloc);
    let rec = task(&summary.tasks, "writer");
    assert_exited_ok(rec);
    let out = std::fs::read_to_string(
        bench
            .alloc_dir(&alloc_id)
            .join("alloc/logs/writer.stdout.0"),
    )
    .unwrap();
    assert_eq!(out.trim(), "65534", "ran as nobody");
    bench.finish(&[alloc_id]);
}
