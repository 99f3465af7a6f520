//! What a scenario is, as data: a job, the cases to run against it (stop
//! races driven by schedules, or fault sets), where the engine runs (in
//! this process, or as an agent process the faults may kill), and what
//! must hold at the end. Scenario files parse into these types.

use std::path::PathBuf;
use taskgate_engine::jobspec::{Job, Task};
use taskgate_engine::ClientStatus;
use taskgate_faults::{Fault, PointName};
use taskgate_oracle::{Invariant, Violation};

#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub about: String,
    pub job: Job,
    pub kind: Kind,
    pub expect: Expect,
    /// The file it was read from; `None` in the built-in catalogue. A
    /// replay of its runs reads that file again (`replay --scenario`).
    pub file: Option<PathBuf>,
}

impl Scenario {
    pub fn tasks(&self) -> &[Task] {
        &self.job.groups[0].tasks
    }
}

/// What kind of run a scenario is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A stop update raced against one task runner, driven by schedules:
    /// the task runner parked at each of its boundaries x the update
    /// handler parked at each of its own (see `taskgate_faults::schedule`).
    StopRace { controlled: String },
    /// One run per case, each case a set of faults configured together.
    Faults(FaultPlan),
}

#[derive(Debug, Clone, PartialEq)]
pub struct FaultPlan {
    pub cases: Vec<FaultCase>,
    pub host: Host,
    pub then: Then,
}

/// The faults of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultCase {
    pub faults: Vec<Fault>,
    /// For a depth-2 case: the actor parked at `.0` while the event
    /// happens at `.1`. The coverage table is built from these.
    pub pair: Option<(PointName, PointName)>,
    /// For an agent run: the restored agent is SIGKILLed too, the first
    /// time it reaches this point, and a third agent restores what it
    /// left (a write that is only safe if no agent dies after it).
    pub restored_kill: Option<PointName>,
}

/// Where the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// In the harness's own process: parks can be released, and the
    /// harness delivers the stop.
    InProcess,
    /// As a `taskgate agent` process that a fault SIGKILLs; a second agent
    /// then restores the state and goes on as `restore` says.
    Agent { restore: Restore },
}

/// What the agent started after the killed one does with the alloc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restore {
    /// Deliver a stop update at once (an operator stopping the job).
    Stop,
    /// Let it run on, as `then` says (a plain agent restart).
    Run,
}

/// When a run delivers its stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Once the faulted task's runner settled (started, or gave up).
    StopWhenSettled,
    /// Once every task that can start has started.
    StopWhenRunning,
    /// Never: the job ends by itself (batch tasks).
    RunToEnd,
}

/// What must hold at the end, beyond every invariant.
#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    pub status: ClientStatus,
    /// A bug still open: every run must show this violation (a strict
    /// expected failure), so the marker cannot outlive the bug.
    pub known_violation: Option<KnownViolation>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownViolation {
    /// Names the bug, e.g. "B1: stale executor handle on attempt 2 or later".
    pub bug: String,
    /// The invariant every run must violate while the bug is open.
    pub invariant: Invariant,
    /// The task whose violations they are, for a bug of one task's: another
    /// task's breach of the same invariant still fails the run.
    pub task: Option<String>,
}

impl KnownViolation {
    /// Whether `violation` is this bug's to excuse.
    pub fn excuses(&self, violation: &Violation) -> bool {
        violation.invariant == self.invariant
            && (self.task.as_deref()).is_none_or(|task| violation.task.as_deref() == Some(task))
    }
}
