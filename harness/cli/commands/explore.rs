//! `taskgate explore SCENARIO` (or `--scenario FILE [SCENARIO]`): every
//! case of one scenario. For a stop race, every ordering of "stop delivered
//! at update boundary q" x "task runner parked at boundary p", plus PCT
//! random schedules from a seed; for a fault scenario, each of its fault
//! cases. On real executors under the exec oracle, or on the fake driver.

use super::html_report::ReportArgs;
use super::interrupt::interrupted;
use super::lab_session::{interrupted_after, print_failures, JobsArgs, Progress, Session};
use anyhow::Context;
use std::path::PathBuf;
use taskgate_scenarios::catalogue;
use taskgate_scenarios::fake_run::{fake_plan, FakeRunner};
use taskgate_scenarios::gate::{run_jobs, Ran, StopAt};
use taskgate_scenarios::lab_run::LabWorkshop;
use taskgate_scenarios::model::Kind;
use taskgate_scenarios::plan::Run;
use taskgate_scenarios::{RunReport, RunVerdict};

#[derive(clap::Args)]
pub struct Args {
    /// A scenario from the catalogue (`taskgate gate --list` shows them),
    /// or from the --scenario file (needed if it holds several).
    #[arg(value_name = "SCENARIO", required_unless_present = "file")]
    pub name: Option<String>,
    /// A scenario file to take the scenario from instead of the catalogue.
    #[arg(long = "scenario", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Random PCT schedules to run after a stop race's full enumeration
    /// [default: 20] (a fault scenario's cases are listed: refused there).
    #[arg(long)]
    pub random: Option<u32>,
    /// Seed of the random schedules [default: 1] (a fault scenario has
    /// none: refused there).
    #[arg(long)]
    pub seed: Option<u64>,
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
    #[command(flatten)]
    pub jobs: JobsArgs,
}

/// Random schedules a stop race's exploration draws when not told.
const DEFAULT_RANDOM: u32 = 20;
/// The seed of the random schedules when none is given.
const DEFAULT_SEED: u64 = 1;

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
    if let Some(path) = &args.failing_tokens {
        super::lab_session::check_report_path("--failing-tokens", path)?;
    }
    if let Kind::Faults(_) = &scenario.kind {
        let given: Vec<&str> = [
            ("--random", args.random.is_some()),
            ("--seed", args.seed.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect();
        anyhow::ensure!(
            given.is_empty(),
            "only a stop race has random schedules for {}; {} is a fault scenario, whose \
             cases are listed (it runs them all)",
            given.join(" and "),
            scenario.name
        );
    }
    let random = args.random.unwrap_or(DEFAULT_RANDOM);
    let all = scenario.runs(random, args.seed.unwrap_or(DEFAULT_SEED));
    let stop = if args.first_failure {
        StopAt::FirstFailure
    } else {
        StopAt::End
    };
    let runs = match args.driver {
        Driver::Real => all.iter().collect(),
        Driver::Fake => fake_runs(&scenario.name, &all)?,
    };
    let jobs = args.jobs.jobs();
    let mut progress = Progress::new(&scenario.name, runs.len())?;
    let each = |r: &RunReport| progress.finished(r);
    let mut html = None;
    let mut confirming = None;
    let mut ran = match args.driver {
        Driver::Real => {
            let session = Session::open()?;
            html = args.html.prepare(false)?;
            let mut workshop = session.workshop();
            workshop.keep_failures = !args.expect_violation;
            workshop.report_data = html.as_ref().map(|h| h.keeper());
            run_jobs(&workshop, jobs, &runs, stop, &interrupted, each)?
        }
        Driver::Fake => {
            anyhow::ensure!(
                args.html.report.is_none(),
                "--report needs the real driver: a fake run keeps no data to link"
            );
            // Root confirms each failing schedule on the real executor;
            // the lab's mount namespace is entered before any thread exists.
            if nix::unistd::geteuid().is_root() {
                confirming = Some(Session::open()?);
            }
            let runtime = super::runtime()?;
            let runner = FakeRunner { runtime: &runtime };
            run_jobs(&runner, jobs, &runs, stop, &interrupted, each).unwrap_or_else(|n| match n {})
        }
    };
    progress.finish();
    if let Some(html) = &html {
        html.settle(&mut ran.reports);
    }
    if interrupted() {
        return Err(interrupted_after(ran.reports.len(), runs.len()));
    }
    let failed = ran.failed();
    if args.verbose {
        // Known bugs' runs are shown below, with the failures.
        for r in ran
            .reports
            .iter()
            .filter(|r| r.verdict() == RunVerdict::Pass)
        {
            crate::commands::say!("{}", r.explain());
        }
    }
    print_failures(&ran.reports, 3);
    // After the fake's failures are shown: a replay that passes is then
    // the fake's model against what it did.
    if args.driver == Driver::Fake && failed > 0 {
        let mut workshop = confirming.as_ref().map(Session::workshop);
        if let Some(workshop) = &mut workshop {
            workshop.keep_failures = !args.expect_violation;
        }
        confirm(&ran, &runs, workshop.as_ref(), jobs)?;
    }
    if let Some(html) = &html {
        html.write(&[&scenario], &ran.reports, None, ran.elapsed, |r| {
            !r.passed()
        })?;
    }
    if let Some(path) = &args.failing_tokens {
        let text: String = (ran.failing_tokens().iter())
            .map(|t| format!("{t}\n"))
            .collect();
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let unit = scenario.case_noun();
    let elapsed = ran.elapsed;
    crate::commands::say!(
        "{}: {} {unit}s run in {elapsed:.2?} ({:.1} {unit}s/s), {failed} failing",
        scenario.name,
        ran.reports.len(),
        ran.reports.len() as f64 / elapsed.as_secs_f64().max(1e-9),
    );
    if random > 0 && unit == "schedule" {
        crate::commands::say!("{}", pct_guarantee());
    }
    if let Some(first) = &ran.first_failure {
        crate::commands::say!(
            "first failure at {unit} {} of {}, after {:.2?}",
            first.position,
            runs.len(),
            first.after
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

/// The cases of a scenario the fake driver can run. A scenario none of
/// whose cases it can is refused, with why; one it can run only in part
/// says what it leaves to the real executor.
fn fake_runs<'a, 's>(name: &str, all: &'a [Run<'s>]) -> anyhow::Result<Vec<&'a Run<'s>>> {
    let (runs, cannot): (Vec<&Run<'s>>, Vec<&Run<'s>>) =
        all.iter().partition(|run| fake_plan(run).is_ok());
    let Some(why) = cannot.first().and_then(|run| fake_plan(run).err()) else {
        return Ok(runs);
    };
    anyhow::ensure!(
        !runs.is_empty(),
        "the fake driver cannot run {name}: it cannot {why}; explore it with --driver real"
    );
    crate::commands::say!(
        "{name}: the fake driver runs {} of its {} cases; it cannot run the rest ({why}): \
         explore them with --driver real",
        runs.len(),
        all.len()
    );
    Ok(runs)
}

/// A schedule that fails on the fake driver counts once the real executor,
/// under the kernel's exec oracle, fails it too: the fake is a model of the
/// executor, and a model can be wrong. With root (a `workshop`), each is
/// replayed there, and one the real executor passes is a harness bug, an
/// error; without, they are reported unconfirmed.
fn confirm(
    ran: &Ran,
    runs: &[&Run<'_>],
    workshop: Option<&LabWorkshop>,
    jobs: usize,
) -> anyhow::Result<()> {
    let failing: Vec<&Run<'_>> = (runs.iter().zip(&ran.reports))
        .filter(|(_, report)| !report.passed())
        .map(|(run, _)| *run)
        .collect();
    let Some(workshop) = workshop else {
        crate::commands::say!(
            "{} failing on the fake driver, unconfirmed: as root, explore replays each on the \
             real executor before it counts (or: sudo taskgate replay TOKEN)",
            failing.len()
        );
        return Ok(());
    };
    let real = run_jobs(workshop, jobs, &failing, StopAt::End, &interrupted, |_| {})?;
    if interrupted() {
        return Err(interrupted_after(real.reports.len(), failing.len()));
    }
    let fake_only: Vec<String> = (real.reports.iter())
        .filter(|report| report.passed())
        .map(|report| report.token.to_string())
        .collect();
    anyhow::ensure!(
        fake_only.is_empty(),
        "the real executor passes {} of the {} schedules the fake driver fails: the fake's \
         model is wrong there (it runs no program: its tasks exit 0 or run until stopped, \
         whatever their commands do), or the harness has a bug: {}",
        fake_only.len(),
        failing.len(),
        fake_only.join(" ")
    );
    crate::commands::say!(
        "{} failing on the fake driver, each confirmed on the real executor",
        failing.len()
    );
    Ok(())
}
