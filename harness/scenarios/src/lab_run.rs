//! The real runner: one case of a scenario against the real engine and
//! executor in the lab, then judged over the whole recorded history.
//!
//! Every run logs its fault hits to one file that the engine (in this
//! process or an agent's) and every executor append to, so the history
//! holds each process's hits in one order; the exec gate's records are
//! placed in it by the log's length when each exec was judged.

use crate::agent_run;
use crate::drive::drive;
use crate::gate::{Runner, Workshop};
use crate::html::kept::Keeper;
use crate::interventions;
use crate::judge::{expect_known, harness_error, judge};
use crate::lab::{io, FaultSource, Lab, LabError};
use crate::leftovers;
use crate::outcome::{by_process, summary_records, unfired, Outcome, FAULT_LOG, RESTART_SEED};
use crate::plan::{Case, InProcess, Run};
use crate::report::RunReport;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use taskgate_engine::{DataDir, Engine, EngineConfig};
use taskgate_executor::ExecutorFaults;
use taskgate_faults::Faults;

pub struct LabRunner<'a> {
    pub lab: &'a Lab,
    /// The `taskgate` binary, for agent processes the harness SIGKILLs.
    pub agent_bin: PathBuf,
    /// Keep failing runs' data dirs for inspection (off when failures are
    /// the expected outcome, as in the legacy proof).
    pub keep_failures: bool,
    /// For an HTML report: the runs' data the keeper picks is copied into
    /// the report, as it links it (see [`crate::html::kept`]), instead of
    /// being kept in the lab's temp dir.
    pub report_data: Option<Arc<Keeper>>,
    runs: std::cell::Cell<u32>,
}

/// A lab for each worker of a parallel gate ([`crate::gate::run_jobs`]),
/// made on the worker's thread; its runner keeps failures and report data
/// as the one runner of a serial gate would.
pub struct LabWorkshop {
    /// The executor each lab copies onto its marked filesystem.
    pub executor_bin: PathBuf,
    pub agent_bin: PathBuf,
    pub keep_failures: bool,
    pub report_data: Option<Arc<Keeper>>,
}

impl Workshop for LabWorkshop {
    type Error = LabError;

    fn serve(&self, work: &mut dyn FnMut(&dyn Runner)) -> Result<(), LabError> {
        let lab = Lab::new(&self.executor_bin)?;
        let mut runner = LabRunner::new(&lab, self.agent_bin.clone());
        runner.keep_failures = self.keep_failures;
        runner.report_data = self.report_data.clone();
        work(&runner);
        Ok(())
    }
}

impl Runner for LabRunner<'_> {
    fn run(&self, run: &Run<'_>) -> RunReport {
        let started = Instant::now();
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let data_dir = self.lab.work_dir().join(format!("run-{n}"));
        let outcome = sockets_fit(run, &data_dir)
            .and_then(|()| std::fs::create_dir(&data_dir).map_err(io("creating", &data_dir)))
            .and_then(|()| self.run_in(run, &data_dir));
        let mut report = match outcome {
            Ok(outcome) => judge(run, outcome),
            Err(err) => harness_error(run, run.describe(), &err),
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
        expect_known(run.scenario, &mut report);
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
}

/// Refuses a run whose executors could not listen in its data dir: a lab
/// made too deep (a long `TMPDIR`) would fail their starts, and the run
/// would report the engine's clear error as a violation of its own.
fn sockets_fit(run: &Run<'_>, data_dir: &Path) -> Result<(), LabError> {
    let alloc_id = "0".repeat(taskgate_engine::ALLOC_ID_LEN);
    let run_dir = DataDir::new(data_dir).run();
    run.scenario.tasks().iter().try_for_each(|task| {
        taskgate_executor::check_socket_path(&taskgate_executor::socket_path(
            &run_dir, &alloc_id, &task.name,
        ))
        .map_err(LabError::from)
    })
}

impl<'a> LabRunner<'a> {
    pub fn new(lab: &'a Lab, agent_bin: PathBuf) -> Self {
        LabRunner {
            lab,
            agent_bin,
            keep_failures: true,
            report_data: None,
            runs: std::cell::Cell::new(0),
        }
    }

    fn run_in(&self, run: &Run<'_>, data_dir: &Path) -> Result<Outcome, LabError> {
        let scenario = run.scenario;
        let may_start_late: BTreeSet<String> = scenario
            .tasks()
            .iter()
            .filter(|t| t.is_poststop())
            .map(|t| t.name.clone())
            .collect();
        let log = data_dir.join(FAULT_LOG);
        let first = self.lab.begin_run(
            DataDir::new(data_dir).allocs(),
            may_start_late,
            FaultSource::Log(log.clone()),
        );
        let result = match &run.case {
            Case::Agent(case) => {
                let agents = agent_run::Agents {
                    lab: self.lab,
                    bin: &self.agent_bin,
                };
                agents.run(scenario, case, data_dir, &log, first)
            }
            Case::InProcess(case) => self.in_process(run, case, data_dir, &log),
        };
        let mut outcome = result?;
        outcome.execs = self.lab.end_run(first);
        let names: Vec<String> = scenario.tasks().iter().map(|t| t.name.clone()).collect();
        outcome.records.survivors = interventions::sweep(data_dir, &names);
        Ok(outcome)
    }

    fn engine_config(
        &self,
        data_dir: &Path,
        executor_faults: ExecutorFaults,
        faults: Faults,
    ) -> EngineConfig {
        EngineConfig {
            data_dir: DataDir::new(data_dir),
            executor_bin: self.lab.executor_bin().to_path_buf(),
            chroot_env: self.lab.chroot_env().clone(),
            default_user: "nobody".to_string(),
            pids_max: 64,
            keep_finished: taskgate_engine::DEFAULT_KEEP_FINISHED,
            clock: std::sync::Arc::new(taskgate_engine::clock::SystemClock::default()),
            restart_seed: RESTART_SEED,
            cgroup_parent: self.lab.cgroup_parent().clone(),
            executor_faults,
            faults,
        }
    }

    fn in_process(
        &self,
        run: &Run<'_>,
        case: &InProcess<'_>,
        data_dir: &Path,
        log: &Path,
    ) -> Result<Outcome, LabError> {
        // The run's own fault points: no other run sees them.
        let faults = Faults::new();
        faults.log_to(Some(log)).map_err(io("opening", log))?;
        let result = self.in_process_logged(&faults, run, case, data_dir, log);
        // Whatever happened, nothing may stay parked, configured or logged.
        faults.reset();
        let _ = faults.log_to(None);
        result
    }

    fn in_process_logged(
        &self,
        faults: &Faults,
        run: &Run<'_>,
        case: &InProcess<'_>,
        data_dir: &Path,
        log: &Path,
    ) -> Result<Outcome, LabError> {
        // The executors' faults go in their config; the engine's are
        // configured in this process (drive()).
        let (executor, _) = by_process(case.faults());
        let executor_faults = ExecutorFaults {
            spec: (!executor.is_empty()).then(|| taskgate_faults::env_spec(executor)),
            log: Some(log.to_path_buf()),
        };
        let config = self.engine_config(data_dir, executor_faults, faults.clone());
        let engine = Engine::open(config)?;
        // The run's own runtime: dropping it ends whatever the engine still
        // runs, so a runaway engine cannot loop on into the next run.
        let runtime =
            taskgate_engine::engine_runtime().map_err(io("starting a runtime for", data_dir))?;
        let driven = drive(&engine, faults, run.scenario, case, data_dir, &runtime);
        // An action that ran on while the run ended records its pass late.
        let settled = faults.settle();
        runtime.shutdown_background();
        let (summary, mut problems) = driven?;
        if !settled {
            problems.push("a fault's action was still under way long after the run ended".into());
        }
        let hits = taskgate_faults::read_log(log).map_err(io("reading", log))?;
        problems.extend(unfired(case.faults(), &hits));
        if let InProcess::Race { schedule, .. } = case {
            // Later parks of a schedule legitimately go unreached when the
            // runner correctly bails out; the first park must always fire.
            for unfired in faults.unfired() {
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
