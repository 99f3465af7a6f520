//! `taskgate drain`: the agent stops every allocation (each in Nomad's kill
//! order, its poststop tasks run), and exits once all have finished. A
//! SIGTERM instead leaves every task running for the next agent.

use super::agent_config::ClientArgs;
use taskgate_engine::control::{self, ControlRequest};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Said once an agent took it: with none, the error alone.
    let mut replies = control::send(&args.client.data_dir, &ControlRequest::Drain)?;
    super::say!("==> draining: stopping every allocation");
    super::expect_done(replies.next_answer()?)?;
    // What the agent could not restore (a damaged record, another
    // version's) it could not stop either.
    let report = super::status::read_status(&args.client)?;
    let not_stopped: Vec<String> = (report.unreadable.iter())
        .map(|u| format!("{} ({})", u.alloc_id, u.why))
        .chain(
            (report.allocs.iter())
                .filter(|e| !e.alloc.client.is_terminal())
                .map(|e| format!("{} (not restored)", e.alloc.alloc_id)),
        )
        .collect();
    anyhow::ensure!(
        not_stopped.is_empty(),
        "the agent stopped every allocation it ran and exited, but {} it could not restore \
         were not stopped (their tasks may still run): {}",
        not_stopped.len(),
        not_stopped.join("; ")
    );
    super::say!("==> drained: every allocation has finished; the agent exits");
    Ok(())
}
