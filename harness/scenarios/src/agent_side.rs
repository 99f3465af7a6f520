//! The harness inside a `taskgate agent` process, for the agent-kill
//! scenarios (`agent_run`): the first agent submits the job and gets the
//! case's faults from the environment (one SIGKILLs it at a boundary); a
//! second one restores what it left. Each delivers the scenario's stops
//! and restarts from inside the process, at the points its faults name,
//! and ends once its allocations have finished. The CLI's hidden agent
//! flags say which of these it does.

use crate::interventions;
use crate::outcome::AGENT_EVENTS;
use crate::server::{Server, Servers};
use crate::until_running::UntilRunning;
use std::collections::BTreeSet;
use std::io::Write;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use taskgate_engine::agent::{Agent, Followed, Following};
use taskgate_engine::control::ControlError;
use taskgate_engine::jobspec::Job;
use taskgate_engine::task_state::TaskEvent;
use taskgate_engine::{AllocStatus, DataDir};
use taskgate_faults::{Faults, Intervention};

/// What the harness asks of one agent process.
#[derive(Debug, Clone, Default)]
pub struct Orders {
    /// Submit this job (JSON, as `agent_run` writes it), and end once it
    /// has finished; otherwise, see the allocations restored at start to
    /// their end.
    pub job_json: Option<PathBuf>,
    /// Deliver a stop update once every task that can start has started.
    pub stop_when_running: bool,
    /// Deliver a stop update to every allocation at once (a restored
    /// agent's, for an operator's stop while no agent ran).
    pub stop: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentSideError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(transparent)]
    State(#[from] taskgate_engine::state::StateError),
    #[error("alloc {0} vanished from the state database")]
    Vanished(String),
    #[error("the harness missed {0} events")]
    Missed(u64),
    #[error("logging the followed events in {path}: {source}")]
    EventLog {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the engine shut down under the allocation")]
    Gone,
}

/// The harness's side of one agent process.
pub struct AgentSide {
    orders: Orders,
    servers: Arc<Servers>,
    faults: Faults,
    /// Every task event followed, appended as it comes: the judge reads
    /// past the ten a task's record keeps (`outcome::with_every_event`).
    event_log: EventLog,
}

/// The run's `events.jsonl`, open for appending.
struct EventLog {
    path: PathBuf,
    file: std::fs::File,
}

impl EventLog {
    /// Opens it; a line a killed agent tore is ended first, so that the
    /// next event is a line of its own.
    fn open(path: PathBuf) -> Result<EventLog, AgentSideError> {
        let failed = |source| AgentSideError::EventLog {
            path: path.clone(),
            source,
        };
        let file = (std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true))
        .open(&path)
        .map_err(failed)?;
        let len = file.metadata().map_err(failed)?.len();
        let mut last = [b'\n'];
        if len > 0 {
            file.read_exact_at(&mut last, len - 1).map_err(failed)?;
        }
        let log = EventLog { path, file };
        if last != [b'\n'] {
            log.append(b"\n")?;
        }
        Ok(log)
    }

    /// One write, so that no other line lands inside it.
    fn append(&self, bytes: &[u8]) -> Result<(), AgentSideError> {
        (&self.file)
            .write_all(bytes)
            .map_err(|source| AgentSideError::EventLog {
                path: self.path.clone(),
                source,
            })
    }
}

impl AgentSide {
    /// Installs the harness's interventions (kill an executor, stop the
    /// alloc), which act from inside this process at the points its
    /// faults name, on the tasks under `data_dir`.
    pub fn install(
        faults: &Faults,
        orders: Orders,
        data_dir: &DataDir,
    ) -> Result<AgentSide, AgentSideError> {
        let event_log = EventLog::open(data_dir.path().join(AGENT_EVENTS))?;
        let servers = Arc::new(Servers::default());
        let delivering = servers.clone();
        interventions::install(faults, data_dir.path().to_path_buf(), move |what| {
            delivering.deliver(what)
        });
        Ok(AgentSide {
            orders,
            servers,
            faults: faults.clone(),
            event_log,
        })
    }

    /// Logs one followed event, a line of its own.
    fn log(&self, event: &TaskEvent) -> Result<(), AgentSideError> {
        let mut line = serde_json::to_vec(event).expect("task events serialize");
        line.push(b'\n');
        self.event_log.append(&line)
    }

    /// Runs the harness's allocations to their end, the submitted one or
    /// those `restored`, telling `finished` each one's end.
    pub async fn run(
        self,
        agent: &Arc<Agent>,
        restored: Vec<Following>,
        finished: impl Fn(&str, &AllocStatus),
    ) -> Result<(), AgentSideError> {
        let followings = match &self.orders.job_json {
            Some(path) => {
                let text = std::fs::read(path).map_err(|source| AgentSideError::Read {
                    path: path.clone(),
                    source,
                })?;
                let job: Job =
                    serde_json::from_slice(&text).map_err(|source| AgentSideError::Parse {
                        path: path.clone(),
                        source,
                    })?;
                vec![agent.submit(&job, None)?]
            }
            None => restored,
        };
        for following in followings {
            let alloc_id = following.alloc_id.clone();
            let status = self.see_through(agent, following).await?;
            finished(&alloc_id, &status);
        }
        // An action that ran on while the alloc ended records its pass
        // late: this agent exits only once it has (the harness's check of
        // configured faults says if one never did).
        let faults = self.faults.clone();
        let _ = tokio::task::spawn_blocking(move || faults.settle()).await;
        Ok(())
    }

    /// Delivers the orders' stop to one allocation and follows it to its
    /// end.
    async fn see_through(
        &self,
        agent: &Agent,
        mut following: Following,
    ) -> Result<AllocStatus, AgentSideError> {
        let alloc_id = following.alloc_id.clone();
        let state = agent.engine().state();
        let record = state
            .alloc(&alloc_id)?
            .ok_or_else(|| AgentSideError::Vanished(alloc_id.clone()))?;
        let server = match agent.control(&alloc_id) {
            Ok((_, control)) => {
                let server = Arc::new(Server::new(
                    control,
                    record.job.clone(),
                    self.faults.clone(),
                ));
                self.servers.add(server.clone());
                server
            }
            // Every task was dead at the restore, and the alloc ended
            // before the harness asked: nothing is left to deliver to it,
            // but what it did in this agent is followed to its end.
            Err(ControlError::Finished { .. }) => return self.follow_to_end(following).await,
            Err(err) => return Err(err.into()),
        };
        if self.orders.stop {
            server.deliver(Intervention::StopAlloc);
        }
        let mut until = None;
        if self.orders.stop_when_running {
            // A restored task that is dead already will report nothing.
            let dead: BTreeSet<String> = (state.tasks(&alloc_id)?.into_iter())
                .filter(|t| t.state.is_dead())
                .map(|t| t.task)
                .collect();
            until = Some(UntilRunning::new(&record.tasks(), &dead));
        }
        loop {
            if until.as_ref().is_some_and(UntilRunning::all_running) {
                until = None;
                server.deliver(Intervention::StopAlloc);
            }
            match self.next_logged(&mut following).await? {
                ControlFlow::Continue(event) => {
                    if let Some(until) = &mut until {
                        until.saw(&event.task, event.kind);
                    }
                }
                ControlFlow::Break(status) => return Ok(status),
            }
        }
    }

    /// Logs an allocation's events up to its end.
    async fn follow_to_end(&self, mut following: Following) -> Result<AllocStatus, AgentSideError> {
        loop {
            if let ControlFlow::Break(status) = self.next_logged(&mut following).await? {
                return Ok(status);
            }
        }
    }

    /// The allocation's next event, logged, or its end.
    async fn next_logged(
        &self,
        following: &mut Following,
    ) -> Result<ControlFlow<AllocStatus, TaskEvent>, AgentSideError> {
        match following.next().await {
            Followed::Event(event) => {
                self.log(&event)?;
                Ok(ControlFlow::Continue(event))
            }
            Followed::Missed(n) => Err(AgentSideError::Missed(n)),
            Followed::Finished(status) => Ok(ControlFlow::Break(status)),
            Followed::Gone => Err(AgentSideError::Gone),
        }
    }
}
