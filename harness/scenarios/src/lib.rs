//! The privileged harness: a catalogue of scenarios, each run against the
//! real engine and executor with faults forcing the order of events, judged
//! by the exec oracle and by invariants over the whole recorded history.
//!
//! - [`lab`]: the marked filesystem, the exec gate and its judge.
//! - [`catalogue`]: the built-in scenarios and scenario files a user names;
//!   [`file`]: the scenario file format; [`jobs`]: jobs built in code, for tests.
//! - [`plan`]: each scenario's cases, typed by its kind, and their replay
//!   tokens.
//! - [`gate`]: the gate's home: the [`gate::Runner`] trait, the run loop,
//!   a gate or shard's JUnit and coverage, shards merged, replay verdicts.
//! - The runners: [`lab_run`] (real engine and executor, in process or as
//!   agent processes a fault kills), [`fake_run`] (the engine's fake
//!   driver). Below them, shared and importing neither: `drive` (an
//!   in-process case on an engine), `outcome` (what a run produced),
//!   `judge` (its history against the invariants and the tasks'
//!   [`shapes`]), [`until_running`] and [`control`] (which drives a
//!   [`taskgate_faults::schedule::Schedule`]).
//! - [`agent_side`]: the harness inside a `taskgate agent` process.
//! - [`leftovers`]: cgroups, mounts, processes and files a run left behind.
//! - [`report`]: run results and the JUnit report; [`html`]: the HTML
//!   report, a swimlane timeline per drawn run.
//! - [`shard`]: the gate split across machines, and merged back.
//! - [`watchdog`]: the hang safety net for child processes.

mod agent_run;
pub mod agent_side;
pub mod catalogue;
pub mod control;
pub mod coverage;
mod drive;
pub mod fake_run;
pub mod file;
pub mod gate;
pub mod history;
pub mod html;
pub mod interventions;
pub mod jobs;
mod judge;
pub mod lab;
pub mod lab_run;
pub mod leftovers;
pub mod model;
mod outcome;
pub mod plan;
pub mod report;
pub mod server;
pub mod shapes;
pub mod shard;
pub mod until_running;
pub mod watchdog;

pub use catalogue::catalogue;
pub use drive::until_idle;
pub use lab::Lab;
pub use model::Scenario;
pub use plan::{Run, Token};
pub use report::{RunReport, RunVerdict};
