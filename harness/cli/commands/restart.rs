//! `taskgate restart ALLOC [TASK] [--all-tasks]`: Nomad's `alloc restart`,
//! sent over the control socket to the agent (`taskgate agent`, or a
//! foreground `taskgate run`) serving the same `--data-dir`; it returns
//! once the restart is done.

use super::agent_config::ClientArgs;
use taskgate_engine::control::{self, ControlRequest};
use taskgate_engine::RestartScope;

#[derive(clap::Args)]
pub struct Args {
    /// The allocation's id, or a unique prefix of it.
    pub alloc: String,
    /// Restart only this task (default: every running task).
    #[arg(conflicts_with = "all_tasks")]
    pub task: Option<String>,
    /// Restart every task, completed ones too: prestart tasks run again
    /// before the main tasks start.
    #[arg(long)]
    pub all_tasks: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let scope = match args.task {
        Some(task) => RestartScope::Task(task),
        None if args.all_tasks => RestartScope::All,
        None => RestartScope::Running,
    };
    let done = format!("==> restarted {scope} of alloc {}", args.alloc);
    let request = ControlRequest::Restart {
        alloc: args.alloc,
        scope,
    };
    super::expect_done(control::request(&args.client.data_dir, &request)?)?;
    super::say!("{done}");
    Ok(())
}
