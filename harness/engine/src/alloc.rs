//! The allocation as the client sees it: desired status from the server,
//! client status derived from its tasks' states.

use crate::job::Job;
use serde::{Deserialize, Serialize};

/// What the server wants for the allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DesiredStatus {
    Run,
    Stop,
}

/// The client's view of the allocation, derived from its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientStatus {
    Pending,
    Running,
    Complete,
    Failed,
}

impl ClientStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, ClientStatus::Complete | ClientStatus::Failed)
    }

    /// Nomad's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientStatus::Pending => "pending",
            ClientStatus::Running => "running",
            ClientStatus::Complete => "complete",
            ClientStatus::Failed => "failed",
        }
    }
}

impl DesiredStatus {
    /// Nomad's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            DesiredStatus::Run => "run",
            DesiredStatus::Stop => "stop",
        }
    }
}

/// An update from the server: the desired status, and perhaps a new
/// version of the job to apply in place (see [`Job::check_in_place`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocUpdate {
    pub desired_status: DesiredStatus,
    pub job: Option<Job>,
}

impl AllocUpdate {
    pub fn stop() -> Self {
        AllocUpdate {
            desired_status: DesiredStatus::Stop,
            job: None,
        }
    }

    /// Keep running, with `job` from here on.
    pub fn in_place(job: Job) -> Self {
        AllocUpdate {
            desired_status: DesiredStatus::Run,
            job: Some(job),
        }
    }
}

/// The pair of statuses Nomad's `Allocation.TerminalStatus` looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocStatus {
    pub desired: DesiredStatus,
    pub client: ClientStatus,
}

impl AllocStatus {
    /// Nomad's ServerTerminalStatus: the server asked for the alloc to stop.
    pub fn server_terminal(&self) -> bool {
        self.desired == DesiredStatus::Stop
    }

    /// Nomad's ClientTerminalStatus.
    pub fn client_terminal(&self) -> bool {
        self.client.is_terminal()
    }

    pub fn terminal(&self) -> bool {
        self.server_terminal() || self.client_terminal()
    }
}

/// What a user restart (Nomad's `alloc restart`) takes down and brings
/// back. Never a poststop task: those run once the alloc is ending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestartScope {
    /// One running task.
    Task(String),
    /// Every running task. A completed prestart task is not run again.
    Running,
    /// Every task, the completed ones too: non-sidecar prestart tasks run
    /// again, and the main tasks wait for them as on the first start.
    All,
}

impl std::fmt::Display for RestartScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RestartScope::Task(task) => write!(f, "task {task:?}"),
            RestartScope::Running => f.write_str("the running tasks"),
            RestartScope::All => f.write_str("all tasks"),
        }
    }
}

/// Why a restart was not done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum RestartRefused {
    #[error("the allocation is stopping or stopped")]
    AllocTerminal,
    #[error("the allocation is ending: its poststop tasks have begun")]
    AllocEnding,
    #[error("the allocation has no task {0:?}")]
    NoSuchTask(String),
    #[error("task {0:?} is a poststop task, which runs only as the allocation ends")]
    PoststopTask(String),
    #[error("task {0:?} is not running (restart all tasks to run it again)")]
    TaskNotRunning(String),
    #[error("no task is running")]
    NothingRunning,
    #[error("the allocation finished before the restart was handled")]
    AllocFinished,
    #[error("a stop sent during the restart ended the allocation: no task was started again")]
    StoppedMeanwhile,
}
