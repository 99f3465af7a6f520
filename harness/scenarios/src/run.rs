//! Runs one case of a scenario against the real engine and executor, then
//! judges the whole recorded history.
//!
//! Every run logs its fault hits to one file that the engine (in this
//! process or an agent's) and every executor append to, so the history
//! holds each process's hits in one order; the exec gate's records are
//! placed in it by the log's length when each exec was judged.

use crate::agent_run;
use crate::control;
use crate::history::{self, Records};
use crate::interventions;
use crate::lab::{io, FaultSource, Lab, LabError};
use crate::leftovers;
use crate::model::{FaultCase, Host, Kind, Restore, Scenario, Then};
use crate::report::{Case, RunReport, Token};
use crate::server::Server;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use taskgate_engine::state::TaskRecord;
use taskgate_engine::{AllocSummary, DataDir, DesiredStatus, Engine, EngineConfig};
use taskgate_executor::ExecutorFaults;
use taskgate_faults::points;
use taskgate_faults::schedule::Schedule;
use taskgate_faults::{patience, Await, Fault, Hit, Intervention};
use taskgate_oracle::ExecRecord;

/// The restart jitter seed of every engine the harness runs, real or
/// fake, in process or as an agent: a replay waits exactly as its run did.
pub const RESTART_SEED: u64 = 0x7a5c_6a7e;

pub struct Runner<'a> {
    pub lab: &'a Lab,
    pub runtime: &'a tokio::runtime::Runtime,
    /// The `taskgate` binary, for agent processes the harness SIGKILLs.
    pub agent_bin: PathBuf,
    /// Keep failing runs' data dirs for inspection (off when failures are
    /// the expected outcome, as in the legacy proof).
    pub keep_failures: bool,
    /// For an HTML report: the runs' data the keeper picks is copied into
    /// the report, as it links it (see [`crate::html::kept`]), instead of
    /// being kept in the lab's temp dir.
    pub report_data: Option<crate::html::kept::Keeper>,
    runs: std::cell::Cell<u32>,
}

/// One case of a scenario, resolved to what it runs.
#[derive(Clone, Copy)]
pub(crate) enum Plan<'s> {
    InProcess(InProcess<'s>),
    Agent {
        case: &'s FaultCase,
        then: Then,
        restore: Restore,
    },
}

/// A case the engine runs in the harness's own process.
#[derive(Clone, Copy)]
pub(crate) enum InProcess<'s> {
    Race {
        controlled: &'s str,
        schedule: &'s Schedule,
    },
    Faults {
        case: &'s FaultCase,
        then: Then,
    },
}

impl InProcess<'_> {
    /// The faults the plan configures (a schedule's parks aside).
    pub(crate) fn faults(&self) -> &[Fault] {
        match self {
            InProcess::Race { .. } => &[],
            InProcess::Faults { case, .. } => &case.faults,
        }
    }
}

impl<'s> Plan<'s> {
    pub(crate) fn of(scenario: &'s Scenario, case: &'s Case) -> Result<Plan<'s>, LabError> {
        let mismatch = |problem: String| LabError::Case {
            scenario: scenario.name.clone(),
            problem,
        };
        match (&scenario.kind, case) {
            (Kind::StopRace { controlled }, Case::Schedule(schedule)) => {
                Ok(Plan::InProcess(InProcess::Race {
                    controlled,
                    schedule,
                }))
            }
            (Kind::Faults(plan), Case::Fault(i)) => {
                let case = plan.cases.get(*i).ok_or_else(|| {
                    mismatch(format!(
                        "has {} cases; #{i} is out of range",
                        plan.cases.len()
                    ))
                })?;
                Ok(match plan.host {
                    Host::InProcess => Plan::InProcess(InProcess::Faults {
                        case,
                        then: plan.then,
                    }),
                    Host::Agent { restore } => Plan::Agent {
                        case,
                        then: plan.then,
                        restore,
                    },
                })
            }
            (Kind::StopRace { .. }, Case::Fault(_)) => {
                Err(mismatch("is a stop race: its cases are schedules".into()))
            }
            (Kind::Faults(_), Case::Schedule(_)) => Err(mismatch(
                "is a fault scenario: its cases are numbered".into(),
            )),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Plan::InProcess(InProcess::Race {
                controlled,
                schedule: s,
            }) => format!(
                "park {controlled} at [{}], update at [{}], stop at park #{}, {:?} first, swaps {:?}",
                s.task_park_points().collect::<Vec<_>>().join(", "),
                s.update_park_points().collect::<Vec<_>>().join(", "),
                s.stop_at,
                s.first,
                s.swaps
            ),
            Plan::InProcess(InProcess::Faults { case, then }) => {
                format!("{}, {}", faults(case), then_text(*then))
            }
            Plan::Agent {
                case,
                then,
                restore,
            } => format!(
                "agent with {}, {}; restored agent {}",
                faults(case),
                then_text(*then),
                match restore {
                    Restore::Stop => "stops the alloc",
                    Restore::Run => "lets it run",
                }
            ),
        }
    }
}

fn faults(case: &FaultCase) -> String {
    case.faults
        .iter()
        .map(Fault::to_string)
        .collect::<Vec<_>>()
        .join(" + ")
}

fn then_text(then: Then) -> &'static str {
    match then {
        Then::StopWhenSettled => "stop once the faulted task settled",
        Then::StopWhenRunning => "stop once every task runs",
        Then::RunToEnd => "no stop",
    }
}

/// What one run produced, before judging.
pub(crate) struct Outcome {
    pub hits: Vec<Hit>,
    pub execs: Vec<(ExecRecord, u64)>,
    pub tasks: Vec<TaskRecord>,
    pub records: Records,
    pub problems: Vec<String>,
}

impl<'a> Runner<'a> {
    pub fn new(lab: &'a Lab, runtime: &'a tokio::runtime::Runtime, agent_bin: PathBuf) -> Self {
        Runner {
            lab,
            runtime,
            agent_bin,
            keep_failures: true,
            report_data: None,
            runs: std::cell::Cell::new(0),
        }
    }

    pub fn run(&self, scenario: &Scenario, case: &Case) -> RunReport {
        let started = Instant::now();
        let token = Token {
            scenario: scenario.name.to_string(),
            case: case.clone(),
        };
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let data_dir = self.lab.work_dir().join(format!("run-{n}"));
        let mut description = String::new();
        let outcome = Plan::of(scenario, case).and_then(|plan| {
            description = plan.describe();
            std::fs::create_dir(&data_dir).map_err(io("creating", &data_dir))?;
            self.run_in(scenario, &plan, &data_dir)
        });
        let mut report = match outcome {
            Ok(outcome) => judge(scenario, token, description, outcome),
            Err(err) => harness_error(token, description, &err),
        };
        report.problems.extend(leftovers::find(
            &data_dir.display().to_string(),
            Some(&DataDir::new(&data_dir).run()),
        ));
        // Task cgroups are named after the alloc, not the data dir. What a
        // bug leaked is reported, and swept so the next run (and the host)
        // starts clean.
        for alloc in std::fs::read_dir(DataDir::new(&data_dir).allocs())
            .into_iter()
            .flatten()
            .flatten()
        {
            report.problems.extend(leftovers::sweep_cgroups(
                &alloc.file_name().to_string_lossy(),
            ));
        }
        expect_known(scenario, &mut report);
        if let Some(keeper) = &self.report_data {
            // The report holds what it links, and no temp dir stays.
            keeper.keep(&data_dir, &mut report);
            let _ = std::fs::remove_dir_all(&data_dir);
        } else if report.passed() || !self.keep_failures {
            let _ = std::fs::remove_dir_all(&data_dir);
        } else {
            self.lab.keep_work_dir();
            report
                .problems
                .push(format!("data kept in {}", data_dir.display()));
        }
        report.duration = started.elapsed();
        report
    }

    fn run_in(
        &self,
        scenario: &Scenario,
        plan: &Plan<'_>,
        data_dir: &Path,
    ) -> Result<Outcome, LabError> {
        let may_start_late: BTreeSet<String> = scenario
            .tasks()
            .iter()
            .filter(|t| t.is_poststop())
            .map(|t| t.name.clone())
            .collect();
        let log = data_dir.join("faults.jsonl");
        let first = self.lab.begin_run(
            DataDir::new(data_dir).allocs(),
            may_start_late,
            FaultSource::Log(log.clone()),
        );
        let result = match plan {
            Plan::Agent {
                case,
                then,
                restore,
            } => agent_run::run(self, scenario, case, *then, *restore, data_dir, &log),
            Plan::InProcess(plan) => self.in_process(scenario, plan, data_dir, &log),
        };
        let mut outcome = result?;
        outcome.execs = self.lab.end_run(first);
        let names: Vec<String> = scenario.tasks().iter().map(|t| t.name.clone()).collect();
        outcome.records.survivors = interventions::sweep(data_dir, &names);
        Ok(outcome)
    }

    fn engine_config(&self, data_dir: &Path, executor_faults: ExecutorFaults) -> EngineConfig {
        EngineConfig {
            data_dir: DataDir::new(data_dir),
            executor_bin: self.lab.executor_bin().to_path_buf(),
            chroot_env: self.lab.chroot_env().clone(),
            default_user: "nobody".to_string(),
            pids_max: 64,
            clock: std::sync::Arc::new(taskgate_engine::clock::SystemClock::default()),
            restart_seed: RESTART_SEED,
            cgroup_parent: self.lab.cgroup_parent().clone(),
            executor_faults,
        }
    }

    fn in_process(
        &self,
        scenario: &Scenario,
        plan: &InProcess<'_>,
        data_dir: &Path,
        log: &Path,
    ) -> Result<Outcome, LabError> {
        taskgate_faults::reset();
        taskgate_faults::log_to(Some(log)).map_err(io("opening", log))?;
        let result = self.in_process_logged(scenario, plan, data_dir, log);
        // Whatever happened, nothing may stay parked, configured or logged.
        taskgate_faults::reset();
        let _ = taskgate_faults::log_to(None);
        result
    }

    fn in_process_logged(
        &self,
        scenario: &Scenario,
        plan: &InProcess<'_>,
        data_dir: &Path,
        log: &Path,
    ) -> Result<Outcome, LabError> {
        // The executors' faults go in their config; the engine's are
        // configured in this process (drive()).
        let (executor, _) = by_process(plan.faults());
        let executor_faults = ExecutorFaults {
            spec: (!executor.is_empty()).then(|| taskgate_faults::env_spec(executor)),
            log: Some(log.to_path_buf()),
        };
        let engine = Engine::open(self.engine_config(data_dir, executor_faults))?;
        let (summary, mut problems) = drive(&engine, scenario, plan, data_dir, self.runtime)?;
        let hits = taskgate_faults::read_log(log).map_err(io("reading", log))?;
        problems.extend(unfired(plan.faults(), &hits));
        if let InProcess::Race { schedule, .. } = plan {
            // Later parks of a schedule legitimately go unreached when the
            // runner correctly bails out; the first park must always fire.
            for unfired in taskgate_faults::unfired() {
                if schedule
                    .task_park_points()
                    .next()
                    .is_some_and(|p| unfired.ends_with(p))
                {
                    problems.push(format!("configured park {unfired} never fired"));
                }
            }
        }
        let tasks = summary
            .as_ref()
            .map(|s| s.tasks.clone())
            .unwrap_or_default();
        Ok(Outcome {
            hits,
            execs: Vec::new(),
            records: summary_records(summary.as_ref()),
            tasks,
            problems,
        })
    }
}

/// Runs an in-process plan on `engine`: configures its faults, submits the
/// job, drives the schedule or the faults, and waits for the alloc to end.
/// The real and the fake driver's runs share it.
pub(crate) fn drive(
    engine: &Engine,
    scenario: &Scenario,
    plan: &InProcess<'_>,
    data_dir: &Path,
    runtime: &tokio::runtime::Runtime,
) -> Result<(Option<AllocSummary>, Vec<String>), LabError> {
    let mut problems = Vec::new();
    // Configure before the alloc exists, so no boundary can be missed.
    match plan {
        InProcess::Race {
            controlled,
            schedule,
        } => control::arm(schedule, controlled),
        InProcess::Faults { case, .. } => configure(&case.faults),
    }
    let server_slot: Arc<OnceLock<Arc<Server>>> = Default::default();
    let slot = server_slot.clone();
    interventions::install(data_dir.to_path_buf(), move |what| {
        if let Some(server) = slot.get() {
            server.deliver(what)
        }
    });
    let _guard = runtime.enter();
    let alloc = engine.submit(&scenario.job, None)?;
    let server = Arc::new(Server::new(alloc.control(), scenario.job.clone()));
    let _ = server_slot.set(server.clone());
    let stop = move || server.deliver(Intervention::StopAlloc);
    match plan {
        InProcess::Race {
            controlled,
            schedule,
        } => {
            if let Err(err) = control::drive(schedule, controlled, stop) {
                problems.push(err.to_string());
                // Hung: let every parked actor go, so the run can end
                // and its report show what it got stuck on.
                taskgate_faults::release_all();
            }
        }
        InProcess::Faults { case, then } => {
            if let Err(err) = drive_faults(scenario, case, *then, stop) {
                problems.push(format!("engine hung: {err}"));
                taskgate_faults::release_all();
            }
        }
    }
    let summary = finish(runtime, alloc, &mut problems);
    Ok((summary, problems))
}

/// Waits for the alloc to finish. A run that stops making progress is
/// hung: its parks are released (the history stays whole for the report)
/// and it gets one more idle window to wind down.
fn finish(
    runtime: &tokio::runtime::Runtime,
    alloc: taskgate_engine::AllocHandle,
    problems: &mut Vec<String>,
) -> Option<AllocSummary> {
    let idle = patience::step();
    let waited = runtime.block_on(async {
        let wait = alloc.wait();
        tokio::pin!(wait);
        if let Some(summary) = until_idle(&mut wait, idle).await {
            return Ok(summary);
        }
        taskgate_faults::release_all();
        Err(until_idle(&mut wait, idle).await)
    });
    match waited {
        Ok(summary) => Some(summary),
        Err(late) => {
            problems.push(format!(
                "allocation did not finish: no progress for {idle:?}{}",
                if late.is_some() {
                    " until its parks were released"
                } else {
                    ", even after its parks were released"
                }
            ));
            late
        }
    }
}

/// Configures a case's faults the engine reaches, in this process (the
/// executors' are in the engine's config).
fn configure(faults: &[Fault]) {
    let (_, engine) = by_process(faults);
    for fault in engine {
        taskgate_faults::configure_fault(fault);
    }
}

/// A case's faults split by the process that reaches their points:
/// (the executors', the engine's).
pub(crate) fn by_process(faults: &[Fault]) -> (Vec<&Fault>, Vec<&Fault>) {
    faults
        .iter()
        .partition(|f| points::in_executor(&f.point.point))
}

/// A configured fault that never fired proved nothing: its hit (the one
/// that carries its action) must be in the log.
pub(crate) fn unfired(faults: &[Fault], hits: &[Hit]) -> Vec<String> {
    faults
        .iter()
        .filter(|f| {
            !hits
                .iter()
                .any(|h| h.point == f.point && h.action.as_ref() == Some(&f.action))
        })
        .map(|f| format!("configured fault {f} never fired"))
        .collect()
}

/// Drives an in-process fault case: lets a depth-2 pair's parked actor go
/// once its event happened, then delivers the stop as `then` says.
fn drive_faults(
    scenario: &Scenario,
    case: &FaultCase,
    then: Then,
    stop: impl FnOnce(),
) -> Result<(), taskgate_faults::WaitTimeout> {
    let idle = patience::step();
    if let Some((_, event)) = &case.pair {
        taskgate_faults::wait_any(&[Await::Passed(event.to_string())], idle)?;
        taskgate_faults::release_all();
    }
    let passed =
        |task: &str, point: &str| Await::Passed(taskgate_faults::scoped(Some(task), point));
    let settled = |task: &str| {
        vec![
            passed(task, points::TR_AFTER_DRIVER_START),
            passed(task, points::TR_MAIN_EXITED),
        ]
    };
    let waits: Vec<Vec<Await>> = match then {
        Then::RunToEnd => return Ok(()),
        Then::StopWhenSettled => case
            .faults
            .iter()
            .filter_map(|f| f.point.scope())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(settled)
            .collect(),
        Then::StopWhenRunning => scenario
            .tasks()
            .iter()
            .filter(|t| !t.is_poststop())
            .map(|t| settled(&t.name))
            .collect(),
    };
    for condition in &waits {
        taskgate_faults::wait_any(condition, idle)?;
    }
    stop();
    Ok(())
}

/// What an in-process run's summary says, for the history.
pub(crate) fn summary_records(summary: Option<&AllocSummary>) -> Records {
    let tasks = summary.map(|s| s.tasks.as_slice()).unwrap_or_default();
    Records {
        restart_counts: restart_counts(tasks),
        status: summary.map(|s| s.status.client),
        desired_stop: summary.map(|s| s.status.desired == DesiredStatus::Stop),
        alloc_id: summary.map(|s| s.alloc_id.clone()),
        ..Records::default()
    }
}

/// Each task's restart count as its record holds it.
pub(crate) fn restart_counts(tasks: &[TaskRecord]) -> Vec<(String, u32)> {
    tasks.iter().map(|t| (t.task.clone(), t.restarts)).collect()
}

/// Builds the merged history and checks every invariant over it, then the
/// scenario's expectations, a known violation included.
pub(crate) fn judge(
    scenario: &Scenario,
    token: Token,
    description: String,
    outcome: Outcome,
) -> RunReport {
    let mut problems = outcome.problems;
    let history = history::merge(
        &outcome.hits,
        &outcome.execs,
        &outcome.tasks,
        &outcome.records,
    );
    let shapes = crate::shapes::shapes(scenario, outcome.records.alloc_id.as_deref());
    let violations = taskgate_oracle::check(&history, &shapes);
    let expected = scenario.expect.status;
    if outcome.records.status != Some(expected) {
        problems.push(format!(
            "alloc ended {:?}, expected {expected:?}",
            outcome.records.status
        ));
    }
    for task in &outcome.tasks {
        if !task.state.is_dead() {
            problems.push(format!(
                "task {} is not dead at the end: {:?}",
                task.task, task.state
            ));
        }
    }
    for task in outcome.tasks.iter().filter(|t| t.handle.is_some()) {
        problems.push(format!(
            "task {} still holds an executor handle after the alloc finished",
            task.task
        ));
    }
    RunReport {
        token,
        description,
        violations,
        problems,
        expected: Vec::new(),
        history,
        duration: Duration::ZERO,
    }
}

/// A run the harness could not carry out: a failure of its own, not a verdict.
pub(crate) fn harness_error(token: Token, description: String, err: &LabError) -> RunReport {
    RunReport {
        token,
        description,
        violations: Vec::new(),
        problems: vec![format!("harness error: {err}")],
        expected: Vec::new(),
        history: Vec::new(),
        duration: Duration::ZERO,
    }
}

/// A strict expected failure: while a scenario carries a known violation,
/// its run passes only if that violation shows, and fails the day it
/// quietly disappears. Whatever else the bug broke moves to the report's
/// expected consequences, shown but not failing.
pub(crate) fn expect_known(scenario: &Scenario, report: &mut RunReport) {
    let Some(known) = &scenario.expect.known_violation else {
        return;
    };
    if report
        .violations
        .iter()
        .any(|v| v.invariant == known.invariant)
    {
        report.expected.extend(
            std::mem::take(&mut report.violations)
                .into_iter()
                .map(|v| format!("{}: {}", v.invariant, v.detail))
                .chain(std::mem::take(&mut report.problems)),
        );
        report
            .expected
            .insert(0, format!("known violation, {}", known.bug));
    } else {
        report.problems.push(format!(
            "known violation of \"{}\" ({}) did not happen: if the bug is fixed, remove the marker",
            known.invariant, known.bug
        ));
    }
}

/// Polls `wait` until it is ready, or until no fault point was reached for
/// a whole `idle` window (`None`): the harness's hang detector for futures.
pub async fn until_idle<F: std::future::Future + Unpin>(
    wait: &mut F,
    idle: Duration,
) -> Option<F::Output> {
    loop {
        let before = taskgate_faults::progress();
        match tokio::time::timeout(idle, &mut *wait).await {
            Ok(out) => return Some(out),
            Err(_) if taskgate_faults::progress() == before => return None,
            Err(_) => {}
        }
    }
}
