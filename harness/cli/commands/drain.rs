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
    super::say!("==> draining: stopping every allocation");
    super::expect_done(control::request(
        &args.client.data_dir,
        &ControlRequest::Drain,
    )?)?;
    super::say!("==> drained: every allocation has finished; the agent exits");
    Ok(())
}
