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
    /// The agent: restores every allocation, then serves run, stop, status,
    /// logs, restart and drain until SIGTERM (tasks run on) or a drain.
    Agent(commands::agent::Args),
    /// Run one allocation (the built-in default job without a file): in the
    /// agent serving the data dir, or in the foreground without one.
    Run(commands::run::Args),
    /// Stop an allocation (Nomad's `alloc stop`).
    Stop(commands::stop::Args),
    /// Show the allocations and tasks in the state database.
    Status(commands::status::Args),
    /// Print a task's logs, following them with -f (Nomad's `alloc logs`).
    Logs(commands::logs::Args),
    /// Restart an allocation's tasks (Nomad's `alloc restart`).
    Restart(commands::restart::Args),
    /// Stop every allocation, then let the agent exit.
    Drain(commands::drain::Args),
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
    // A build without fault points still knows the harness's commands, to
    // say what they need; any other word is clap's to refuse (exit 2, with
    // the nearest command).
    #[cfg(not(feature = "failpoints"))]
    #[command(hide = true)]
    Explore(HarnessOnly),
    #[cfg(not(feature = "failpoints"))]
    #[command(hide = true)]
    Replay(HarnessOnly),
    #[cfg(not(feature = "failpoints"))]
    #[command(hide = true)]
    Gate(HarnessOnly),
}

/// The arguments of a harness command, in a build that has none.
#[cfg(not(feature = "failpoints"))]
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
struct HarnessOnly {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _args: Vec<String>,
}

/// Errors print as their chain of causes, one line, never a backtrace: the
/// first line a user sees is what went wrong (file:line:col for bad input).
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            commands::say_err!("Error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Err(err) = taskgate_faults::seeded::chosen() {
        anyhow::bail!("{}: {err}", taskgate_faults::seeded::SEEDED_BUG_ENV);
    }
    // The agent logs what it does (to journald under systemd); a command
    // run by hand says only what went wrong. TASKGATE_LOG overrides both.
    let level = match cli.command {
        Command::Agent(_) => tracing::level_filters::LevelFilter::INFO,
        _ => tracing::level_filters::LevelFilter::WARN,
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::builder()
                .with_default_directive(level.into())
                .with_env_var("TASKGATE_LOG")
                .from_env_lossy(),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A failed write is told with `eprintln!`, a panic when stderr is gone.
        .log_internal_errors(false)
        .init();
    match cli.command {
        Command::Agent(args) => commands::agent::run(args),
        Command::Run(args) => commands::run::run(args),
        Command::Stop(args) => commands::stop::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Logs(args) => commands::logs::run(args),
        Command::Restart(args) => commands::restart::run(args),
        Command::Drain(args) => commands::drain::run(args),
        Command::Bench(args) => commands::bench::run(args),
        #[cfg(feature = "failpoints")]
        Command::Explore(args) => commands::explore::run(args),
        #[cfg(feature = "failpoints")]
        Command::Replay(args) => commands::replay::run(args),
        #[cfg(feature = "failpoints")]
        Command::Gate(args) => commands::gate::run(args),
        #[cfg(not(feature = "failpoints"))]
        Command::Explore(_) => needs_fault_points("explore"),
        #[cfg(not(feature = "failpoints"))]
        Command::Replay(_) => needs_fault_points("replay"),
        #[cfg(not(feature = "failpoints"))]
        Command::Gate(_) => needs_fault_points("gate"),
    }
}

#[cfg(not(feature = "failpoints"))]
fn needs_fault_points(command: &str) -> anyhow::Result<()> {
    anyhow::bail!(
        "`taskgate {command}` needs a build with fault points: cargo build --features failpoints"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mistyped command is refused by the parser with the nearest one, in
    /// a build with fault points or without (which once took any unknown
    /// word for a harness command and named none).
    #[test]
    fn a_mistyped_command_is_refused_with_the_nearest() {
        let err = Cli::try_parse_from(["taskgate", "stauts"])
            .err()
            .expect("stauts was taken");
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidSubcommand);
        assert!(err.to_string().contains("'status'"), "{err}");
    }
}
