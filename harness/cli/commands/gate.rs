//! `taskgate gate`: the release gate. Runs the whole catalogue (the built-in
//! scenarios, or every file of `--catalogue DIR`) or one shard of it, writes
//! a JUnit report and a human summary, exits non-zero on any failure;
//! `--merge` joins the shards' reports into one verdict.

use super::html_report::ReportArgs;
use super::lab_session::{interrupted, interrupted_after, print_failures, Progress, Session};
use anyhow::Context;
use std::path::PathBuf;
use std::time::Instant;
use taskgate_scenarios::report::Token;
use taskgate_scenarios::report::{cases, junit};
use taskgate_scenarios::shard::{self, Shard};
use taskgate_scenarios::{catalogue, coverage};

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
    /// Run the scenarios of every *.hcl file in DIR instead of the built-ins.
    #[arg(long, value_name = "DIR")]
    pub catalogue: Option<PathBuf>,
    /// List the catalogue and exit.
    #[arg(long)]
    pub list: bool,
    /// Run only shard I of N (e.g. 2/4): disjoint shards whose union is the
    /// whole gate, for a CI matrix; join them with --merge.
    #[arg(long, value_name = "I/N", conflicts_with = "merge")]
    pub shard: Option<Shard>,
    /// Stop at the first failing run (the verdict is known): for proving
    /// that a seeded bug is caught, and how soon.
    #[arg(long, conflicts_with = "merge")]
    pub fail_fast: bool,
    /// Run nothing: merge these shard reports into --junit and give the verdict.
    #[arg(long, num_args = 1.., value_name = "SHARD.xml")]
    pub merge: Vec<PathBuf>,
    #[command(flatten)]
    pub html: ReportArgs,
}

/// The built-in scenarios, or every file of `--catalogue DIR`.
fn scenario_set(args: &Args) -> anyhow::Result<Vec<taskgate_scenarios::Scenario>> {
    Ok(match &args.catalogue {
        Some(dir) => catalogue::load_dir(dir)?,
        None => catalogue::catalogue(),
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !args.merge.is_empty() {
        return merge(&args);
    }
    let catalogue = scenario_set(&args)?;
    if args.list {
        for s in &catalogue {
            println!("{:<22} {}", s.name, s.about);
        }
        return Ok(());
    }
    for name in &args.only {
        catalogue::find(&catalogue, name)?;
    }
    let selected: Vec<_> = catalogue
        .into_iter()
        .filter(|s| args.only.is_empty() || args.only.contains(&s.name))
        .collect();
    let plan: Vec<_> = selected
        .iter()
        .flat_map(|s| {
            cases(s, args.random, args.seed)
                .into_iter()
                .map(move |c| (s, c))
        })
        .collect();
    let shard = args.shard.unwrap_or(Shard::WHOLE);
    let plan_tokens: Vec<String> = plan
        .iter()
        .map(|(s, c)| {
            taskgate_scenarios::Token {
                scenario: s.name.to_string(),
                case: c.clone(),
            }
            .to_string()
        })
        .collect();
    let mine: Vec<_> = plan
        .iter()
        .enumerate()
        .filter(|(i, _)| shard.takes(*i))
        .map(|(_, run)| run)
        .collect();
    let session = Session::open()?;
    let mut runner = session.runner();
    let html = args.html.prepare(&mut runner, false)?;
    if shard != Shard::WHOLE {
        println!(
            "gate: shard {shard}: {} of the plan's {} runs",
            mine.len(),
            plan.len()
        );
    }
    let mut progress = Progress::new("gate", mine.len())?;
    let started = Instant::now();
    let mut reports = Vec::new();
    let mut first_failure = None;
    for (scenario, case) in &mine {
        let report = runner.run(scenario, case);
        progress.finished(&report);
        let failed = !report.passed();
        if failed && first_failure.is_none() {
            first_failure = Some((
                report.token.to_string(),
                reports.len() + 1,
                started.elapsed(),
            ));
        }
        reports.push(report);
        if (failed && args.fail_fast) || interrupted() {
            break;
        }
    }
    progress.finish();
    if interrupted() {
        return Err(interrupted_after(reports.len(), mine.len()));
    }
    let mut xml = junit(&reports, "taskgate-gate");
    let coverage = coverage::coverage(&selected, reports.iter().map(|r| (&r.token, r.passed())));
    if shard == Shard::WHOLE {
        add_coverage(&mut xml, &coverage);
    }
    shard::stamp(&mut xml, shard, &plan_tokens);
    if let Some(html) = &html {
        let scenarios: Vec<_> = selected.iter().collect();
        let whole = (shard == Shard::WHOLE).then_some(&coverage);
        let written = html.write(&scenarios, &reports, whole, started.elapsed(), |r| {
            !r.passed()
        })?;
        taskgate_scenarios::html::link_junit(&mut xml, &written, &args.junit);
    }
    std::fs::write(&args.junit, xml.to_string()?)
        .with_context(|| format!("writing {}", args.junit.display()))?;
    print_failures(&reports, 5);
    if shard == Shard::WHOLE {
        print!("{}", coverage::render(&coverage));
    }
    if args.random > 0 {
        println!("{}", super::explore::pct_guarantee());
    }
    println!("scenario                          runs  failed  known bug");
    for s in &selected {
        let runs: Vec<_> = reports
            .iter()
            .filter(|r| r.token.scenario == s.name)
            .collect();
        let failed = runs.iter().filter(|r| !r.passed()).count();
        let known = s
            .expect
            .known_violation
            .as_ref()
            .map_or(String::new(), |k| k.bug.clone());
        println!("{:<32} {:>5}  {:>6}  {known}", s.name, runs.len(), failed);
    }
    let failed = reports.iter().filter(|r| !r.passed()).count();
    println!(
        "gate: {} runs in {:.1?}; JUnit report: {}",
        reports.len(),
        started.elapsed(),
        args.junit.display()
    );
    println!("{} passed, {failed} failed", reports.len() - failed);
    if let Some((token, n, at)) = first_failure {
        println!(
            "first failure: {token} (run {n} of {}), after {:.1}s",
            mine.len(),
            at.as_secs_f64()
        );
    }
    anyhow::ensure!(
        failed == 0,
        "the release gate failed: {failed} runs violated invariants"
    );
    Ok(())
}

/// Each scenario's suite carries its pairs: which ran, with what verdict.
fn add_coverage(xml: &mut quick_junit::Report, coverage: &coverage::Coverage) {
    for suite in &mut xml.test_suites {
        let name = suite.name.to_string();
        for (pair, tally) in coverage.pairs.iter().filter(|(p, _)| p.scenario == name) {
            suite.add_property(quick_junit::Property::new(
                format!("coverage {} x {}", pair.held, pair.event),
                format!("{} runs, {} failed", tally.runs, tally.failed),
            ));
        }
    }
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
    let mut report = shard::merge("taskgate-gate", &shards)?;
    // The whole plan ran across the shards: its coverage can be told now.
    let set = scenario_set(args)?;
    let mut runs = Vec::new();
    for suite in &report.test_suites {
        for case in &suite.test_cases {
            let (_, token) = Token::parse(case.name.as_str(), &set)?;
            let passed = matches!(case.status, quick_junit::TestCaseStatus::Success { .. });
            runs.push((token, passed));
        }
    }
    // Only the scenarios the shards ran (a gate may have been cut with --only).
    let ran: Vec<_> = set
        .into_iter()
        .filter(|s| runs.iter().any(|(t, _)| t.scenario == s.name))
        .collect();
    let coverage = coverage::coverage(&ran, runs.iter().map(|(t, p)| (t, *p)));
    add_coverage(&mut report, &coverage);
    print!("{}", coverage::render(&coverage));
    std::fs::write(&args.junit, report.to_string()?)
        .with_context(|| format!("writing {}", args.junit.display()))?;
    let failed = report.failures + report.errors;
    println!(
        "gate: {} shards merged into {}: {} runs",
        shards.len(),
        args.junit.display(),
        report.tests
    );
    println!("{} passed, {failed} failed", report.tests - failed);
    anyhow::ensure!(
        failed == 0,
        "the release gate failed: {failed} runs violated invariants"
    );
    Ok(())
}
