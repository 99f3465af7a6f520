//! `taskgate`: the command-line edge. Every subcommand lives in its own module
//! under `commands/`; this file only parses arguments and dispatches.

mod commands;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "taskgate", version, about = "Task lifecycle engine and the fault-injection harness that proves it")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run as the per-task executor process (started by the engine, not by hand).
    Executor(commands::executor::Args),
    /// Run one allocation live (the built-in default job without a file).
    Run(commands::run::Args),
    /// Show the allocations and tasks in the state database.
    Status(commands::status::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Command::Executor(args) = cli.command {
        // The executor sets up its own logging, into the task's executor.out.
        return commands::executor::run(args);
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("TASKGATE_LOG"))
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Executor(_) => unreachable!("handled above"),
        Command::Run(args) => commands::run::run(args),
        Command::Status(args) => commands::status::run(args),
    }
}
