//! The task lifecycle engine: an alloc runner per allocation, a task runner
//! per task, hooks around each start, and state that survives a restart.

pub mod agent;
pub mod alloc;
mod alloc_dir;
mod alloc_runner;
pub mod clock;
pub mod control;
mod data_dir;
pub mod driver;
mod engine;
pub mod fake_driver;
mod hooks;
mod job;
pub mod jobspec;
mod lifecycle;
mod restart;
mod start_gate;
pub mod state;
mod task_runner;
pub mod task_state;

pub use alloc::{
    AllocStatus, AllocUpdate, ClientStatus, DesiredStatus, RestartRefused, RestartScope,
};
pub use alloc_dir::AllocDir;
pub use alloc_runner::{AllocControl, AllocHandle, AllocSummary, AllocWaiter};
pub use data_dir::DataDir;
pub use engine::{
    check_own_data_dir, engine_runtime, recorded_cgroup_parent, Engine, EngineConfig, EngineError,
    Restored, SkippedAlloc, ALLOC_ID_LEN, DEFAULT_KEEP_FINISHED,
};
pub use hooks::hook_points;
pub use restart::{Jitter, RestartWindow};

/// Locks `mutex`, taking its data even if a holder panicked: a panicked
/// holder is reported where it panicked, not again by every later taker.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
