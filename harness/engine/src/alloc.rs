//! The allocation as the client sees it: desired status from the server,
//! client status derived from its tasks' states.

use crate::jobspec::Job;
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
