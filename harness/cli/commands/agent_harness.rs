//! The harness's agent-kill scenarios drive `taskgate agent` through hidden
//! flags (failpoints builds only): the first agent submits a job and gets
//! the case's faults from the environment (one SIGKILLs it at a boundary);
//! a second one restores what it left. Each delivers the scenario's stops
//! and restarts from inside the process, at the points its faults name, and
//! exits once its allocations have finished. Everything else is the real
//! agent's (`agent.rs`).

use super::agent_config::AgentArgs;
use anyhow::Context;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use taskgate_engine::agent::{Agent, Followed, Following};
use taskgate_engine::control::ControlError;
use taskgate_engine::jobspec::Job;
use taskgate_engine::task_state::EventKind;
use taskgate_faults::Intervention;
use taskgate_scenarios::server::Server;

#[derive(clap::Args, Clone)]
pub struct HarnessArgs {
    /// Submit this job (JSON, as the harness writes it), and exit once it
    /// has finished.
    #[arg(long, hide = true, conflicts_with = "restore")]
    pub job_json: Option<PathBuf>,
    /// Deliver a stop update once every task that can start has started
    /// (for a submitted job, or each restored one).
    #[arg(long, hide = true)]
    pub stop_when_running: bool,
    /// Exit once the allocations restored at start have finished.
    #[arg(long, hide = true)]
    pub restore: bool,
    /// With --restore: deliver a stop update to every restored allocation.
    #[arg(long, hide = true, requires = "restore")]
    pub stop: bool,
}

/// The harness's side of one agent process.
pub struct Harness {
    args: HarnessArgs,
    servers: Arc<Mutex<Vec<Arc<Server>>>>,
}

impl HarnessArgs {
    /// Faults from the environment, in any failpoints build; the harness's
    /// interventions only when the harness drives this agent.
    pub fn prepare(&self, agent: &AgentArgs) -> anyhow::Result<Option<Harness>> {
        taskgate_faults::quiet_injected_panics();
        taskgate_faults::configure_from_env()?;
        if self.job_json.is_none() && !self.restore {
            return Ok(None);
        }
        // The harness's interventions (kill an executor, stop the alloc)
        // act from inside this process, at the points its faults name.
        let servers: Arc<Mutex<Vec<Arc<Server>>>> = Arc::default();
        let delivering = servers.clone();
        taskgate_scenarios::interventions::install(
            agent.data_dir().path().to_path_buf(),
            move |what| {
                for server in lock(&delivering).iter() {
                    server.deliver(what);
                }
            },
        );
        Ok(Some(Harness {
            args: self.clone(),
            servers,
        }))
    }
}

impl Harness {
    /// Runs the harness's allocations to their end: the submitted one, or
    /// those restored.
    pub async fn run(self, agent: &Arc<Agent>, restored: Vec<Following>) -> anyhow::Result<()> {
        let followings = match &self.args.job_json {
            Some(path) => {
                let text =
                    std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
                let job: Job = serde_json::from_slice(&text)
                    .with_context(|| format!("parsing {}", path.display()))?;
                vec![agent.submit(&job, None)?]
            }
            None => restored,
        };
        for following in followings {
            self.see_through(agent, following).await?;
        }
        Ok(())
    }

    async fn see_through(&self, agent: &Agent, mut following: Following) -> anyhow::Result<()> {
        let alloc_id = following.alloc_id.clone();
        let state = agent.engine().state();
        let record = state
            .alloc(&alloc_id)?
            .context("alloc vanished from the state database")?;
        let control = match agent.control(&alloc_id) {
            Ok((_, control)) => control,
            // Every task was dead at the restore, and the alloc ended
            // before the harness asked: nothing is left to deliver to it.
            Err(ControlError::Finished { status, .. }) => {
                super::say!("alloc {alloc_id} finished: {:?}", status.client);
                return Ok(());
            }
            Err(err) => return Err(err.into()),
        };
        let server = Arc::new(Server::new(control, record.job.clone()));
        lock(&self.servers).push(server.clone());
        if self.args.stop {
            server.deliver(Intervention::StopAlloc);
        }
        let mut waiting = BTreeSet::new();
        if self.args.stop_when_running {
            // A restored task that is dead already will report nothing.
            let dead: BTreeSet<String> = (state.tasks(&alloc_id)?.into_iter())
                .filter(|t| t.state.is_dead())
                .map(|t| t.task)
                .collect();
            waiting = (record.tasks().into_iter())
                .filter(|t| !t.is_poststop() && !dead.contains(&t.name))
                .map(|t| t.name)
                .collect();
        }
        let mut stop_sent = !self.args.stop_when_running;
        let status = loop {
            if !stop_sent && waiting.is_empty() {
                stop_sent = true;
                server.deliver(Intervention::StopAlloc);
            }
            match following.next().await {
                Followed::Event(event) => {
                    if matches!(
                        event.kind,
                        EventKind::Started
                            | EventKind::Restored
                            | EventKind::NotStarted
                            | EventKind::NotRestarting
                    ) {
                        waiting.remove(&event.task);
                    }
                }
                Followed::Missed(n) => anyhow::bail!("the harness missed {n} events"),
                Followed::Finished(status) => break status,
                Followed::Gone => anyhow::bail!("the engine shut down under the allocation"),
            }
        };
        super::say!("alloc {alloc_id} finished: {:?}", status.client);
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
