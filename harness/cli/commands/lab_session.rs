//! What explore, replay and gate share: a private mount namespace, the lab
//! (marked filesystem + exec gate) and the engine runtime.

use anyhow::Context;
use taskgate_scenarios::run::Runner;
use taskgate_scenarios::{Lab, RunReport};

pub struct Session {
    pub lab: Lab,
    pub runtime: tokio::runtime::Runtime,
    agent_bin: std::path::PathBuf,
}

impl Session {
    /// Must run before any other thread exists: the mount namespace is per
    /// thread, and every later thread and child inherits this one.
    pub fn open() -> anyhow::Result<Session> {
        super::require_root()?;
        taskgate_oracle::enter_private_mount_namespace()
            .context("entering a private mount namespace")?;
        let agent_bin = std::env::current_exe().context("locating the taskgate binary")?;
        let lab = Lab::new(&super::sibling_executor()?)
            .context("setting up the lab (marked tmpfs + exec gate)")?;
        let runtime = super::runtime()?;
        Ok(Session {
            lab,
            runtime,
            agent_bin,
        })
    }

    pub fn runner(&self) -> Runner<'_> {
        Runner::new(&self.lab, &self.runtime, self.agent_bin.clone())
    }
}

/// Prints the failures of a batch, at most `limit` in full.
pub fn print_failures(reports: &[RunReport], limit: usize) {
    let failed: Vec<&RunReport> = reports.iter().filter(|r| !r.passed()).collect();
    for r in failed.iter().take(limit) {
        println!("{}", r.explain());
    }
    if failed.len() > limit {
        println!(
            "... and {} more failing runs; replay tokens:",
            failed.len() - limit
        );
        for r in failed.iter().skip(limit) {
            println!("  {}", r.token);
        }
    }
}
