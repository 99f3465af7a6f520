//! Drives a schedule: parks the controlled task runner and the update
//! handler at the schedule's boundaries, delivers the stop when the task
//! runner is parked at the chosen one, and releases parked actors one at a
//! time in the schedule's priority order. Every wait is on a fault-point
//! event, never on time; an idle window that restarts on every new hit
//! ([`taskgate_faults::patience`]) only turns a hung engine into a failure.

use taskgate_faults::patience;
use taskgate_faults::points::{AR_UPDATE_APPLIED, TR_MAIN_EXITED};
use taskgate_faults::schedule::{Actor, Schedule};
use taskgate_faults::{scoped, Action, Await, Faults};

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("engine hung: {0}")]
    Hung(#[from] taskgate_faults::WaitTimeout),
}

/// One actor's progress through its park points.
struct Track {
    parks: Vec<String>,
    next: usize,
    /// Passing this point means the actor will reach none of its remaining parks.
    gone: String,
}

impl Track {
    fn pending(&self) -> Option<&str> {
        self.parks.get(self.next).map(String::as_str)
    }

    /// Waits until the actor is parked at its next point (true) or gone (false).
    fn settle(&mut self, faults: &Faults) -> Result<bool, ControlError> {
        let Some(point) = self.pending() else {
            return Ok(false);
        };
        let which = faults.wait_any(
            &[
                Await::Parked(point.to_string()),
                Await::Passed(self.gone.clone()),
            ],
            patience::step(),
        )?;
        if which == 1 {
            self.next = self.parks.len();
        }
        Ok(which == 0)
    }

    fn release(&mut self, faults: &Faults) {
        if let Some(point) = self.pending() {
            faults.release(None, point);
            self.next += 1;
        }
    }
}

/// Configures the schedule's parks in the run's `faults`. Call before the
/// alloc is submitted.
pub fn arm(faults: &Faults, schedule: &Schedule, task: &str) {
    for point in schedule.task_park_points() {
        faults.configure(Some(task), point, Action::Park);
    }
    for point in schedule.update_park_points() {
        faults.configure(None, point, Action::Park);
    }
}

/// Runs the schedule to its end; `stop` delivers the stop update.
pub fn drive(
    faults: &Faults,
    schedule: &Schedule,
    task: &str,
    stop: impl FnOnce(),
) -> Result<(), ControlError> {
    let mut runner = Track {
        parks: schedule
            .task_park_points()
            .map(|p| scoped(Some(task), p))
            .collect(),
        next: 0,
        gone: scoped(Some(task), TR_MAIN_EXITED),
    };
    let mut updater = Track {
        parks: schedule.update_park_points().map(str::to_string).collect(),
        next: 0,
        gone: AR_UPDATE_APPLIED.to_string(),
    };
    let mut stop = Some(stop);
    let mut step = 0u32;
    loop {
        let runner_parked = runner.settle(faults)?;
        // The stop goes out once the runner sits at the chosen boundary, or
        // at once if the runner finished before reaching it.
        if stop.is_some() && (!runner_parked || runner.next >= schedule.stop_at) {
            (stop.take().expect("checked"))();
        }
        let updater_parked = stop.is_none() && updater.settle(faults)?;
        let pick = match (runner_parked, updater_parked) {
            (false, false) => return Ok(()),
            (true, false) => Actor::TaskRunner,
            (false, true) => Actor::Updater,
            (true, true) => schedule.priority_at(step),
        };
        match pick {
            Actor::TaskRunner => runner.release(faults),
            Actor::Updater => updater.release(faults),
        }
        step += 1;
    }
}
