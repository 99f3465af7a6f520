//! The harness's agent-kill scenarios drive `taskgate agent` through hidden
//! flags (failpoints builds only): what the harness does inside the agent
//! is `taskgate_scenarios::agent_side`'s. Everything else is the real
//! agent's (`agent.rs`).

use super::agent_config::AgentArgs;
use std::path::PathBuf;
use std::sync::Arc;
use taskgate_engine::agent::{Agent, Following};
use taskgate_faults::Faults;
use taskgate_scenarios::agent_side::{AgentSide, Orders};

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
pub struct Harness(AgentSide);

impl HarnessArgs {
    /// The agent's fault points, configured from the environment in any
    /// failpoints build (this process is one run of the harness's); the
    /// harness's interventions only when the harness drives this agent.
    pub fn prepare(&self, agent: &AgentArgs) -> anyhow::Result<(Faults, Option<Harness>)> {
        taskgate_faults::quiet_injected_panics();
        let faults = Faults::from_env()?;
        if self.job_json.is_none() && !self.restore {
            return Ok((faults, None));
        }
        let orders = Orders {
            job_json: self.job_json.clone(),
            stop_when_running: self.stop_when_running,
            stop: self.stop,
        };
        let side = AgentSide::install(&faults, orders, agent.data_dir())?;
        Ok((faults, Some(Harness(side))))
    }
}

impl Harness {
    /// Runs the harness's allocations to their end: the submitted one, or
    /// those restored.
    pub async fn run(self, agent: &Arc<Agent>, restored: Vec<Following>) -> anyhow::Result<()> {
        let finished = |alloc_id: &str, status: &taskgate_engine::AllocStatus| {
            super::say!("alloc {alloc_id} finished: {}", status.client.as_str())
        };
        Ok(self.0.run(agent, restored, finished).await?)
    }
}
