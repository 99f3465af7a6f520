//! `taskgate agent`: the engine as a process of its own, for the harness's
//! agent-kill scenarios. Faults come from the environment (see
//! `taskgate_faults::configure_from_env`), so the harness can SIGKILL it at
//! a boundary and start it again with `--restore`.

use super::agent_config::AgentArgs;
use anyhow::Context;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use taskgate_engine::jobspec::Job;
use taskgate_engine::task_state::EventKind;
use taskgate_faults::Intervention;
use taskgate_scenarios::server::Server;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Submit this job (JSON, as the harness writes it).
    #[arg(long, conflicts_with = "restore")]
    pub job_json: Option<PathBuf>,
    /// Deliver a stop update once every task that can start has started
    /// (for a submitted job, or each restored one).
    #[arg(long)]
    pub stop_when_running: bool,
    /// Restore the allocations a previous agent left in the state database.
    #[arg(long)]
    pub restore: bool,
    /// With --restore: deliver a stop update to every restored allocation.
    #[arg(long, requires = "restore")]
    pub stop: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    taskgate_faults::quiet_injected_panics();
    taskgate_faults::configure_from_env()?;
    let engine = args.agent.open_engine()?;
    let runtime = super::runtime()?;
    let _guard = runtime.enter();
    // The harness's interventions (kill an executor, stop the alloc) act
    // from inside this process, at the points its faults name.
    let servers: Arc<Mutex<Vec<Arc<Server>>>> = Arc::default();
    let delivering = servers.clone();
    taskgate_scenarios::interventions::install(args.agent.data_dir.clone(), move |what| {
        for server in delivering.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            server.deliver(what);
        }
    });
    let handles = match &args.job_json {
        Some(path) => {
            let text =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let job: Job = serde_json::from_slice(&text)
                .with_context(|| format!("parsing {}", path.display()))?;
            vec![engine.submit(&job, None)?]
        }
        None if args.restore => {
            let restored = engine.restore()?;
            // The others run on; each one left behind is said, with why.
            for skipped in &restored.skipped {
                eprintln!("error: {skipped}");
            }
            restored.allocs
        }
        None => anyhow::bail!("give --job-json FILE or --restore"),
    };
    runtime.block_on(async {
        for handle in handles {
            let alloc_id = handle.alloc_id.clone();
            let record = engine
                .state()
                .alloc(&alloc_id)?
                .context("alloc vanished from the state database")?;
            let server = Arc::new(Server::new(handle.control(), record.job.clone()));
            (servers.lock().unwrap_or_else(|p| p.into_inner())).push(server.clone());
            let (mut events, waiter) = handle.into_parts();
            if args.stop {
                server.deliver(Intervention::StopAlloc);
            }
            if args.stop_when_running {
                // A restored task that is dead already will report nothing.
                let dead: BTreeSet<String> = engine
                    .state()
                    .tasks(&alloc_id)?
                    .into_iter()
                    .filter(|t| t.state.is_dead())
                    .map(|t| t.task)
                    .collect();
                let mut waiting: BTreeSet<String> = record
                    .tasks()
                    .into_iter()
                    .filter(|t| !t.is_poststop() && !dead.contains(&t.name))
                    .map(|t| t.name)
                    .collect();
                while !waiting.is_empty() {
                    let Some(event) = events.recv().await else {
                        break;
                    };
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
                if waiting.is_empty() {
                    server.deliver(Intervention::StopAlloc);
                }
            }
            let summary = waiter.wait().await;
            println!(
                "alloc {} finished: {:?}",
                summary.alloc_id, summary.status.client
            );
        }
        anyhow::Ok(())
    })
}
