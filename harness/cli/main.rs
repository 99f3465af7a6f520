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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Executor(args) => commands::executor::run(args),
    }
}
