//! `taskgate gate`: the release gate. Runs the whole catalogue, writes a
//! JUnit report and a human summary, exits non-zero on any failure.

use super::lab_session::{print_failures, Session};
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;
use taskgate_scenarios::report::{cases, junit};

#[derive(clap::Args)]
pub struct Args {
    /// Where to write the JUnit XML report.
    #[arg(long, default_value = "taskgate-gate.xml")]
    pub junit: PathBuf,
    /// Random PCT schedules per stop-race scenario, after its enumeration.
    #[arg(long, default_value_t = 10)]
    pub random: u32,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Only these scenarios (default: all).
    #[arg(long = "only")]
    pub only: Vec<String>,
    /// List the catalogue and exit.
    #[arg(long)]
    pub list: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let catalogue = taskgate_scenarios::catalogue();
    if args.list {
        for s in &catalogue {
            println!("{:<22} {}", s.name, s.about);
        }
        return Ok(());
    }
    for name in &args.only {
        taskgate_scenarios::find(name)?;
    }
    let selected: Vec<_> = catalogue
        .into_iter()
        .filter(|s| args.only.is_empty() || args.only.iter().any(|n| n == s.name))
        .collect();
    let session = Session::open()?;
    let runner = session.runner();
    let plan: Vec<_> = selected
        .iter()
        .flat_map(|s| {
            cases(s, args.random, args.seed)
                .into_iter()
                .map(move |c| (s, c))
        })
        .collect();
    let bar = ProgressBar::new(plan.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("gate [{bar:30}] {pos}/{len} {msg} ({elapsed})")?
            .progress_chars("=> "),
    );
    let started = Instant::now();
    let mut reports = Vec::new();
    for (scenario, case) in &plan {
        bar.set_message(scenario.name);
        reports.push(runner.run(scenario, case));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let xml = junit(&reports, "taskgate-gate")?;
    std::fs::write(&args.junit, xml)
        .with_context(|| format!("writing {}", args.junit.display()))?;
    print_failures(&reports, 5);
    println!("scenario               runs  failed");
    for s in &selected {
        let runs: Vec<_> = reports
            .iter()
            .filter(|r| r.token.scenario == s.name)
            .collect();
        let failed = runs.iter().filter(|r| !r.passed()).count();
        println!("{:<22} {:>4}  {:>6}", s.name, runs.len(), failed);
    }
    let failed = reports.iter().filter(|r| !r.passed()).count();
    println!(
        "gate: {} runs in {:.1?}; JUnit report: {}",
        reports.len(),
        started.elapsed(),
        args.junit.display()
    );
    println!("{} passed, {failed} failed", reports.len() - failed);
    anyhow::ensure!(
        failed == 0,
        "the release gate failed: {failed} runs violated invariants"
    );
    Ok(())
}
