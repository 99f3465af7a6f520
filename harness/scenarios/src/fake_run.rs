//! The wide search: a scenario's in-process cases against the engine's
//! fake driver, without root, a kernel gate or processes, thousands of
//! schedules a second. The fake world's launches stand in for the kernel's
//! execs: each start the driver was asked for is an executor exec, denied
//! (as the real gate denies it) when the task dir it needs is missing.
//! Only what the fake world can know is judged; the real executor under
//! the exec oracle remains where it counts.

use crate::drive::drive;
use crate::gate::{Runner, Workshop};
use crate::judge::{expect_known, harness_error, judge};
use crate::lab::{io, LabError};
use crate::model::Then;
use crate::outcome::{summary_records, unfired, Outcome, FAULT_LOG, RESTART_SEED};
use crate::plan::{Case, InProcess, Run};
use crate::report::RunReport;
use std::time::Instant;
use taskgate_engine::fake_driver::{Call, Exit};
use taskgate_engine::{DataDir, Engine, EngineConfig};
use taskgate_faults::points::EX_SPAWNED;
use taskgate_faults::{Action, Faults, Hit};
use taskgate_oracle::{Answer, ExecIdentity, ExecRecord};

/// More user restarts than any case asks of one run.
const USER_RESTARTS: usize = 8;

pub struct FakeRunner<'a> {
    pub runtime: &'a tokio::runtime::Runtime,
}

impl Runner for FakeRunner<'_> {
    fn run(&self, run: &Run<'_>) -> RunReport {
        let started = Instant::now();
        let mut report = match self.run_in(run) {
            Ok(outcome) => judge(run, outcome),
            Err(err) => harness_error(run, String::new(), &err),
        };
        expect_known(run.scenario, &mut report);
        report.duration = started.elapsed();
        report
    }
}

/// Fake runs share nothing but the runtime: every worker of a parallel
/// loop runs on the one runner.
impl Workshop for FakeRunner<'_> {
    type Error = std::convert::Infallible;

    fn serve(&self, work: &mut dyn FnMut(&dyn Runner)) -> Result<(), Self::Error> {
        work(self);
        Ok(())
    }
}

impl FakeRunner<'_> {
    fn run_in(&self, run: &Run<'_>) -> Result<Outcome, LabError> {
        let scenario = run.scenario;
        let plan = fake_plan(run).map_err(LabError::FakeCannot)?;
        let root = crate::lab::scratch_root();
        let home = tempfile::tempdir_in(&root).map_err(io("creating", &root))?;
        let faults = Faults::new();
        let config = EngineConfig {
            pids_max: 64,
            restart_seed: RESTART_SEED,
            faults: faults.clone(),
            ..EngineConfig::for_fake(DataDir::new(home.path()))
        };
        let driver = config.fake_driver();
        // Tasks that run to completion by their role exit at once, as often
        // as their policy and a run's user restarts may start them; every
        // other task runs until stopped.
        for task in scenario.tasks() {
            if task.is_poststop() || (task.is_prestart() && !task.is_sidecar()) {
                let starts = task.restart.attempts as usize + 1 + USER_RESTARTS;
                driver.script(&task.name, std::iter::repeat_n(Exit::Code(0), starts));
            }
        }
        let engine = Engine::open_on_fake_in_memory(config, &driver)?;
        // The hits go to a log too, for the faults that await one.
        let log = home.path().join(FAULT_LOG);
        faults.log_to(Some(&log)).map_err(io("opening", &log))?;
        let driven = drive(&engine, &faults, scenario, plan, home.path(), self.runtime);
        let hits = faults.history();
        faults.reset();
        let _ = faults.log_to(None);
        let (summary, mut problems) = driven?;
        problems.extend(unfired(plan.faults(), &hits));
        let execs = launches_as_execs(&hits, &driver.calls());
        let tasks = summary
            .as_ref()
            .map(|s| s.tasks.clone())
            .unwrap_or_default();
        let records = summary_records(summary.as_ref());
        Ok(Outcome {
            hits,
            execs,
            tasks,
            records,
            problems,
        })
    }
}

/// The in-process plan of `run` the fake driver carries out, or what it
/// cannot do that `run` asks of it.
pub fn fake_plan<'r, 's>(run: &'r Run<'s>) -> Result<&'r InProcess<'s>, &'static str> {
    let plan = match &run.case {
        Case::InProcess(plan) => plan,
        Case::Agent(_) => return Err("kill an agent process"),
    };
    if plan.faults().iter().any(|f| acts_on_processes(&f.action)) {
        return Err("act on processes it does not have");
    }
    if (plan.faults().iter()).any(|f| taskgate_faults::points::in_executor(&f.point.point)) {
        return Err("reach an executor's points: it has no executor");
    }
    if matches!(
        plan,
        InProcess::Faults {
            then: Then::RunToEnd,
            ..
        }
    ) {
        return Err("tell when a task would exit on its own");
    }
    Ok(plan)
}

/// The interventions that need real processes (alloc updates do not).
fn acts_on_processes(action: &Action) -> bool {
    matches!(action, Action::KillAgent)
        || matches!(action, Action::Intervene(i)
            if !i.is_sent_to_alloc())
}

/// Each launch the fake driver was asked for, as the executor exec a real
/// launch is, placed right after its hit: the k-th `ex.spawned` hit of a
/// task is its k-th start call, denied when that start found no task dir.
fn launches_as_execs(hits: &[Hit], calls: &[Call]) -> Vec<(ExecRecord, u64)> {
    let mut starts: std::collections::BTreeMap<&str, Vec<Option<&str>>> = Default::default();
    for call in calls {
        match call {
            Call::Start { task } => starts.entry(task).or_default().push(None),
            Call::StartFailed { task, error } => starts.entry(task).or_default().push(Some(error)),
            _ => {}
        }
    }
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    let mut seq = 0;
    hits.iter()
        .enumerate()
        .filter_map(|(i, hit)| {
            let task = hit
                .point
                .scope()
                .filter(|_| hit.point.point == EX_SPAWNED)?;
            let n = seen.entry(task.to_string()).or_default();
            let refusal = starts.get(task).and_then(|s| s.get(*n)).copied().flatten();
            *n += 1;
            seq += 1;
            let record = ExecRecord {
                seq,
                pid: 0,
                exe: "fake launch".into(),
                identity: ExecIdentity::Executor {
                    alloc_id: String::new(),
                    task: task.to_string(),
                },
                verdict: if refusal.is_some() {
                    Answer::Deny
                } else {
                    Answer::Allow
                },
                reason: refusal.map_or(String::new(), |r| {
                    format!("{}: {r}", taskgate_oracle::DENY_LAYOUT)
                }),
                judged: true,
                cgroup_peers: Vec::new(),
                executor_peers: Vec::new(),
                started_version: None,
            };
            Some((record, i as u64 + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::{catalogue, find};
    use taskgate_oracle::Event;

    fn runtime() -> tokio::runtime::Runtime {
        taskgate_engine::engine_runtime().expect("the engine's runtime")
    }

    /// Without root: every stop-race schedule of the scenario of docs/nomad-prestart-race-report.txt,
    /// and fault cases, against the fake driver, all judged and passing.
    #[test]
    fn the_catalogues_in_process_cases_pass_against_the_fake() {
        let runtime = runtime();
        let runner = FakeRunner { runtime: &runtime };
        let all_scenarios = catalogue();
        for name in [
            "sidecar-stop",
            "prestart-stop",
            "poststop-after-stop",
            "slow-boundaries",
            "prestart-hook-error",
        ] {
            let scenario = find(&all_scenarios, name).unwrap();
            for run in &scenario.runs(5, 1) {
                let report = runner.run(run);
                assert!(report.passed(), "{}", report.explain());
                assert!(
                    report.history.iter().any(|e| matches!(e, Event::Exec(_)))
                        || name == "prestart-hook-error",
                    "launches show as execs: {}",
                    report.explain()
                );
            }
        }
    }

    /// Every in-process fault case of the catalogue the fake can run (no
    /// process to act on, a stop to end it) passes against it too: the
    /// engine's logic alone, judged as the gate judges it.
    #[test]
    fn the_catalogues_fault_cases_the_fake_can_run_pass_against_it() {
        let runtime = runtime();
        let runner = FakeRunner { runtime: &runtime };
        let (mut ran, mut failed) = (0, Vec::new());
        for scenario in catalogue() {
            // Their prestart task fails on its own; the fake's tasks exit 0.
            let own_exits = matches!(
                scenario.name.as_str(),
                "prestart-task-fails" | "prestart-task-fails-final"
            );
            if own_exits || !matches!(scenario.kind, crate::model::Kind::Faults(_)) {
                continue;
            }
            for run in (scenario.runs(0, 0).iter()).filter(|run| fake_plan(run).is_ok()) {
                let report = runner.run(run);
                if !report.passed() {
                    failed.push(report.explain());
                }
                ran += 1;
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));
        assert!(ran >= 40, "only {ran} fault cases ran against the fake");
    }

    /// Runs in one process overlap: each owns its fault registry, so the
    /// parks of one never hold the other's engine, nor its hits fill the
    /// other's history. Two threads run every stop-race schedule of the
    /// report's scenario at once, on one runtime, and each run passes as
    /// it does alone.
    #[test]
    fn runs_in_one_process_overlap_and_each_judges_its_own_history() {
        let runtime = runtime();
        let all = catalogue();
        let scenario = find(&all, "sidecar-stop").unwrap();
        let runs = scenario.runs(0, 0);
        let reports: Vec<Vec<RunReport>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let runner = FakeRunner { runtime: &runtime };
                        runs.iter().map(|run| runner.run(run)).collect()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        for report in reports.iter().flatten() {
            assert!(report.passed(), "{}", report.explain());
        }
        assert_eq!(reports.concat().len(), 2 * runs.len());
    }

    #[test]
    fn cases_needing_processes_are_refused_by_name() {
        let runtime = runtime();
        let runner = FakeRunner { runtime: &runtime };
        let all = catalogue();
        for name in ["agent-kill", "executor-death-restart", "held-runner-stop"] {
            let report = runner.run(&find(&all, name).unwrap().runs(0, 0)[0]);
            assert!(
                report.problems[0].contains("the fake driver cannot"),
                "{:?}",
                report.problems
            );
        }
    }

    #[test]
    fn a_refused_start_is_a_denied_exec() {
        let hits = [Hit {
            seq: 1,
            point: taskgate_faults::PointName::new(Some("web"), EX_SPAWNED),
            action: None,
            detail: None,
            at_us: 0,
        }];
        let calls = [Call::StartFailed {
            task: "web".into(),
            error: "task dir /x missing".into(),
        }];
        let (r, at) = &launches_as_execs(&hits, &calls)[0];
        assert_eq!(*at, 1, "right after its hit");
        assert_eq!(r.verdict, Answer::Deny);
        assert!(
            r.reason.starts_with(taskgate_oracle::DENY_LAYOUT),
            "{}",
            r.reason
        );
    }
}
