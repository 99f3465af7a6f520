//! A task's lifecycle as a typed state machine, and the events it emits.

use serde::{Deserialize, Serialize};
use taskgate_executor::ExitResult;

/// Where a task is in its life. Transitions only go through [`TaskState::advance`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    /// Waiting for its start condition or running prestart hooks.
    Pending,
    /// Its process was started for this attempt (counted from 1).
    Running { attempt: u32 },
    /// Will not run again, unless a user restarts all tasks (see
    /// [`TaskState::revive`]).
    Dead { outcome: Outcome },
}

/// Why a dead task is dead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Exited on its own and was not restarted.
    Exited { result: ExitResult, failed: bool },
    /// Stopped by the kill path.
    Killed { result: Option<ExitResult> },
    /// Never started: the alloc went terminal first (or the task was killed
    /// before its start was committed).
    NeverStarted { reason: String },
    /// Could not be set up or started and will not be retried.
    Failed { reason: String },
}

impl Outcome {
    pub fn failed(&self) -> bool {
        match self {
            Outcome::Exited { failed, .. } => *failed,
            Outcome::Failed { .. } => true,
            Outcome::Killed { .. } | Outcome::NeverStarted { .. } => false,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid task state transition {from:?} -> {to:?}")]
pub struct InvalidTransition {
    pub from: TaskState,
    pub to: TaskState,
}

impl TaskState {
    pub fn is_dead(&self) -> bool {
        matches!(self, TaskState::Dead { .. })
    }

    /// Moves to `next` if the lifecycle allows it: dead is final, and a task
    /// may only go back to pending from running (a restart).
    pub fn advance(&mut self, next: TaskState) -> Result<(), InvalidTransition> {
        let allowed = match (&*self, &next) {
            (TaskState::Dead { .. }, _) => false,
            (TaskState::Pending, TaskState::Running { .. }) => true,
            (TaskState::Running { attempt: a }, TaskState::Running { attempt: b }) => b > a,
            (TaskState::Running { .. }, TaskState::Pending) => true,
            (_, TaskState::Dead { .. }) => true,
            _ => false,
        };
        if !allowed {
            return Err(InvalidTransition {
                from: self.clone(),
                to: next,
            });
        }
        *self = next;
        Ok(())
    }

    /// The one way back from dead: a user restart of all tasks. Pending
    /// again, as before its first start.
    pub fn revive(&mut self) -> Result<(), InvalidTransition> {
        if !self.is_dead() {
            return Err(InvalidTransition {
                from: self.clone(),
                to: TaskState::Pending,
            });
        }
        *self = TaskState::Pending;
        Ok(())
    }
}

/// Nomad's task event types, as the user sees them in `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Received,
    TaskSetup,
    Started,
    /// Nomad's "Waiting for shutdown delay": the kill signal is held back.
    WaitingShutdownDelay,
    Killing,
    Killed,
    Terminated,
    Restarting,
    NotRestarting,
    DriverFailure,
    SetupFailure,
    HookFailed,
    Restored,
    NotStarted,
    Lost,
    /// An in-place update was taken: it holds from the next attempt.
    Updated,
    /// Nomad's "Restart Signaled": a user asked for the task to restart.
    RestartSignaled,
}

impl EventKind {
    pub fn label(self) -> &'static str {
        match self {
            EventKind::Received => "Received",
            EventKind::TaskSetup => "Task Setup",
            EventKind::Started => "Started",
            EventKind::WaitingShutdownDelay => "Waiting for shutdown delay",
            EventKind::Killing => "Killing",
            EventKind::Killed => "Killed",
            EventKind::Terminated => "Terminated",
            EventKind::Restarting => "Restarting",
            EventKind::NotRestarting => "Not Restarting",
            EventKind::DriverFailure => "Driver Failure",
            EventKind::SetupFailure => "Setup Failure",
            EventKind::HookFailed => "Hook Failed",
            EventKind::Restored => "Restored",
            EventKind::NotStarted => "Not Started",
            EventKind::Lost => "Lost",
            EventKind::Updated => "Updated",
            EventKind::RestartSignaled => "Restart Signaled",
        }
    }

    /// The events that report an attempt's end: exactly one per started
    /// attempt.
    pub fn ends_attempt(self) -> bool {
        matches!(self, EventKind::Killed | EventKind::Terminated)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskEvent {
    pub task: String,
    pub kind: EventKind,
    pub message: String,
    /// Which start attempt the event belongs to (0 before the first start).
    pub attempt: u32,
    pub time_ms: u64,
    /// Nomad's `FailsTask`: this event ended the task in failure.
    #[serde(default)]
    pub fails_task: bool,
    /// The event's number among its task's, from 0, across runners and
    /// agents (its record counts them): a record keeps only its last few,
    /// and whoever joins it with the event stream joins by this.
    #[serde(default)]
    pub seq: u64,
}

impl TaskEvent {
    pub fn new(task: &str, kind: EventKind, attempt: u32, message: impl Into<String>) -> Self {
        TaskEvent {
            task: task.to_string(),
            kind,
            message: message.into(),
            attempt,
            time_ms: now_ms(),
            fails_task: false,
            seq: 0,
        }
    }
}

pub use taskgate_executor::now_ms;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_is_final() {
        let mut s = TaskState::Dead {
            outcome: Outcome::NeverStarted { reason: "x".into() },
        };
        assert!(s.advance(TaskState::Running { attempt: 1 }).is_err());
        assert!(s.advance(TaskState::Pending).is_err());
    }

    #[test]
    fn restart_goes_back_through_pending() {
        let mut s = TaskState::Pending;
        s.advance(TaskState::Running { attempt: 1 }).unwrap();
        assert!(s.advance(TaskState::Running { attempt: 1 }).is_err());
        s.advance(TaskState::Pending).unwrap();
        s.advance(TaskState::Running { attempt: 2 }).unwrap();
    }

    #[test]
    fn only_the_dead_are_revived() {
        let mut s = TaskState::Running { attempt: 1 };
        assert!(s.revive().is_err());
        s.advance(TaskState::Dead {
            outcome: Outcome::Killed { result: None },
        })
        .unwrap();
        s.revive().unwrap();
        assert_eq!(s, TaskState::Pending);
    }

    #[test]
    fn pending_cannot_go_back_to_pending() {
        let mut s = TaskState::Pending;
        assert!(s.advance(TaskState::Pending).is_err());
    }
}
