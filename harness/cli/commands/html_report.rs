//! `--report DIR` of `gate`, `explore` and `replay`: the HTML report
//! (`taskgate_scenarios::html`), and the run data its pages link.

use anyhow::Context;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use taskgate_scenarios::html::kept::Keeper;
use taskgate_scenarios::html::{self, host::Host, RunView, ScenarioRow, Summary, Written};
use taskgate_scenarios::{RunReport, Scenario};

#[derive(clap::Args, Default)]
pub struct ReportArgs {
    /// Write an HTML report into DIR: `index.html`, and a page per failing
    /// run with its timeline and kept data (a new DIR, or an earlier report's).
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
}

/// An HTML report in the making: its directory, ready, and the build it
/// describes.
pub struct Report {
    dir: PathBuf,
    keeper: Arc<Keeper>,
}

impl ReportArgs {
    /// Prepares the report's directory before any run, so a wrong DIR
    /// fails at once and every run's data can be copied into it (by the
    /// runners given [`Report::keeper`]).
    pub fn prepare(&self, passing: bool) -> anyhow::Result<Option<Report>> {
        let Some(dir) = &self.report else {
            return Ok(None);
        };
        let dir =
            std::path::absolute(dir).with_context(|| format!("resolving {}", dir.display()))?;
        clear(&dir)?;
        let keeper = Arc::new(Keeper::new(&dir, passing));
        Ok(Some(Report { dir, keeper }))
    }
}

/// What a report's `index.html` says until its run writes the report: a
/// run interrupted before then leaves a report the next one takes over.
const UNFINISHED: &str = "<!doctype html><meta charset=\"utf-8\"><title>taskgate report</title>\
<p>The run writing this report has not finished, or was interrupted before it wrote it.</p>\n";

/// Makes `dir` a report directory with nothing reported yet: a new one,
/// an empty one, or an earlier report (its `index.html` and `runs/` are
/// removed). Anything else is refused: a typo must not delete what is
/// there.
fn clear(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        let names: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        let is_report = names.iter().any(|n| n == "index.html")
            && names
                .iter()
                .all(|n| n.to_str().is_some_and(html::is_report_file));
        anyhow::ensure!(
            names.is_empty() || is_report,
            "--report {}: the directory holds something other than a taskgate report; \
             name a new or empty directory",
            dir.display()
        );
        for name in names.iter().filter(|n| *n != html::kept::RUNS_DIR) {
            let _ = std::fs::remove_file(dir.join(name));
        }
        let runs = dir.join(html::kept::RUNS_DIR);
        if runs.exists() {
            std::fs::remove_dir_all(&runs)
                .with_context(|| format!("removing the earlier report's {}", runs.display()))?;
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let index = dir.join("index.html");
    std::fs::write(&index, UNFINISHED).with_context(|| format!("writing {}", index.display()))
}

/// The engine build this binary is: its features and seeded bug.
fn build() -> String {
    let mut features = vec!["failpoints"];
    if cfg!(feature = "zoo") {
        features.push("zoo");
    }
    let bug = match taskgate_faults::seeded::chosen() {
        Ok(Some(bug)) => bug.name().to_string(),
        Ok(None) => "none".to_string(),
        Err(e) => e.to_string(),
    };
    format!(
        "taskgate {} ({} build), features: {}; seeded bug: {bug}",
        env!("CARGO_PKG_VERSION"),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        features.join(", "),
    )
}

impl Report {
    /// What keeps the reported runs' data in the report, for the runners.
    pub fn keeper(&self) -> Arc<Keeper> {
        self.keeper.clone()
    }

    /// Settles the kept runs' data once the runs are done, in plan order
    /// (see [`Keeper::settle`]): before their JUnit or pages are written.
    pub fn settle(&self, reports: &mut [RunReport]) {
        self.keeper.settle(reports);
    }

    /// Writes the report of `reports` (the runs of `scenarios`), drawing
    /// those `draw` picks, and prints where it is. The command line names
    /// the report.
    pub fn write(
        &self,
        scenarios: &[&Scenario],
        reports: &[RunReport],
        coverage: Option<&taskgate_scenarios::coverage::Coverage>,
        elapsed: Duration,
        draw: impl Fn(&RunReport) -> bool,
    ) -> anyhow::Result<Written> {
        let started = Instant::now();
        let summary = Summary {
            command: std::env::args().skip(1).collect::<Vec<_>>().join(" "),
            scenarios: scenarios
                .iter()
                .map(|s| {
                    let runs: Vec<_> = reports
                        .iter()
                        .filter(|r| r.token.scenario == s.name)
                        .collect();
                    ScenarioRow {
                        name: s.name.clone(),
                        about: s.about.clone(),
                        runs: runs.len(),
                        failed: runs.iter().filter(|r| !r.passed()).count(),
                        known_bug: s.expect.known_violation.as_ref().map(|k| k.bug.clone()),
                    }
                })
                .collect(),
            coverage,
            elapsed,
            host: Host::detect(build()),
        };
        let drawn: Vec<RunView> = reports
            .iter()
            .filter(|r| draw(r))
            .map(RunView::of)
            .collect();
        let written = html::write(&self.dir, &summary, reports, &drawn)
            .with_context(|| format!("writing the report into {}", self.dir.display()))?;
        crate::commands::say!(
            "report: {} ({} pages, {} KiB, written in {:.0?})",
            written.index.display(),
            written.pages.len() + 1,
            written.bytes / 1024,
            started.elapsed()
        );
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run interrupted after its first failing run was kept (its data in
    /// `runs/`, no `index.html` yet) leaves a report the next run with the
    /// same `--report` takes over, never one it refuses.
    #[test]
    fn an_interrupted_report_is_taken_over() {
        let home = tempfile::tempdir().unwrap();
        let args = ReportArgs {
            report: Some(home.path().join("r")),
        };
        let report = args.prepare(false).unwrap().expect("a report");
        std::fs::create_dir_all(report.dir.join(html::kept::RUNS_DIR).join("run-1")).unwrap();
        drop(report);
        let again = args.prepare(false);
        assert!(again.is_ok(), "{:#}", again.err().unwrap());
    }
}
