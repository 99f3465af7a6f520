//! Driving an in-process case on an engine in this process, real driver or
//! fake: configure its faults, submit the job, drive the schedule or the
//! faults, deliver the stop, and wait for the alloc to end.

use crate::control;
use crate::interventions;
use crate::lab::LabError;
use crate::model::{FaultCase, Scenario, Then};
use crate::outcome::{by_process, with_every_event};
use crate::plan::InProcess;
use crate::server::{Server, Servers};
use crate::until_running::{settled, UntilRunning};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use taskgate_engine::task_state::TaskEvent;
use taskgate_engine::{AllocSummary, Engine};
use taskgate_faults::{patience, Await, Fault, Faults, Intervention};

/// Runs an in-process case on `engine`, whose fault points are `faults`:
/// configures them, submits the job, drives the schedule or the faults,
/// and waits for the alloc to end. The real and the fake driver's runs
/// share it.
pub(crate) fn drive(
    engine: &Engine,
    faults: &Faults,
    scenario: &Scenario,
    case: &InProcess<'_>,
    data_dir: &Path,
    runtime: &tokio::runtime::Runtime,
) -> Result<(Option<AllocSummary>, Vec<String>), LabError> {
    let mut problems = Vec::new();
    // Configure before the alloc exists, so no boundary can be missed.
    match case {
        InProcess::Race {
            controlled,
            schedule,
        } => control::arm(faults, schedule, controlled),
        InProcess::Faults { case, .. } => configure(faults, &case.faults),
    }
    // An intervention the alloc's runners reach before submit returned
    // waits for the server (it was dropped, and the run went on without it).
    let servers = Arc::new(Servers::default());
    let delivering = servers.clone();
    interventions::install(faults, data_dir.to_path_buf(), move |what| {
        delivering.deliver(what)
    });
    let _guard = runtime.enter();
    let alloc = engine.submit(&scenario.job, None)?;
    let server = Arc::new(Server::new(
        alloc.control(),
        scenario.job.clone(),
        faults.clone(),
    ));
    servers.add(server.clone());
    let stop = move || server.deliver(Intervention::StopAlloc);
    match case {
        InProcess::Race {
            controlled,
            schedule,
        } => {
            if let Err(err) = control::drive(faults, schedule, controlled, stop) {
                problems.push(err.to_string());
                // Hung: let every parked actor go, so the run can end
                // and its report show what it got stuck on.
                faults.release_all();
            }
        }
        InProcess::Faults { case, then, .. } => {
            if let Err(err) = drive_faults(faults, scenario, case, *then, stop) {
                problems.push(format!("engine hung: {err}"));
                faults.release_all();
            }
        }
    }
    let summary = finish(runtime, faults, alloc, &mut problems);
    Ok((summary, problems))
}

/// Waits for the alloc to finish. A run that stops making progress is
/// hung: its parks are released (the history stays whole for the report)
/// and it gets one more idle window to wind down. A run that ran away gets
/// none: its caller drops the runtime it loops on. Each task record of the
/// summary holds every event its runner emitted (see [`with_every_event`]).
fn finish(
    runtime: &tokio::runtime::Runtime,
    faults: &Faults,
    alloc: taskgate_engine::AllocHandle,
    problems: &mut Vec<String>,
) -> Option<AllocSummary> {
    let (mut stream, waiter) = alloc.into_parts();
    let mut summary = wait_for_end(runtime, faults, waiter, problems)?;
    let mut emitted = Vec::new();
    while let Ok(event) = stream.try_recv() {
        emitted.push(event);
    }
    let seen: Vec<&TaskEvent> = emitted.iter().collect();
    problems.extend(with_every_event(&mut summary.tasks, &seen));
    Some(summary)
}

/// [`finish`]'s wait for the alloc's end, hung or not.
fn wait_for_end(
    runtime: &tokio::runtime::Runtime,
    faults: &Faults,
    waiter: taskgate_engine::AllocWaiter,
    problems: &mut Vec<String>,
) -> Option<AllocSummary> {
    let idle = patience::step();
    let waited = runtime.block_on(async {
        let wait = waiter.wait();
        tokio::pin!(wait);
        if let Some(summary) = until_idle(faults, &mut wait, idle).await {
            return Ok(summary);
        }
        faults.release_all();
        Err(until_idle(faults, &mut wait, idle).await)
    });
    match waited {
        Ok(summary) => Some(summary),
        Err(late) if ran_away(faults.progress()) => {
            problems.push(format!(
                "allocation did not finish: it ran away, reaching {} fault points (a run that ends reaches a few hundred; the bound is {})",
                faults.progress(),
                patience::RUNAWAY_POINTS
            ));
            late
        }
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

/// Configures a case's faults the engine reaches in the run's `faults`
/// (the executors' are in the engine's config).
fn configure(faults: &Faults, case: &[Fault]) {
    let (_, engine) = by_process(case);
    for fault in engine {
        faults.configure_fault(fault);
    }
}

/// Drives an in-process fault case: lets a depth-2 pair's parked actor go
/// once its event happened, then delivers the stop as `then` says.
fn drive_faults(
    faults: &Faults,
    scenario: &Scenario,
    case: &FaultCase,
    then: Then,
    stop: impl FnOnce(),
) -> Result<(), taskgate_faults::WaitTimeout> {
    let idle = patience::step();
    if let Some((_, event)) = &case.pair {
        faults.wait_any(&[Await::Passed(event.to_string())], idle)?;
        faults.release_all();
    }
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
        Then::StopWhenRunning => UntilRunning::new(scenario.tasks(), &BTreeSet::new()).awaits(),
    };
    for condition in &waits {
        faults.wait_any(condition, idle)?;
    }
    stop();
    Ok(())
}

/// How often [`until_idle`] looks at the run's progress while it waits.
const PROGRESS_PROBE: Duration = Duration::from_millis(500);

/// Polls `wait` until it is ready, or gives up (`None`) once no point of
/// the run's `faults` was reached for a whole `idle` window, or once the
/// run has reached [`patience::RUNAWAY_POINTS`]: the harness's hang and
/// livelock detector for futures.
pub async fn until_idle<F: std::future::Future + Unpin>(
    faults: &Faults,
    wait: &mut F,
    idle: Duration,
) -> Option<F::Output> {
    let probe = idle.min(PROGRESS_PROBE);
    let mut seen = faults.progress();
    let mut quiet = Duration::ZERO;
    loop {
        if let Ok(out) = tokio::time::timeout(probe, &mut *wait).await {
            return Some(out);
        }
        let now = faults.progress();
        if ran_away(now) {
            return None;
        }
        if now == seen {
            // At least `probe` passed per round: the window is never short.
            quiet += probe;
            if quiet >= idle {
                return None;
            }
        } else {
            seen = now;
            quiet = Duration::ZERO;
        }
    }
}

/// Whether a run at `progress` reached more points than any run that ends should.
fn ran_away(progress: u64) -> bool {
    progress >= patience::RUNAWAY_POINTS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Case;
    use taskgate_engine::task_state::EventKind;
    use taskgate_engine::{DataDir, EngineConfig};

    /// The summary a run is judged by holds every event the task runners
    /// emitted, not only the last ten a task's record keeps. Two restarts
    /// of the alloc, each once web runs (as its poststart hooks begin: at
    /// its driver start it is not running yet, and a restart there may
    /// find nothing to restart), and a stop as its third attempt runs,
    /// give web 17 events; the check that no attempt ends twice saw only
    /// the last ten, from the middle of its second attempt on.
    #[test]
    fn a_runs_summary_holds_each_tasks_every_event() {
        let text = r#"
            scenario "restarted-twice" {
              about = "two restarts of the alloc, then its stop"
              job "one-service" {
                group "g" {
                  task "web" {
                    driver = "exec"
                    config {
                      command = "/bin/sleep"
                      args    = ["600"]
                    }
                  }
                }
              }
              faults {
                then = "run-to-end"
                each {
                  points = ["web:hook.poststart.before.persist_handle"]
                  action = "restart-alloc"
                  with   = ["web:hook.poststart.before.persist_handle@2=restart-alloc",
                            "web:hook.poststart.before.persist_handle@3=stop-alloc"]
                }
              }
              expect {
                status = "complete"
              }
            }
        "#;
        let no_files = |_: &str| Err("no job files here".to_string());
        let scenario = &crate::file::parse(text, "test", &no_files).unwrap()[0];
        let runs = scenario.runs(0, 0);
        let Case::InProcess(case) = &runs[0].case else {
            panic!("an in-process case")
        };
        let runtime = taskgate_engine::engine_runtime().unwrap();
        let home = tempfile::tempdir().unwrap();
        let faults = Faults::new();
        let config = EngineConfig {
            faults: faults.clone(),
            ..EngineConfig::for_fake(DataDir::new(home.path()))
        };
        let driver = config.fake_driver();
        let engine = Engine::open_on_fake_in_memory(config, &driver).unwrap();
        let (summary, problems) =
            drive(&engine, &faults, scenario, case, home.path(), &runtime).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let web: Vec<_> = (summary.unwrap().tasks[0].events.iter())
            .map(|e| (e.kind, e.attempt))
            .collect();
        assert_eq!(driver.starts("web"), 3, "{web:?}");
        assert!(
            web.starts_with(&[(EventKind::Received, 0), (EventKind::TaskSetup, 1)]),
            "web's events begin at {:?} ({} of them)",
            web.first(),
            web.len()
        );
        assert!(
            web.len() > taskgate_engine::state::MAX_TASK_EVENTS,
            "{web:?}"
        );
    }

    /// Reaches `points` fault points, one per turn of the runtime, then
    /// sends; `None` never stops.
    fn reaching(faults: &Faults, points: Option<u64>) -> tokio::sync::oneshot::Receiver<()> {
        let (done, reached) = tokio::sync::oneshot::channel();
        let faults = faults.clone();
        tokio::spawn(async move {
            let mut n = 0;
            while points.is_none_or(|p| n < p) {
                faults.reach(None, "step");
                n += 1;
                tokio::task::yield_now().await;
            }
            let _ = done.send(());
        });
        reached
    }

    /// `until_idle` with a safety net: a wait the bound should have ended
    /// fails the test instead of hanging it.
    fn wait(points: Option<u64>, idle: Duration) -> (Option<bool>, Faults) {
        let runtime = taskgate_engine::engine_runtime().unwrap();
        let faults = Faults::new();
        let _in = runtime.enter();
        let mut reached = reaching(&faults, points);
        let waited = runtime.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(600),
                until_idle(&faults, &mut reached, idle),
            )
            .await
            .expect("until_idle never gave up")
        });
        runtime.shutdown_background();
        (waited.map(|r| r.is_ok()), faults)
    }

    #[test]
    fn a_run_that_keeps_reaching_points_without_ending_ran_away() {
        // An idle window far longer than the safety net: only the
        // runaway bound can end this wait.
        let (waited, faults) = wait(None, Duration::from_secs(3600));
        assert_eq!(waited, None);
        assert!(ran_away(faults.progress()), "{} points", faults.progress());
    }

    #[test]
    fn a_run_that_ends_under_the_bound_is_waited_for() {
        let (waited, faults) = wait(
            Some(patience::RUNAWAY_POINTS / 2),
            Duration::from_secs(3600),
        );
        assert_eq!(waited, Some(true));
        assert!(!ran_away(faults.progress()));
    }

    #[test]
    fn a_run_that_stops_reaching_points_is_idle() {
        let runtime = taskgate_engine::engine_runtime().unwrap();
        let faults = Faults::new();
        faults.reach(None, "step");
        let waited = runtime.block_on(until_idle(
            &faults,
            &mut std::future::pending::<()>(),
            Duration::from_secs(1),
        ));
        assert_eq!(waited, None);
        assert!(!ran_away(faults.progress()));
    }
}
