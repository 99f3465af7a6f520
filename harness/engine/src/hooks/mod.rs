//! Task runner hooks, one per file, behind small traits modelled on Nomad's
//! hook interfaces. The task runner calls them in order and puts a fault
//! point before and after each one.

mod executor_shutdown;
mod forget_handle;
mod log_files;
mod persist_handle;
mod phase;
mod shutdown_delay;
mod task_dir;
mod task_env;
mod validate;

pub use executor_shutdown::ExecutorShutdownHook;
pub use forget_handle::ForgetHandleHook;
pub use log_files::LogFilesHook;
pub use persist_handle::PersistHandleHook;
pub use phase::{hook_points, Hook, HookPhase, PhaseHook};
pub use shutdown_delay::ShutdownDelayHook;
pub use task_dir::TaskDirHook;
pub use task_env::TaskEnvHook;
pub use validate::ValidateHook;

#[cfg(test)]
mod tests;

use crate::alloc_dir::AllocDir;
use crate::driver::RunningTask;
use crate::job::Task;
use crate::state::TaskRecord;
use crate::task_state::{EventKind, TaskEvent};
use std::collections::BTreeMap;
use taskgate_executor::ExitResult;

/// What every hook may look at. Hooks change the task's record; the task
/// runner persists it after each hook phase.
pub struct HookContext<'a> {
    pub alloc_id: &'a str,
    pub task: &'a Task,
    pub alloc_dir: &'a AllocDir,
    pub attempt: u32,
    pub record: &'a mut TaskRecord,
}

impl HookContext<'_> {
    pub fn emit(&mut self, kind: EventKind, message: impl Into<String>) {
        let event = TaskEvent::new(&self.task.name, kind, self.attempt, message);
        self.record.add_event(event);
    }
}

/// What prestart hooks build up for the start of one attempt.
#[derive(Debug, Default, Clone)]
pub struct TaskSetup {
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("{hook}: {message}")]
    Failed { hook: &'static str, message: String },
    /// Work in the alloc dir that found what a task may have planted there.
    #[error("{hook}: {source}")]
    Confined {
        hook: &'static str,
        source: taskgate_executor::confined::ConfinedError,
    },
    /// A fault point's error: only a build with fault points makes one.
    #[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
    #[error("{0}")]
    Injected(String),
    #[error("{hook} panicked: {message}")]
    Panicked { hook: &'static str, message: String },
}

/// Runs one hook, turning a panic into an error: a broken hook fails its
/// task, it does not take the task runner (and the kill path) down with it.
pub fn guarded(
    hook: &'static str,
    f: impl FnOnce() -> Result<(), HookError>,
) -> Result<(), HookError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".to_string());
        Err(HookError::Panicked { hook, message })
    })
}

impl HookError {
    /// Bad configuration fails every attempt the same way, and so does a
    /// refusal of what a task planted: retrying is pointless.
    pub fn is_recoverable(&self) -> bool {
        use taskgate_executor::confined::ConfinedError;
        !matches!(
            self,
            HookError::Failed { .. }
                | HookError::Confined {
                    source: ConfinedError::Refused(_),
                    ..
                }
        )
    }
}

pub trait PrestartHook: Hook {
    fn prestart(&self, ctx: &mut HookContext<'_>, setup: &mut TaskSetup) -> Result<(), HookError>;
}

pub trait PoststartHook: Hook {
    fn poststart(&self, ctx: &mut HookContext<'_>, task: &RunningTask) -> Result<(), HookError>;
}

/// Runs once a running task is told to die, before its kill signal is
/// sent (Nomad's `TaskPreKillHook`): the place to withdraw the task from
/// whoever talks to it. Returns how long the signal must then be held back
/// (the longest ask of all prekill hooks wins; a task that exits meanwhile
/// ends the wait). Not run for an attempt that is not running.
pub trait PrekillHook: Hook {
    fn prekill(&self, ctx: &mut HookContext<'_>) -> Result<std::time::Duration, HookError>;
}

/// Runs when an in-place update reaches the task runner (Nomad's
/// `TaskUpdateHook`), before the runner takes the new definition: the
/// update holds from the task's next attempt, never half-way through one.
/// Run between attempts (before a restart decision, before a prestart),
/// so it never races the attempt's own hooks. An error leaves the runner
/// on its old definition and the update is offered again at the next
/// such point: an update is neither lost nor half-taken.
pub trait UpdateHook: Hook {
    fn update(&self, ctx: &mut HookContext<'_>, new: &Task) -> Result<(), HookError>;
}

pub trait ExitedHook: Hook {
    fn exited(
        &self,
        ctx: &mut HookContext<'_>,
        task: &RunningTask,
        result: Option<&ExitResult>,
    ) -> Result<(), HookError>;
}

pub trait StopHook: Hook {
    fn stop(&self, ctx: &mut HookContext<'_>) -> Result<(), HookError>;
}

/// The hooks a task runner runs, in order.
pub struct HookSet {
    pub prestart: Vec<Box<dyn PrestartHook>>,
    pub poststart: Vec<Box<dyn PoststartHook>>,
    pub prekill: Vec<Box<dyn PrekillHook>>,
    pub update: Vec<Box<dyn UpdateHook>>,
    pub exited: Vec<Box<dyn ExitedHook>>,
    pub stop: Vec<Box<dyn StopHook>>,
}

impl HookSet {
    /// Nomad's order: validate, task dir, logs, env before start.
    pub fn standard(default_user: &str) -> Self {
        HookSet {
            prestart: vec![
                Box::new(ValidateHook::new(default_user)),
                Box::new(TaskDirHook::new(default_user)),
                Box::new(LogFilesHook),
                Box::new(TaskEnvHook),
            ],
            poststart: vec![Box::new(PersistHandleHook)],
            prekill: vec![Box::new(ShutdownDelayHook)],
            update: vec![Box::new(TaskEnvHook)],
            exited: vec![Box::new(ExecutorShutdownHook)],
            stop: vec![Box::new(ForgetHandleHook)],
        }
    }
}

/// The host user `task` runs as (its own, or the engine's default).
fn task_user(
    hook: &'static str,
    task: &Task,
    default_user: &str,
) -> Result<nix::unistd::User, HookError> {
    let name = task.user.as_deref().unwrap_or(default_user);
    nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .ok_or_else(|| HookError::Failed {
            hook,
            message: format!("user {name:?} does not exist on this host"),
        })
}

fn confined(
    hook: &'static str,
) -> impl FnOnce(taskgate_executor::confined::ConfinedError) -> HookError {
    move |source| HookError::Confined { hook, source }
}
