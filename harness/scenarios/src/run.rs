//! Runs one case of a scenario against the real engine and executor, then
//! judges the whole recorded history.

use crate::catalogue::{is_executor_point, Kind, Scenario, Then};
use crate::control;
use crate::lab::{io, FaultSource, Lab, LabError};
use crate::leftovers;
use crate::report::{Case, RunReport, Token};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use taskgate_engine::state::{StateDb, TaskRecord};
use taskgate_engine::{AllocSummary, ClientStatus, Engine, EngineConfig};
use taskgate_faults::patience;
use taskgate_faults::points::{self, HARNESS_STOP_DELIVERED};
use taskgate_faults::{Action, Await, Hit};
use taskgate_oracle::{Event, ExecRecord};

pub struct Runner<'a> {
    pub lab: &'a Lab,
    pub runtime: &'a tokio::runtime::Runtime,
    /// The `taskgate` binary, for agent processes the harness SIGKILLs.
    pub agent_bin: PathBuf,
    /// Keep failing runs' data dirs for inspection (off when failures are
    /// the expected outcome, as in the legacy proof).
    pub keep_failures: bool,
    runs: std::cell::Cell<u32>,
}

/// What one run produced, before judging.
struct Outcome {
    description: String,
    hits: Vec<Hit>,
    execs: Vec<(ExecRecord, u64)>,
    tasks: Vec<TaskRecord>,
    client: Option<ClientStatus>,
    restarted_at: Option<u64>,
    problems: Vec<String>,
}

impl<'a> Runner<'a> {
    pub fn new(lab: &'a Lab, runtime: &'a tokio::runtime::Runtime, agent_bin: PathBuf) -> Self {
        Runner {
            lab,
            runtime,
            agent_bin,
            keep_failures: true,
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
        let outcome = match std::fs::create_dir(&data_dir).map_err(io("creating", &data_dir)) {
            Ok(()) => self.run_in(scenario, case, &data_dir),
            Err(err) => Err(err),
        };
        let mut report = match outcome {
            Ok(outcome) => judge(scenario, token, outcome),
            Err(err) => RunReport {
                token,
                description: String::new(),
                violations: Vec::new(),
                problems: vec![format!("harness error: {err}")],
                history: Vec::new(),
                duration: Duration::ZERO,
            },
        };
        report.problems.extend(leftovers::find(
            &data_dir.display().to_string(),
            Some(&data_dir.join("run")),
        ));
        // Task cgroups are named after the alloc, not the data dir.
        for alloc in std::fs::read_dir(data_dir.join("allocs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            report
                .problems
                .extend(leftovers::cgroups(&alloc.file_name().to_string_lossy()));
        }
        if report.passed() || !self.keep_failures {
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
        case: &Case,
        data_dir: &Path,
    ) -> Result<Outcome, LabError> {
        let may_start_late: BTreeSet<String> = scenario
            .tasks()
            .iter()
            .filter(|t| t.is_poststop())
            .map(|t| t.name.clone())
            .collect();
        let allocs = data_dir.join("allocs");
        match (&scenario.kind, case) {
            (Kind::AgentKill { boundaries }, Case::Fault(i)) => {
                let log = data_dir.join("faults.jsonl");
                let first =
                    self.lab
                        .begin_run(allocs, may_start_late, FaultSource::Log(log.clone()));
                let mut outcome = self.agent_kill(scenario, &boundaries[*i], data_dir, &log)?;
                outcome.execs = self.lab.end_run(first);
                Ok(outcome)
            }
            _ => {
                taskgate_faults::reset();
                let first = self
                    .lab
                    .begin_run(allocs, may_start_late, FaultSource::InProcess);
                let result = self.in_process(scenario, case, data_dir);
                // Whatever happened, nothing may stay parked or configured.
                taskgate_faults::reset();
                std::env::remove_var(taskgate_executor::FAILPOINTS_ENV);
                let mut outcome = result?;
                outcome.execs = self.lab.end_run(first);
                Ok(outcome)
            }
        }
    }

    fn engine_config(&self, data_dir: &Path) -> EngineConfig {
        EngineConfig {
            data_dir: data_dir.to_path_buf(),
            executor_bin: self.lab.executor_bin().to_path_buf(),
            chroot_env: self.lab.chroot_env().clone(),
            default_user: "nobody".to_string(),
            pids_max: 64,
            clock: std::sync::Arc::new(taskgate_engine::clock::SystemClock::default()),
        }
    }

    fn in_process(
        &self,
        scenario: &Scenario,
        case: &Case,
        data_dir: &Path,
    ) -> Result<Outcome, LabError> {
        let engine = Engine::open(self.engine_config(data_dir))
            .map_err(|e| LabError::Engine(e.to_string()))?;
        let mut problems = Vec::new();
        let description = describe_case(scenario, case);
        // Configure before the alloc exists, so no boundary can be missed.
        let mut fault = None;
        match (&scenario.kind, case) {
            (Kind::StopRace { controlled }, Case::Schedule(schedule)) => {
                control::arm(schedule, controlled)
            }
            (Kind::Faults { faults, .. }, Case::Fault(i)) => {
                let (name, action) = &faults[*i];
                if is_executor_point(name) {
                    std::env::set_var(
                        taskgate_executor::FAILPOINTS_ENV,
                        taskgate_faults::env_spec([(name.as_str(), action)]),
                    );
                } else {
                    let (scope, point) = name
                        .split_once(':')
                        .map_or((None, name.as_str()), |(s, p)| (Some(s), p));
                    taskgate_faults::configure(scope, point, action.clone());
                }
                fault = Some((name.clone(), action.clone()));
            }
            _ => unreachable!("cases are built per kind"),
        }
        let _guard = self.runtime.enter();
        let alloc = engine
            .submit(&scenario.job, None)
            .map_err(|e| LabError::Engine(e.to_string()))?;
        let updater = alloc.updater();
        let stop = move || {
            taskgate_faults::reach(None, HARNESS_STOP_DELIVERED);
            let _ = updater.send(taskgate_engine::AllocUpdate::stop());
        };
        match (&scenario.kind, case) {
            (Kind::StopRace { controlled }, Case::Schedule(schedule)) => {
                if let Err(err) = control::drive(schedule, controlled, stop) {
                    problems.push(err.to_string());
                    // Hung: let every parked actor go, so the run can end
                    // and its report show what it got stuck on.
                    taskgate_faults::release_all();
                }
            }
            (Kind::Faults { then, .. }, Case::Fault(_)) => {
                let (name, _) = fault.as_ref().expect("set above");
                // Stop only once the fault has done its work, so a fault that
                // did not prevent the start cannot leave a task running.
                let settled: Vec<Vec<Await>> = match then {
                    Then::StopWhenSettled => {
                        let task = name.split_once(':').map(|(t, _)| t).unwrap_or_default();
                        vec![vec![
                            Await::Passed(taskgate_faults::scoped(
                                Some(task),
                                points::TR_AFTER_DRIVER_START,
                            )),
                            Await::Passed(taskgate_faults::scoped(
                                Some(task),
                                points::TR_MAIN_EXITED,
                            )),
                        ]]
                    }
                    Then::StopWhenRunning => scenario
                        .tasks()
                        .iter()
                        .filter(|t| !t.is_poststop())
                        .map(|t| {
                            vec![Await::Passed(taskgate_faults::scoped(
                                Some(&t.name),
                                points::TR_AFTER_DRIVER_START,
                            ))]
                        })
                        .collect(),
                };
                for condition in &settled {
                    if let Err(err) = taskgate_faults::wait_any(condition, patience::step()) {
                        problems.push(format!("engine hung: {err}"));
                        break;
                    }
                }
                stop();
            }
            _ => unreachable!("cases are built per kind"),
        }
        let summary = self.finish(alloc, &mut problems);
        let hits = taskgate_faults::history();
        if let Some((name, _)) = &fault {
            let fired = if is_executor_point(name) {
                let needle = taskgate_faults::injected_message(name);
                summary
                    .iter()
                    .flat_map(|s| &s.tasks)
                    .flat_map(|t| &t.events)
                    .any(|e| e.message.contains(&needle))
            } else {
                hits.iter().any(|h| &h.name == name)
            };
            if !fired {
                problems.push(format!("configured fault {name} never fired"));
            }
        }
        for unfired in taskgate_faults::unfired() {
            // Later parks of a schedule legitimately go unreached when the
            // runner correctly bails out; the first park must always fire.
            if let Case::Schedule(schedule) = case {
                if schedule
                    .task_park_points()
                    .next()
                    .is_some_and(|p| unfired.ends_with(p))
                {
                    problems.push(format!("configured park {unfired} never fired"));
                }
            }
        }
        Ok(Outcome {
            description,
            hits,
            execs: Vec::new(),
            client: summary.as_ref().map(|s| s.status.client),
            tasks: summary.map(|s| s.tasks).unwrap_or_default(),
            restarted_at: None,
            problems,
        })
    }

    /// Waits for the alloc to finish. A run that stops making progress is
    /// hung: its parks are released (the history stays whole for the report)
    /// and it gets one more idle window to wind down.
    fn finish(
        &self,
        alloc: taskgate_engine::AllocHandle,
        problems: &mut Vec<String>,
    ) -> Option<AllocSummary> {
        let idle = patience::step();
        let waited = self.runtime.block_on(async {
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

    /// Kills a real agent process at `boundary`, restarts it, lets it stop
    /// the alloc, and reads what happened from the state database.
    fn agent_kill(
        &self,
        scenario: &Scenario,
        boundary: &str,
        data_dir: &Path,
        log: &Path,
    ) -> Result<Outcome, LabError> {
        let job_path = data_dir.join("job.json");
        let job = serde_json::to_vec(&scenario.job).expect("jobs serialize");
        std::fs::write(&job_path, job).map_err(io("writing", &job_path))?;
        let mut problems = Vec::new();
        let agent = |extra: &[&str],
                     faults: Option<&str>|
         -> Result<Option<std::process::ExitStatus>, LabError> {
            let mut cmd = Command::new(&self.agent_bin);
            cmd.arg("agent")
                .arg("--data-dir")
                .arg(data_dir)
                .arg("--executor-bin")
                .arg(self.lab.executor_bin());
            for (host, task) in self.lab.chroot_env() {
                cmd.arg("--chroot-env")
                    .arg(format!("{}:{}", host.display(), task.display()));
            }
            cmd.args(extra)
                .env(taskgate_faults::FAULT_LOG_ENV, log)
                .env_remove(taskgate_faults::FAULTS_ENV);
            let agent_log = data_dir.join("agent.log");
            let stderr = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&agent_log)
                .map_err(io("opening", &agent_log))?;
            cmd.stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(stderr);
            if let Some(faults) = faults {
                cmd.env(taskgate_faults::FAULTS_ENV, faults);
            }
            let mut child = cmd.spawn().map_err(io("running agent", &self.agent_bin))?;
            let log = log.to_path_buf();
            let progress = move || std::fs::metadata(&log).map_or(0, |m| m.len());
            wait_or_kill(&mut child, patience::step(), progress)
                .map_err(io("waiting for agent", &self.agent_bin))
        };
        let kill = taskgate_faults::env_spec([(boundary, &Action::KillAgent)]);
        let first = agent(
            &[
                "--job-json",
                &job_path.display().to_string(),
                "--stop-when-running",
            ],
            Some(&kill),
        )?;
        match first {
            None => problems.push(format!(
                "agent hung (killed after {:?} without progress) instead of dying at {boundary}",
                patience::step()
            )),
            Some(status)
                if std::os::unix::process::ExitStatusExt::signal(&status)
                    != Some(libc::SIGKILL) =>
            {
                problems.push(format!(
                    "agent was not killed at {boundary} (exit: {status}); the fault never fired"
                ))
            }
            Some(_) => {}
        }
        let restarted_at = taskgate_faults::read_log(log)
            .map_err(io("reading", log))?
            .len() as u64;
        match agent(&["--restore", "--stop"], None)? {
            Some(status) if status.success() => {}
            Some(status) => problems.push(format!("restored agent failed: {status}")),
            None => problems.push(format!(
                "restored agent hung (killed after {:?} without progress)",
                patience::step()
            )),
        }
        let hits = taskgate_faults::read_log(log).map_err(io("reading", log))?;
        let state = StateDb::open(&data_dir.join("state.db"))
            .map_err(|e| LabError::Engine(e.to_string()))?;
        let allocs = state
            .allocs()
            .map_err(|e| LabError::Engine(e.to_string()))?;
        let alloc = allocs.first();
        let tasks = match alloc {
            Some(a) => state
                .tasks(&a.alloc_id)
                .map_err(|e| LabError::Engine(e.to_string()))?,
            None => Vec::new(),
        };
        if alloc.is_none() {
            problems.push("no allocation in the state database".into());
        }
        Ok(Outcome {
            description: format!("SIGKILL the agent at {boundary}, restart, stop"),
            hits,
            execs: Vec::new(),
            client: alloc.map(|a| a.client),
            tasks,
            restarted_at: Some(restarted_at),
            problems,
        })
    }
}

/// Waits for an agent, killing it if it makes no progress for `idle`
/// (`None`): a hung agent must fail its run, not the whole gate.
fn wait_or_kill(
    child: &mut std::process::Child,
    idle: Duration,
    progress: impl Fn() -> u64 + Send + 'static,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    let watchdog = crate::watchdog::Watchdog::arm(child.id(), idle, progress);
    let status = child.wait();
    let killed = watchdog.disarm();
    Ok((!killed).then_some(status?))
}

fn describe_case(scenario: &Scenario, case: &Case) -> String {
    match (&scenario.kind, case) {
        (Kind::StopRace { controlled }, Case::Schedule(s)) => format!(
            "park {controlled} at [{}], update at [{}], stop at park #{}, {:?} first, swaps {:?}",
            s.task_park_points().collect::<Vec<_>>().join(", "),
            s.update_park_points().collect::<Vec<_>>().join(", "),
            s.stop_at,
            s.first,
            s.swaps
        ),
        (Kind::Faults { faults, then }, Case::Fault(i)) => {
            let then = match then {
                Then::StopWhenSettled => "stop once the task settled",
                Then::StopWhenRunning => "stop once every task runs",
            };
            format!("{} at {}, {then}", faults[*i].1, faults[*i].0)
        }
        _ => String::new(),
    }
}

/// Builds the merged history and checks every invariant over it.
fn judge(scenario: &Scenario, token: Token, outcome: Outcome) -> RunReport {
    let mut problems = outcome.problems;
    let history = merge(
        &outcome.hits,
        &outcome.execs,
        &outcome.tasks,
        outcome.restarted_at,
    );
    let names: Vec<String> = scenario.tasks().iter().map(|t| t.name.clone()).collect();
    let late: Vec<String> = scenario
        .tasks()
        .iter()
        .filter(|t| t.is_poststop())
        .map(|t| t.name.clone())
        .collect();
    let violations = taskgate_oracle::check(&history, &names, &late);
    let expected = expected_status(scenario);
    if outcome.client != Some(expected) {
        problems.push(format!(
            "alloc ended {:?}, expected {expected:?}",
            outcome.client
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
        description: outcome.description,
        violations,
        problems,
        history,
        duration: Duration::ZERO,
    }
}

fn expected_status(scenario: &Scenario) -> ClientStatus {
    match &scenario.kind {
        Kind::Faults {
            then: Then::StopWhenSettled,
            ..
        } => ClientStatus::Failed,
        _ => ClientStatus::Complete,
    }
}

/// One causal order: fault hits in sequence, each exec placed after the hits
/// recorded before it was judged, task events (the engine's own reports,
/// used only for liveness) at the end in their own order.
fn merge(
    hits: &[Hit],
    execs: &[(ExecRecord, u64)],
    tasks: &[TaskRecord],
    restarted_at: Option<u64>,
) -> Vec<Event> {
    let mut keyed: Vec<(u64, u8, Event)> = Vec::new();
    for (i, hit) in hits.iter().enumerate() {
        let event = if hit.name == HARNESS_STOP_DELIVERED {
            Event::StopDelivered { seq: hit.seq }
        } else {
            Event::FaultHit(hit.clone())
        };
        keyed.push((i as u64 + 1, 0, event));
    }
    if let Some(at) = restarted_at {
        keyed.push((at, 1, Event::AgentRestarted));
    }
    for (record, at) in execs {
        keyed.push((*at, 2, Event::Exec(record.clone())));
    }
    keyed.sort_by_key(|(at, order, _)| (*at, *order));
    let mut history: Vec<Event> = keyed.into_iter().map(|(_, _, e)| e).collect();
    for task in tasks {
        history.extend(task.events.iter().map(|e| Event::TaskEvent {
            task: e.task.clone(),
            kind: e.kind.label().to_string(),
            attempt: e.attempt,
        }));
    }
    history
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
