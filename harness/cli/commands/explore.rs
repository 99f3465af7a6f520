//! `taskgate explore SCENARIO` (or `--scenario FILE [SCENARIO]`): every
//! case of one scenario. For a stop race, every ordering of "stop delivered
//! at update boundary q" x "task runner parked at boundary p", plus PCT
//! random schedules from a seed; for a fault scenario, each of its fault
//! cases. On real executors under the exec oracle, or on the fake driver.

use super::html_report::ReportArgs;
use super::lab_session::{interrupted, interrupted_after, print_failures, Progress, Session};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;
use taskgate_scenarios::catalogue;
use taskgate_scenarios::fake_run::FakeRunner;
use taskgate_scenarios::report::{cases, RunReport, RunVerdict};

#[derive(clap::Args)]
pub struct Args {
    /// A scenario from the catalogue (`taskgate gate --list` shows them),
    /// or from the --scenario file (needed if it holds several).
    #[arg(value_name = "SCENARIO", required_unless_present = "file")]
    pub name: Option<String>,
    /// A scenario file to take the scenario from instead of the catalogue.
    #[arg(long = "scenario", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Random PCT schedules to run after the full enumeration.
    #[arg(long, default_value_t = 20)]
    pub random: u32,
    /// Seed of the random schedules.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Stop at the first failing schedule.
    #[arg(long)]
    pub first_failure: bool,
    /// Succeed only if some schedule fails: proves the gate can fail (used
    /// with the zoo build and TASKGATE_SEEDED_BUG=legacy-prestart-skip).
    #[arg(long)]
    pub expect_violation: bool,
    /// Write the replay tokens of the failing runs here, one per line,
    /// sorted: two explorations of one build can then be compared.
    #[arg(long, value_name = "FILE")]
    pub failing_tokens: Option<PathBuf>,
    /// `real`: real executors under the kernel's exec oracle (needs root).
    /// `fake`: the engine's fake driver, no processes and no root: the wide
    /// search (stop races and in-process faults only).
    #[arg(long, value_enum, default_value_t = Driver::Real)]
    pub driver: Driver,
    /// Show every run's report (what it did, its history, its final
    /// status), not only the failing ones.
    #[arg(long, short)]
    pub verbose: bool,
    #[command(flatten)]
    pub html: ReportArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Driver {
    Real,
    Fake,
}

/// What each random schedule is worth, as PCT proves it.
pub fn pct_guarantee() -> String {
    use taskgate_faults::schedule::Schedule;
    let depth = Schedule::PCT_DEPTH;
    format!(
        "PCT depth {depth}: each random schedule finds any given depth-{depth} ordering bug \
         with probability >= 1/{} (2 actors, every boundary they can park at)",
        Schedule::pct_bound(depth)
    )
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let scenario = catalogue::choose(args.file.as_deref(), args.name.as_deref())?;
    let all = cases(&scenario, args.random, args.seed);
    let scenario = &scenario;
    // One runner or the other: the real one holds a lab (root) for its life.
    let (session, fake_runtime);
    let mut html = None;
    let run: Box<dyn Fn(&taskgate_scenarios::report::Case) -> RunReport + '_> = match args.driver {
        Driver::Real => {
            session = Session::open()?;
            let mut runner = session.runner();
            runner.keep_failures = !args.expect_violation;
            html = args.html.prepare(&mut runner, false)?;
            Box::new(move |case| runner.run(scenario, case))
        }
        Driver::Fake => {
            anyhow::ensure!(
                args.html.report.is_none(),
                "--report needs the real driver: a fake run keeps no data to link"
            );
            fake_runtime = super::runtime()?;
            let runner = FakeRunner {
                runtime: &fake_runtime,
            };
            Box::new(move |case| runner.run(scenario, case))
        }
    };
    let mut progress = Progress::new(&scenario.name, all.len())?;
    let started = Instant::now();
    let mut reports = Vec::new();
    let mut first_failure = None;
    for case in &all {
        let report = run(case);
        progress.finished(&report);
        if !report.passed() && first_failure.is_none() {
            first_failure = Some((reports.len() + 1, started.elapsed()));
        }
        reports.push(report);
        if (args.first_failure && first_failure.is_some()) || interrupted() {
            break;
        }
    }
    progress.finish();
    if interrupted() {
        return Err(interrupted_after(reports.len(), all.len()));
    }
    let failed = reports.iter().filter(|r| !r.passed()).count();
    if args.verbose {
        // Known bugs' runs are shown below, with the failures.
        for r in reports.iter().filter(|r| r.verdict() == RunVerdict::Pass) {
            println!("{}", r.explain());
        }
    }
    print_failures(&reports, 3);
    if let Some(html) = &html {
        html.write(&[scenario], &reports, None, started.elapsed(), |r| {
            !r.passed()
        })?;
    }
    if let Some(path) = &args.failing_tokens {
        let mut tokens: Vec<String> = reports
            .iter()
            .filter(|r| !r.passed())
            .map(|r| r.token.to_string())
            .collect();
        tokens.sort();
        let text: String = tokens.iter().map(|t| format!("{t}\n")).collect();
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let unit = match scenario.kind {
        taskgate_scenarios::model::Kind::StopRace { .. } => "schedule",
        _ => "case",
    };
    let elapsed = started.elapsed();
    println!(
        "{}: {} {unit}s run in {elapsed:.2?} ({:.1} {unit}s/s), {failed} failing",
        scenario.name,
        reports.len(),
        reports.len() as f64 / elapsed.as_secs_f64().max(1e-9),
    );
    if args.random > 0 && unit == "schedule" {
        println!("{}", pct_guarantee());
    }
    if let Some((n, at)) = first_failure {
        println!(
            "first failure at {unit} {n} of {}, after {at:.2?}",
            all.len()
        );
    }
    match (args.expect_violation, failed) {
        (false, 0) => Ok(()),
        (false, n) => anyhow::bail!("{n} {unit}s violated invariants"),
        (true, 0) => {
            anyhow::bail!("expected the explorer to find a violation, but every {unit} passed")
        }
        (true, _) => Ok(()),
    }
}
