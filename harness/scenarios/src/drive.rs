//! Driving an in-process case on an engine in this process, real driver or
//! fake: configure its faults, submit the job, drive the schedule or the
//! faults, deliver the stop, and wait for the alloc to end.

use crate::control;
use crate::interventions;
use crate::lab::LabError;
use crate::model::{FaultCase, Scenario, Then};
use crate::outcome::by_process;
use crate::plan::InProcess;
use crate::server::Server;
use crate::until_running::{settled, UntilRunning};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
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
    let server_slot: Arc<OnceLock<Arc<Server>>> = Default::default();
    let slot = server_slot.clone();
    interventions::install(faults, data_dir.to_path_buf(), move |what| {
        if let Some(server) = slot.get() {
            server.deliver(what)
        }
    });
    let _guard = runtime.enter();
    let alloc = engine.submit(&scenario.job, None)?;
    let server = Arc::new(Server::new(
        alloc.control(),
        scenario.job.clone(),
        faults.clone(),
    ));
    let _ = server_slot.set(server.clone());
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
/// and it gets one more idle window to wind down.
fn finish(
    runtime: &tokio::runtime::Runtime,
    faults: &Faults,
    alloc: taskgate_engine::AllocHandle,
    problems: &mut Vec<String>,
) -> Option<AllocSummary> {
    let idle = patience::step();
    let waited = runtime.block_on(async {
        let wait = alloc.wait();
        tokio::pin!(wait);
        if let Some(summary) = until_idle(faults, &mut wait, idle).await {
            return Ok(summary);
        }
        faults.release_all();
        Err(until_idle(faults, &mut wait, idle).await)
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

/// Polls `wait` until it is ready, or until no point of the run's `faults`
/// was reached for a whole `idle` window (`None`): the harness's hang
/// detector for futures.
pub async fn until_idle<F: std::future::Future + Unpin>(
    faults: &Faults,
    wait: &mut F,
    idle: Duration,
) -> Option<F::Output> {
    loop {
        let before = faults.progress();
        match tokio::time::timeout(idle, &mut *wait).await {
            Ok(out) => return Some(out),
            Err(_) if faults.progress() == before => return None,
            Err(_) => {}
        }
    }
}
