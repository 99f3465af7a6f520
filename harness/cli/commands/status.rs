//! `taskgate status`: what the state database says about every allocation.

use super::agent_config::AgentArgs;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Show every task event, not only the last three.
    #[arg(long)]
    pub verbose: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let state = args.agent.open_state()?;
    let allocs = state.allocs()?;
    if allocs.is_empty() {
        println!("no allocations in {}", args.agent.data_dir.display());
    }
    for alloc in allocs {
        println!(
            "alloc {}  job {:?} group {:?}  desired {:?}  client {:?}",
            alloc.alloc_id, alloc.job.name, alloc.group, alloc.desired, alloc.client
        );
        for task in state.tasks(&alloc.alloc_id)? {
            println!(
                "  task {:<12} {:?}  restarts {}",
                task.task, task.state, task.restarts
            );
            let skip = if args.verbose {
                0
            } else {
                task.events.len().saturating_sub(3)
            };
            for event in &task.events[skip..] {
                super::run::print_event(event);
            }
        }
    }
    Ok(())
}
