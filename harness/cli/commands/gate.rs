//! `taskgate gate`: the release gate. Runs the whole catalogue (the built-in
//! scenarios, or every file of `--catalogue DIR`) or one shard of it, writes
//! a JUnit report and a human summary, exits non-zero on any failure;
//! `--merge` joins the shards' reports into one verdict.

use super::html_report::ReportArgs;
use super::interrupt::interrupted;
use super::lab_session::{interrupted_after, print_failures, JobsArgs, Progress, Session};
use anyhow::Context;
use std::path::{Path, PathBuf};
use taskgate_scenarios::gate::{self, Gate, StopAt};
use taskgate_scenarios::model::Kind;
use taskgate_scenarios::shard::Shard;
use taskgate_scenarios::{catalogue, coverage};

#[derive(clap::Args)]
pub struct Args {
    /// Where to write the JUnit XML report.
    #[arg(long, default_value = "taskgate-gate.xml")]
    pub junit: PathBuf,
    /// Random PCT schedules per stop-race scenario, after its enumeration.
    #[arg(long, default_value_t = 10, conflicts_with_all = ["merge", "list"])]
    pub random: u32,
    /// Seed of the random schedules: the same seed, the same schedules.
    #[arg(long, default_value_t = 1, conflicts_with_all = ["merge", "list"])]
    pub seed: u64,
    /// Only these scenarios (default: all); with --list, list only them.
    #[arg(long = "only", conflicts_with = "merge")]
    pub only: Vec<String>,
    /// Run the scenarios of every *.hcl file in DIR instead of the built-ins.
    #[arg(long, value_name = "DIR")]
    pub catalogue: Option<PathBuf>,
    /// List the catalogue (or the --only scenarios) and exit.
    #[arg(long, conflicts_with_all = ["merge", "shard", "fail_fast", "jobs", "junit", "report"])]
    pub list: bool,
    /// Run only shard I of N (e.g. 2/4): disjoint shards whose union is the
    /// whole gate, for a CI matrix; join them with --merge.
    #[arg(long, value_name = "I/N", conflicts_with = "merge")]
    pub shard: Option<Shard>,
    /// Stop at the first failing run (the verdict is known): for proving
    /// that a seeded bug is caught, and how soon.
    #[arg(long, conflicts_with = "merge")]
    pub fail_fast: bool,
    /// Remove the failing runs' data with the lab instead of keeping it for
    /// a person to read (their histories are in the JUnit report): for a
    /// gate whose failures are the point, as the bug zoo's are.
    #[arg(long, conflicts_with_all = ["merge", "list"])]
    pub discard_failing_runs: bool,
    /// Run nothing: merge these shard reports into --junit and give the verdict.
    #[arg(long, num_args = 1.., value_name = "SHARD.xml", conflicts_with = "jobs")]
    pub merge: Vec<PathBuf>,
    #[command(flatten)]
    pub html: ReportArgs,
    #[command(flatten)]
    pub jobs: JobsArgs,
}

/// Removes the last gate's JUnit file: one this gate gives no verdict
/// for (bad input, an interrupt, an error) must leave none behind, for a
/// CI step that publishes it whatever happened.
fn forget_last_report(junit: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(junit) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(err).with_context(|| format!("removing the last gate's {}", junit.display()))
        }
        _ => Ok(()),
    }
}

/// The built-in scenarios, or every file of `--catalogue DIR`.
fn scenario_set(args: &Args) -> anyhow::Result<Vec<taskgate_scenarios::Scenario>> {
    Ok(match &args.catalogue {
        Some(dir) => catalogue::load_dir(dir)?,
        None => catalogue::catalogue(),
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        !(args.merge.iter()).any(|shard| std::fs::File::open(shard)
            .is_ok_and(|shard| taskgate_executor::same_file(&shard, &args.junit))),
        "--junit {} is one of the shard reports to merge: write the verdict elsewhere",
        args.junit.display()
    );
    if !args.list {
        forget_last_report(&args.junit)?;
        super::lab_session::check_report_path("--junit", &args.junit)?;
    }
    if !args.merge.is_empty() {
        return merge(&args);
    }
    let selected = gate::select(scenario_set(&args)?, &args.only)?;
    if args.list {
        for s in &selected {
            crate::commands::say!("{:<22} {}", s.name, s.about);
        }
        return Ok(());
    }
    let shard = args.shard.unwrap_or(Shard::WHOLE);
    let gate = Gate::new(&selected, args.random, args.seed, shard);
    let planned = gate.mine().len();
    let session = Session::open()?;
    let html = args.html.prepare(false)?;
    let mut workshop = session.workshop();
    workshop.report_data = html.as_ref().map(|h| h.keeper());
    workshop.keep_failures = !args.discard_failing_runs;
    if shard != Shard::WHOLE {
        crate::commands::say!(
            "gate: shard {shard}: {planned} of the plan's {} runs",
            gate.plan.len()
        );
    }
    let stop = if args.fail_fast {
        StopAt::FirstFailure
    } else {
        StopAt::End
    };
    let mut progress = Progress::new("gate", planned)?;
    let mut ran = gate.run(&workshop, args.jobs.jobs(), stop, &interrupted, |r| {
        progress.finished(r)
    })?;
    progress.finish();
    if let Some(html) = &html {
        html.settle(&mut ran.reports);
    }
    if interrupted() {
        return Err(interrupted_after(ran.reports.len(), planned));
    }
    let coverage = gate.coverage(&ran.reports);
    let mut xml = gate.junit(&ran.reports, &coverage);
    if let Some(html) = &html {
        let scenarios: Vec<_> = selected.iter().collect();
        let whole = (shard == Shard::WHOLE).then_some(&coverage);
        let written = html.write(&scenarios, &ran.reports, whole, ran.elapsed, |r| {
            !r.passed()
        })?;
        taskgate_scenarios::html::link_junit(&mut xml, &written, &args.junit);
    }
    std::fs::write(&args.junit, xml.to_string()?)
        .with_context(|| format!("writing {}", args.junit.display()))?;
    print_failures(&ran.reports, 5);
    if shard == Shard::WHOLE {
        crate::commands::say_part!("{}", coverage::render(&coverage));
    }
    let stop_races = (selected.iter()).any(|s| matches!(s.kind, Kind::StopRace { .. }));
    if args.random > 0 && stop_races {
        crate::commands::say!("{}", super::explore::pct_guarantee());
    }
    crate::commands::say!("scenario                          runs  failed  known bug");
    for tally in gate.tallies(&ran.reports) {
        let known = (tally.scenario.expect.known_violation.as_ref())
            .map_or(String::new(), |k| k.bug.clone());
        crate::commands::say!(
            "{:<32} {:>5}  {:>6}  {known}",
            tally.scenario.name,
            tally.runs,
            tally.failed
        );
    }
    let failed = ran.failed();
    crate::commands::say!(
        "gate: {} runs in {:.1?}; JUnit report: {}",
        ran.reports.len(),
        ran.elapsed,
        args.junit.display()
    );
    crate::commands::say!("{} passed, {failed} failed", ran.reports.len() - failed);
    if let Some(first) = &ran.first_failure {
        crate::commands::say!(
            "first failure: {} (run {} of {planned}), after {:.1}s",
            ran.reports[first.position - 1].token,
            first.position,
            first.after.as_secs_f64()
        );
    }
    anyhow::ensure!(
        failed == 0,
        "the release gate failed: {failed} runs violated invariants"
    );
    Ok(())
}

fn merge(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.html.report.is_none(),
        "--report draws the runs it ran; --merge runs none (give each shard its own --report)"
    );
    let mut shards = Vec::new();
    for path in &args.merge {
        let xml = std::fs::read_to_string(path)
            .with_context(|| format!("reading shard report {}", path.display()))?;
        shards.push((path.display().to_string(), xml));
    }
    let merged = gate::merge(&scenario_set(args)?, &shards)?;
    crate::commands::say_part!("{}", coverage::render(&merged.coverage));
    let report = merged.report;
    std::fs::write(&args.junit, report.to_string()?)
        .with_context(|| format!("writing {}", args.junit.display()))?;
    let failed = report.failures + report.errors;
    crate::commands::say!(
        "gate: {} shards merged into {}: {} runs",
        shards.len(),
        args.junit.display(),
        report.tests
    );
    crate::commands::say!("{} passed, {failed} failed", report.tests - failed);
    anyhow::ensure!(
        failed == 0,
        "the release gate failed: {failed} runs violated invariants"
    );
    Ok(())
}
