//! `taskgate stop ALLOC [--detach]`: Nomad's `alloc stop`, sent to the
//! agent serving the data dir. Without `--detach` it prints the
//! allocation's events until it has finished.

use super::agent_config::ClientArgs;
use super::run::follow_remote;
use taskgate_engine::control::{self, ControlRequest};

#[derive(clap::Args)]
pub struct Args {
    /// The allocation's id, or a unique prefix of it.
    pub alloc: String,
    /// Return once the stop is delivered, not once the allocation finished.
    #[arg(long)]
    pub detach: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let stop = ControlRequest::Stop {
        alloc: args.alloc.clone(),
        follow: !args.detach,
    };
    let mut replies = control::send(&args.client.data_dir, &stop)?;
    super::expect_done(replies.next_answer()?)?;
    super::say!("==> stop sent to alloc {}", args.alloc);
    if args.detach {
        return Ok(());
    }
    let status = match follow_remote(replies)? {
        Some(status) => status,
        None => {
            let report = super::status::read_status(&args.client)?;
            let entry = super::status::find_alloc(&report, &args.alloc, &args.client.data_dir)?;
            super::run::recorded_end(entry)?
        }
    };
    super::say!("==> alloc finished: {}", status.client.as_str());
    Ok(())
}
