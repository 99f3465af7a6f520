//! `taskgate run [JOB]`: run one allocation live, printing task events as
//! they happen; Ctrl-C delivers a stop update, a second Ctrl-C is not needed
//! because the stop path always finishes. While it runs, it serves the
//! control socket `taskgate restart` sends restarts to.

use super::agent_config::{AgentArgs, DEFAULT_DATA_DIR};
use anyhow::Context;
use std::path::{Path, PathBuf};
use taskgate_engine::control::{self, ControlServer};
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
        let allocs = control::Registry::default();
        // Bound before the alloc is placed, so a failure places nothing; the
        // socket goes when this block ends, however it ends.
        let _control_socket = ControlServer::bind(&args.agent.data_dir, allocs.clone())?;
        let alloc = engine.submit(&job, args.group.as_deref())?;
        println!("==> alloc {} of job {:?} placed", alloc.alloc_id, job.name);
        println!(
            "==> restart with: {}",
            restart_command(&args.agent.data_dir, &alloc.alloc_id)
        );
        allocs.insert(alloc.alloc_id.clone(), alloc.control());
        let updater = alloc.control();
        let (mut events, waiter) = alloc.into_parts();
        let printer = tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                print_event(&event);
            }
        });
        let stopper = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                println!("==> interrupt: sending stop update");
                updater.stop();
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

/// How to restart `alloc_id`'s tasks; `--data-dir` only when not the default.
fn restart_command(data_dir: &Path, alloc_id: &str) -> String {
    let data_dir = if data_dir == Path::new(DEFAULT_DATA_DIR) {
        String::new()
    } else {
        format!(" --data-dir {}", data_dir.display())
    };
    format!("taskgate restart{data_dir} {alloc_id} [TASK] [--all-tasks]")
}

pub fn print_event(event: &TaskEvent) {
    println!(
        "    {:<10} {:<15} {}",
        event.task,
        event.kind.label(),
        event.message
    );
}
