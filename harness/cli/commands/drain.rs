//! `taskgate drain`: the agent stops every allocation (each in Nomad's kill
//! order, its poststop tasks run), and exits once all have finished. A
//! SIGTERM instead leaves every task running for the next agent.

use super::agent_config::ClientArgs;
use std::path::Path;
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
    // version's) it could not stop either. An unreadable record with no
    // executor serving in the run dir is an old allocation's: said, not
    // failed on, or every drain would fail for it.
    let report = super::status::read_status(&args.client)?;
    let run_dir = args.client.data_dir.run();
    let mut not_stopped = Vec::new();
    for unreadable in &report.unreadable {
        if serves_executors(&run_dir, &unreadable.alloc_id) {
            not_stopped.push(format!("{} ({})", unreadable.alloc_id, unreadable.why));
        } else {
            super::say_err!(
                "warning: alloc {} could not be read ({}); no executor of it serves",
                unreadable.alloc_id,
                unreadable.why
            );
        }
    }
    not_stopped.extend(
        (report.allocs.iter())
            .filter(|e| !e.alloc.client.is_terminal())
            .map(|e| format!("{} (not run by the agent)", e.alloc.alloc_id)),
    );
    anyhow::ensure!(
        not_stopped.is_empty(),
        "the agent stopped every allocation it ran and exited, but {} it did not run \
         were not stopped (their tasks may still run): {}",
        not_stopped.len(),
        not_stopped.join("; ")
    );
    super::say!("==> drained: every allocation has finished; the agent exits");
    Ok(())
}

/// Whether an executor of `alloc_id` serves in the run dir: its socket is
/// there.
fn serves_executors(run_dir: &Path, alloc_id: &str) -> bool {
    std::fs::read_dir(run_dir).is_ok_and(|entries| {
        (entries.flatten())
            .any(|e| taskgate_executor::is_socket_of(&e.file_name().to_string_lossy(), alloc_id))
    })
}
