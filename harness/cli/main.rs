//! `taskgate`: the command-line edge. Every subcommand lives in its own module
//! under `commands/`; this file only parses arguments and dispatches.

mod commands;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "taskgate",
    version,
    about = "Task lifecycle engine and the fault-injection harness that proves it"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one allocation live (the built-in default job without a file).
    Run(commands::run::Args),
    /// Show the allocations and tasks in the state database.
    Status(commands::status::Args),
    /// Restart an allocation's tasks in the agent `taskgate run` started.
    Restart(commands::restart::Args),
    /// Measure start-to-exit latency against runc, executor memory and engine throughput.
    Bench(commands::bench::Args),
    /// Run every case of one scenario (its schedules or its faults), judged by the oracle (needs a `failpoints` build).
    #[cfg(feature = "failpoints")]
    Explore(commands::explore::Args),
    /// Re-run exactly the case a failure's replay token names.
    #[cfg(feature = "failpoints")]
    Replay(commands::replay::Args),
    /// The release gate: the whole catalogue, a JUnit report, non-zero exit on any violation.
    #[cfg(feature = "failpoints")]
    Gate(commands::gate::Args),
    /// The engine as its own process, for agent-kill scenarios.
    #[cfg(feature = "failpoints")]
    #[command(hide = true)]
    Agent(commands::agent::Args),
    /// Explore, replay and gate need a build with fault points.
    #[cfg(not(feature = "failpoints"))]
    #[command(external_subcommand)]
    Harness(Vec<String>),
}

/// Errors print as their chain of causes, one line, never a backtrace: the
/// first line a user sees is what went wrong (file:line:col for bad input).
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("Error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("TASKGATE_LOG"))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Command::Run(args) => commands::run::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Restart(args) => commands::restart::run(args),
        Command::Bench(args) => commands::bench::run(args),
        #[cfg(feature = "failpoints")]
        Command::Explore(args) => commands::explore::run(args),
        #[cfg(feature = "failpoints")]
        Command::Replay(args) => commands::replay::run(args),
        #[cfg(feature = "failpoints")]
        Command::Gate(args) => commands::gate::run(args),
        #[cfg(feature = "failpoints")]
        Command::Agent(args) => commands::agent::run(args),
        #[cfg(not(feature = "failpoints"))]
        Command::Harness(words) => match words.first().map(String::as_str) {
            Some(cmd @ ("explore" | "replay" | "gate" | "agent")) => anyhow::bail!(
                "`taskgate {cmd}` needs a build with fault points: cargo build --features failpoints"
            ),
            _ => anyhow::bail!("unknown command {:?}; see taskgate --help", words.join(" ")),
        },
    }
}
