//! What explore, replay and gate share: a private mount namespace and the
//! labs (marked filesystem + exec gate): one, or one per worker with `--jobs`.

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use taskgate_scenarios::lab_run::{LabRunner, LabWorkshop};
use taskgate_scenarios::{Lab, RunReport};

pub struct Session {
    agent_bin: PathBuf,
    executor_bin: PathBuf,
}

/// How many runs at once: `--jobs`, the core count unless given.
#[derive(clap::Args)]
pub struct JobsArgs {
    /// Runs at once, each worker with its own lab (marked filesystem, data
    /// dirs, cgroup subtree, fault logs); the reports and verdicts (and a
    /// gate's JUnit) are a serial run's. Default: the number of cores.
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<NonZeroUsize>,
}

impl JobsArgs {
    pub fn jobs(&self) -> usize {
        self.jobs
            .or_else(|| std::thread::available_parallelism().ok())
            .map_or(1, NonZeroUsize::get)
    }
}

impl Session {
    /// Must run before any other thread exists: the mount namespace is per
    /// thread, and every later thread and child inherits this one.
    pub fn open() -> anyhow::Result<Session> {
        super::require_root()?;
        taskgate_faults::quiet_injected_panics();
        super::interrupt::catch().context("catching SIGINT, SIGTERM and SIGHUP")?;
        taskgate_oracle::enter_private_mount_namespace()
            .context("entering a private mount namespace")?;
        let agent_bin = std::env::current_exe().context("locating the taskgate binary")?;
        let executor_bin = super::sibling_executor()?;
        Ok(Session {
            agent_bin,
            executor_bin,
        })
    }

    /// One lab, for a command that runs one run at a time.
    pub fn lab(&self) -> anyhow::Result<Lab> {
        Lab::new(&self.executor_bin).context("setting up the lab (marked tmpfs + exec gate)")
    }

    pub fn runner<'a>(&'a self, lab: &'a Lab) -> LabRunner<'a> {
        LabRunner::new(lab, self.agent_bin.clone())
    }

    /// A lab per worker, each made as its worker starts.
    pub fn workshop(&self) -> LabWorkshop {
        LabWorkshop {
            executor_bin: self.executor_bin.clone(),
            agent_bin: self.agent_bin.clone(),
            keep_failures: true,
            report_data: None,
        }
    }
}

/// The error a command that stopped early ends with: no verdict.
pub fn interrupted_after(done: usize, planned: usize) -> anyhow::Error {
    anyhow::anyhow!("interrupted after {done} of {planned} runs: no verdict")
}

/// Refuses a report path no writer could create (its dir missing or not
/// one, or the path a dir) before any run: found once the runs are done,
/// it cost their verdict.
pub fn check_report_path(flag: &str, path: &std::path::Path) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    anyhow::ensure!(
        dir.is_dir(),
        "{flag} {}: no directory {}",
        path.display(),
        dir.display()
    );
    anyhow::ensure!(!path.is_dir(), "{flag} {}: is a directory", path.display());
    Ok(())
}

/// Prints the failures of a batch, at most `limit` in full.
pub fn print_failures(reports: &[RunReport], limit: usize) {
    // A known bug's runs are shown too: the closing evidence that it is open.
    for r in reports
        .iter()
        .filter(|r| r.passed() && !r.expected.is_empty())
        .take(limit)
    {
        crate::commands::say!("{}", r.explain());
    }
    let failed: Vec<&RunReport> = reports.iter().filter(|r| !r.passed()).collect();
    for r in failed.iter().take(limit) {
        crate::commands::say!("{}", r.explain());
    }
    if failed.len() > limit {
        crate::commands::say!(
            "... and {} more failing runs; replay tokens:",
            failed.len() - limit
        );
        for r in failed.iter().skip(limit) {
            crate::commands::say!("  {}", r.token);
        }
    }
}

/// Where a long run stands: a progress bar on a terminal; otherwise (a CI
/// log, or `| tee gate.log` from a terminal) one line per finished run on
/// stdout, so a log cut short by a kill still shows how far the run got
/// and which run was last.
pub struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
    done: usize,
}

impl Progress {
    pub fn new(prefix: &str, total: usize) -> anyhow::Result<Progress> {
        // The bar draws on stderr; the lines go where the verdicts go.
        let bar = if std::io::stderr().is_terminal() && std::io::stdout().is_terminal() {
            let bar = ProgressBar::new(total as u64);
            bar.set_style(
                ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})")?
                    .progress_chars("=> "),
            );
            bar.set_prefix(prefix.to_string());
            Some(bar)
        } else {
            None
        };
        Ok(Progress {
            bar,
            total,
            done: 0,
        })
    }

    pub fn finished(&mut self, report: &RunReport) {
        self.done += 1;
        match &self.bar {
            Some(bar) => {
                if !report.passed() {
                    bar.set_message("FAILING");
                }
                bar.inc(1);
            }
            None => {
                let verdict = report.verdict();
                crate::commands::say!(
                    "[{}/{}] {verdict} {} ({:.2?})",
                    self.done,
                    self.total,
                    report.token,
                    report.duration
                );
                let _ = std::io::stdout().flush();
            }
        }
    }

    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
