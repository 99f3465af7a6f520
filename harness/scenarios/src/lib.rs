//! The privileged harness: a catalogue of scenarios, each run against the
//! real engine and executor with faults forcing the order of events, judged
//! by the exec oracle and by invariants over the whole recorded history.
//!
//! - [`lab`]: the marked filesystem, the exec gate and its judge.
//! - [`catalogue`]: the built-in scenarios and scenario files a user names;
//!   [`file`]: the scenario file format; [`jobs`]: jobs built in code, for tests.
//! - [`control`]: drives a [`taskgate_faults::schedule::Schedule`].
//! - [`run`]: one scenario run, in process or with a killed agent, judged
//!   against its tasks' [`shapes`].
//! - [`leftovers`]: cgroups, mounts, processes and files a run left behind.
//! - [`report`]: run results, replay tokens, the JUnit report; [`html`]:
//!   the HTML report, a swimlane timeline per drawn run.
//! - [`shard`]: the gate split across machines, and merged back.
//! - [`watchdog`]: the hang safety net for child processes.

mod agent_run;
pub mod catalogue;
pub mod control;
pub mod coverage;
pub mod fake_run;
pub mod file;
pub mod history;
pub mod html;
pub mod interventions;
pub mod jobs;
pub mod lab;
pub mod leftovers;
pub mod model;
pub mod report;
pub mod run;
pub mod server;
pub mod shapes;
pub mod shard;
pub mod watchdog;

pub use catalogue::catalogue;
pub use lab::Lab;
pub use model::Scenario;
pub use report::{RunReport, RunVerdict, Token};
