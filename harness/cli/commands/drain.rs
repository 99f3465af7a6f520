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
    super::say!("==> drained: every allocation has finished; the agent exits");
    Ok(())
}
