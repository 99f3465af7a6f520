//! How fast the search runs, in a build with fault points: the whole gate
//! (or `--gate-only` scenarios) at one run at a time and at two, the same
//! binary one after the other with its verdict required; and the fake
//! driver's schedules per second over the report's scenario, at 1 and 2
//! jobs. A build without fault points has no search to time.

use super::round3;
use serde_json::json;
use std::time::Duration;

/// Runs done in a time, at some number of jobs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Throughput {
    pub jobs: usize,
    pub runs: usize,
    pub elapsed: Duration,
}

impl Throughput {
    pub fn per_sec(&self) -> f64 {
        self.runs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn to_json(self) -> serde_json::Value {
        json!({
            "jobs": self.jobs,
            "runs": self.runs,
            "elapsed_s": round3(self.elapsed.as_secs_f64()),
            "per_sec": round3(self.per_sec()),
        })
    }
}

/// The gate's and the fake tier's throughput, at 1 and 2 jobs.
pub(super) struct Search {
    pub gate: Vec<Throughput>,
    pub fake: Vec<Throughput>,
}

impl Search {
    /// The last figure over the first: what the second job bought.
    fn speedup(figures: &[Throughput]) -> f64 {
        figures.last().unwrap().per_sec() / figures[0].per_sec()
    }

    pub fn print(&self, out: &mut dyn std::io::Write) {
        crate::commands::say_to!(out, "search (the harness's own speed, this build)");
        for (what, unit, figures) in [
            ("gate, real executors", "runs", &self.gate),
            ("fake driver, sidecar-stop", "schedules", &self.fake),
        ] {
            for t in figures {
                crate::commands::say_to!(
                    out,
                    "  {what:<26} --jobs {}: {} {unit} in {:.2} s, {:.1} {unit}/s",
                    t.jobs,
                    t.runs,
                    t.elapsed.as_secs_f64(),
                    t.per_sec()
                );
            }
            crate::commands::say_to!(
                out,
                "  {what:<26} --jobs {} / --jobs {}: {:.2}x",
                figures.last().unwrap().jobs,
                figures[0].jobs,
                Search::speedup(figures)
            );
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        let each = |figures: &[Throughput]| {
            json!({
                "runs": figures.iter().map(|t| t.to_json()).collect::<Vec<_>>(),
                "speedup": round3(Search::speedup(figures)),
            })
        };
        json!({ "gate": each(&self.gate), "fake": each(&self.fake) })
    }
}

#[cfg(feature = "failpoints")]
pub(super) use measure::measure;

/// `--gate-only`'s parser: a scenario of the gate's, refused as the
/// command line is read rather than after the bench's other figures.
#[cfg(feature = "failpoints")]
pub(super) fn scenario_name(name: &str) -> Result<String, String> {
    let scenarios = taskgate_scenarios::catalogue::catalogue();
    taskgate_scenarios::catalogue::find(&scenarios, name)
        .map(|s| s.name.clone())
        .map_err(|unknown| unknown.to_string())
}

/// Random schedules the fake driver is timed on unless `--fake-schedules`.
#[cfg(feature = "failpoints")]
pub(super) const FAKE_SCHEDULES: u32 = 2000;

/// `--fake-schedules`'s parser: a count, in a build with a fake driver.
#[cfg(feature = "failpoints")]
pub(super) fn fake_schedules(given: &str) -> Result<u32, String> {
    given
        .parse()
        .map_err(|err: std::num::ParseIntError| err.to_string())
}

/// A build without fault points has no fake driver to time.
#[cfg(not(feature = "failpoints"))]
pub(super) fn fake_schedules(_: &str) -> Result<u32, String> {
    Err("a build without fault points has no fake driver to time".into())
}

/// A build without fault points times no gate.
#[cfg(not(feature = "failpoints"))]
pub(super) fn scenario_name(name: &str) -> Result<String, String> {
    Err(format!(
        "{name}: a build without fault points has no gate to time"
    ))
}

#[cfg(feature = "failpoints")]
mod measure {
    use super::{Search, Throughput};
    use crate::commands::interrupt::interrupted;
    use anyhow::{ensure, Context};
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::time::Instant;
    use taskgate_scenarios::catalogue::{self, catalogue};
    use taskgate_scenarios::fake_run::FakeRunner;
    use taskgate_scenarios::gate::{self, run_jobs, Gate, StopAt};
    use taskgate_scenarios::shard::Shard;

    /// The gate's random schedules per stop race, as CI runs it.
    const GATE_RANDOM: u32 = 10;

    /// The job counts each figure is measured at, side by side.
    const JOBS: [usize; 2] = [1, 2];

    /// Times the gate over `only` (every scenario if empty) as `taskgate
    /// gate` runs it (its labs where a lab puts them, not in `scratch`),
    /// and `fake_schedules` random schedules of the report's scenario on
    /// the fake driver, each at every count of [`JOBS`].
    pub fn measure(scratch: &Path, only: &[String], fake_schedules: u32) -> anyhow::Result<Search> {
        let selected = gate::select(catalogue(), only)?;
        let planned = Gate::new(&selected, GATE_RANDOM, 1, Shard::WHOLE)
            .plan
            .len();
        let me = std::env::current_exe().context("locating the taskgate binary")?;
        let mut gates = Vec::new();
        for jobs in JOBS {
            let junit = scratch.join(format!("gate-{jobs}.xml"));
            let mut command = Command::new(&me);
            command
                .args(["gate", "--random", &GATE_RANDOM.to_string()])
                .args(["--jobs", &jobs.to_string()])
                .arg("--junit")
                .arg(&junit)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for name in only {
                command.args(["--only", name]);
            }
            let started = Instant::now();
            let out = command.output().context("running the gate")?;
            let elapsed = started.elapsed();
            // A terminal's Ctrl-C ended the gate too: an interrupt, not a
            // failing build; a SIGTERM to the bench alone stops it here.
            ensure!(!interrupted(), "interrupted: no figures");
            // A failing run's report is all that is left of it: the scratch
            // dir with its kept data goes when the bench ends.
            let failures: String = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|line| !line.starts_with('[') || !line.contains("] pass "))
                .map(|line| format!("{line}\n"))
                .collect();
            ensure!(
                out.status.success(),
                "the gate at --jobs {jobs} failed ({}): a failing build has no speed to \
                 report\n{failures}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            gates.push(Throughput {
                jobs,
                runs: planned,
                elapsed,
            });
        }
        let all = catalogue();
        let scenario = catalogue::find(&all, "sidecar-stop")?;
        let runs = scenario.runs(fake_schedules, 1);
        let runs: Vec<_> = runs.iter().collect();
        let runtime = crate::commands::runtime()?;
        let runner = FakeRunner { runtime: &runtime };
        let mut fakes = Vec::new();
        for jobs in JOBS {
            let ran = run_jobs(&runner, jobs, &runs, StopAt::End, &interrupted, |_| {})
                .unwrap_or_else(|n| match n {});
            ensure!(!interrupted(), "interrupted: no figures");
            ensure!(
                ran.failed() == 0,
                "{} fake schedules failed at --jobs {jobs}: a failing build has no speed to \
                 report",
                ran.failed()
            );
            fakes.push(Throughput {
                jobs,
                runs: ran.reports.len(),
                elapsed: ran.elapsed,
            });
        }
        Ok(Search {
            gate: gates,
            fake: fakes,
        })
    }
}
