//! `taskgate executor`: the per-task executor process.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("the executor is not implemented yet")
}
