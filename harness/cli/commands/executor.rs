//! `taskgate executor`: the per-task executor process.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Directory holding the executor's spec file, socket and root mount point.
    #[arg(long)]
    run_dir: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // stderr is redirected to the task's executor.out once the spec is read.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TASKGATE_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    taskgate_executor::server::run(&args.run_dir)?;
    Ok(())
}
