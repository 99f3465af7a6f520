//! The task lifecycle engine: an alloc runner per allocation, a task runner
//! per task, hooks around each start, and state that survives a restart.

pub mod alloc;
pub mod alloc_dir;
pub mod alloc_runner;
pub mod clock;
pub mod driver;
pub mod engine;
pub mod fake_driver;
pub mod hooks;
pub mod job;
pub mod jobspec;
pub mod lifecycle;
pub mod restart;
pub mod start_gate;
pub mod state;
pub mod task_runner;
pub mod task_state;

pub use alloc::{AllocStatus, AllocUpdate, ClientStatus, DesiredStatus};
pub use alloc_runner::{AllocHandle, AllocSummary};
pub use engine::{Engine, EngineConfig, EngineError};
