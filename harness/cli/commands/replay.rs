//! `taskgate replay [--scenario FILE] TOKEN`: runs exactly the case a failure printed, once or
//! `--repeat N` times in one session (the determinism check: every
//! repetition must reach the same verdict).

use super::html_report::ReportArgs;
use super::interrupt::interrupted;
use super::lab_session::{interrupted_after, Session};
use std::path::PathBuf;
use taskgate_scenarios::gate::{self, replay_verdict, run_all, Runner, StopAt};
use taskgate_scenarios::{catalogue, RunReport, RunVerdict, Token};

#[derive(clap::Args)]
// Replay draws its run whatever its verdict, where the gate draws only failures.
#[command(mut_arg("report", |report| report.help(
    "Write an HTML report of the run, passing or not (the last one with --repeat), into DIR"
)))]
pub struct Args {
    /// The token a failing run printed, e.g. `sidecar-stop@tr=1.4/up=2/stop=0/first=tr/swaps=`.
    pub token: String,
    /// The scenario file the token's scenario is in (default: the catalogue).
    #[arg(long = "scenario", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Run the case this many times and require one verdict from all of them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    #[command(flatten)]
    pub html: ReportArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let set = match &args.file {
        Some(path) => catalogue::load_file(path)?,
        None => catalogue::catalogue(),
    };
    let run = Token::parse(&args.token, &set)?;
    let session = Session::open()?;
    let lab = session.lab()?;
    let mut runner = session.runner(&lab);
    let html = args.html.prepare(true)?;
    runner.report_data = html.as_ref().map(|h| h.keeper());
    if args.repeat == 1 {
        let mut report = runner.run(&run);
        // A run a signal cut short has no verdict (its agents may have
        // taken the terminal's Ctrl-C too): no report of it either.
        if interrupted() {
            return Err(interrupted_after(0, 1));
        }
        if let Some(html) = &html {
            html.settle(std::slice::from_mut(&mut report));
            html.write(
                &[run.scenario],
                std::slice::from_ref(&report),
                None,
                report.duration,
                |_| true,
            )?;
        }
        return show(&report);
    }
    // A hundred failing runs' data dirs would only bury the one that matters.
    runner.keep_failures = false;
    // The report draws the last run: only it keeps its data.
    let keeper = runner.report_data.take();
    let repeats = vec![run.clone(); args.repeat as usize - 1];
    let mut i = 0;
    let mut each = |report: &RunReport| {
        i += 1;
        let verdict = replay_verdict(report);
        crate::commands::say!("[{i}/{}] {verdict} ({:.2?})", args.repeat, report.duration);
    };
    let mut ran = run_all(&runner, &repeats, StopAt::End, &interrupted, &mut each);
    if !interrupted() {
        runner.report_data = keeper;
        let mut last = runner.run(&run);
        if let Some(html) = &html {
            html.settle(std::slice::from_mut(&mut last));
        }
        each(&last);
        ran.reports.push(last);
    }
    if interrupted() {
        return Err(interrupted_after(ran.reports.len(), args.repeat as usize));
    }
    let verdicts = gate::verdicts(&ran.reports);
    crate::commands::say!(
        "{}: {} runs, {} distinct verdicts:",
        run.token(),
        args.repeat,
        verdicts.len()
    );
    for (verdict, (count, _)) in &verdicts {
        crate::commands::say!("  {count:>4}/{}  {verdict}", args.repeat);
    }
    if let (Some(html), Some(last)) = (&html, ran.reports.last()) {
        html.write(
            &[run.scenario],
            std::slice::from_ref(last),
            None,
            last.duration,
            |_| true,
        )?;
    }
    if verdicts.len() == 1 {
        return Ok(());
    }
    for (_, report) in verdicts.values() {
        crate::commands::say!("{}", report.explain());
    }
    anyhow::bail!(
        "the same token reached {} different verdicts",
        verdicts.len()
    )
}

fn show(report: &RunReport) -> anyhow::Result<()> {
    // A known bug's run passes, but shows what the bug broke.
    if report.verdict() == RunVerdict::Pass {
        crate::commands::say!(
            "PASS {}  ({}) in {:.2?}",
            report.token,
            report.description,
            report.duration
        );
        for (i, e) in report.history.iter().enumerate() {
            crate::commands::say!("    #{i:<3} {}", taskgate_scenarios::report::describe(e));
        }
        Ok(())
    } else {
        crate::commands::say!("{}", report.explain());
        anyhow::ensure!(report.passed(), "replayed run fails");
        Ok(())
    }
}
