//! `taskgate run [JOB]`: run one allocation live, printing task events as
//! they happen; Ctrl-C delivers a stop update, a second Ctrl-C is not needed
//! because the stop path always finishes.

use super::agent_config::AgentArgs;
use anyhow::Context;
use std::path::PathBuf;
use taskgate_engine::jobspec;
use taskgate_engine::task_state::TaskEvent;

#[derive(clap::Args)]
pub struct Args {
    /// Nomad-style HCL job file; without it the built-in default job runs
    /// (the leader + sidecar alloc of docs/nomad-prestart-race-report.txt).
    pub job: Option<PathBuf>,
    /// Task group to place (default: the first).
    #[arg(long)]
    pub group: Option<String>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let job = match &args.job {
        Some(path) => jobspec::parse_file(path)?,
        None => jobspec::builtin_default(),
    };
    let unknown = jobspec::unknown_users(&job, &args.agent.user);
    anyhow::ensure!(unknown.is_empty(), "{}", unknown.join("\n"));
    let engine = args.agent.open_engine()?;
    let runtime = super::runtime()?;
    let summary = runtime.block_on(async {
        let alloc = engine.submit(&job, args.group.as_deref())?;
        println!("==> alloc {} of job {:?} placed", alloc.alloc_id, job.name);
        let updater = alloc.updater();
        let (mut events, waiter) = alloc.into_parts();
        let printer = tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                print_event(&event);
            }
        });
        let stopper = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                println!("==> interrupt: sending stop update");
                let _ = updater.send(taskgate_engine::AllocUpdate::stop());
            }
        });
        let summary = waiter.wait().await;
        stopper.abort();
        let _ = printer.await;
        anyhow::Ok(summary)
    })?;
    println!(
        "==> alloc {} finished: {:?}",
        summary.alloc_id, summary.status.client
    );
    let record = engine
        .state()
        .alloc(&summary.alloc_id)?
        .context("alloc vanished from the state database")?;
    for task in record.tasks() {
        for stream in ["stdout", "stderr"] {
            let path = record
                .alloc_dir
                .join("alloc/logs")
                .join(format!("{}.{stream}.0", task.name));
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if !text.is_empty() {
                println!(
                    "--- {} ({}) ---\n{}",
                    task.name,
                    path.display(),
                    text.trim_end()
                );
            }
        }
    }
    if summary.status.client == taskgate_engine::ClientStatus::Failed {
        anyhow::bail!("allocation failed");
    }
    Ok(())
}

pub fn print_event(event: &TaskEvent) {
    println!(
        "    {:<10} {:<15} {}",
        event.task,
        event.kind.label(),
        event.message
    );
}
