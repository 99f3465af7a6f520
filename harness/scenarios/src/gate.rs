//! The gate's one home: the [`Runner`] the lab and the fake driver both
//! are, the run loop over a plan, a whole gate or one shard of it with its
//! JUnit report and coverage, shards merged back, and a replay's verdicts.
//! The CLI's `gate`, `explore` and `replay` parse their arguments, call
//! these and print.
//!
//! Runs are independent (each has its own data dir, engine and fault
//! registry): [`run_all`] runs them one after another on one runner, and
//! [`run_jobs`] (`--jobs N`) on N workers, each with its own runner and
//! lab, taking runs from one queue. Both hand the reports on in plan
//! order, so nothing above them can tell the two apart.

use crate::catalogue::{self, UnknownScenario};
use crate::coverage::{self, Coverage};
use crate::model::Scenario;
use crate::plan::{self, Run, Token, TokenError};
use crate::report::{junit, RunReport, RunVerdict};
use crate::shard::{self, Shard, ShardError};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The JUnit report's name, a whole gate's or a merged one's.
pub const JUNIT_NAME: &str = "taskgate-gate";

/// Runs one planned case and judges it. A run the harness could not carry
/// out is a failing report, never an error: one broken run must not stop
/// the gate.
pub trait Runner {
    fn run(&self, run: &Run<'_>) -> RunReport;
}

/// When a loop stops before its plan's end (an interruption aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopAt {
    /// Run the whole plan.
    End,
    /// At the first failing run: the verdict is known.
    FirstFailure,
}

/// The first failing run of a loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstFailure {
    /// 1-based, in the loop's runs.
    pub position: usize,
    /// Since the loop started.
    pub after: Duration,
}

/// What a loop ran: its reports, in plan order.
#[derive(Debug)]
pub struct Ran {
    pub reports: Vec<RunReport>,
    pub first_failure: Option<FirstFailure>,
    pub elapsed: Duration,
}

impl Ran {
    pub fn failed(&self) -> usize {
        self.reports.iter().filter(|r| !r.passed()).count()
    }

    /// The failing runs' replay tokens, sorted: two explorations of one
    /// build can then be compared.
    pub fn failing_tokens(&self) -> Vec<String> {
        let mut tokens: Vec<String> = (self.reports.iter())
            .filter(|r| !r.passed())
            .map(|r| r.token.to_string())
            .collect();
        tokens.sort();
        tokens
    }
}

/// Runs `runs` one after another on `runner` and hands each report to
/// `each` as it comes, until the plan's end, `stop`, or `interrupted()`
/// (asked after each run, so the run in progress always ends and is
/// judged).
pub fn run_all<'r, 's: 'r>(
    runner: &dyn Runner,
    runs: impl IntoIterator<Item = &'r Run<'s>>,
    stop: StopAt,
    interrupted: &dyn Fn() -> bool,
    mut each: impl FnMut(&RunReport),
) -> Ran {
    let mut collector = Collector::new(stop, &mut each);
    for (index, run) in runs.into_iter().enumerate() {
        collector.take(index, runner.run(run));
        if collector.stopped() || interrupted() {
            break;
        }
    }
    collector.finish()
}

/// Where each worker of [`run_jobs`] gets its runner. `serve` makes one on
/// the worker's own thread and lends it to `work` for the worker's life: a
/// lab's runner owns its marked filesystem, data dirs, cgroup subtree and
/// fault logs, so no two workers share any of them.
pub trait Workshop: Sync {
    type Error: std::error::Error + Send;
    fn serve(&self, work: &mut dyn FnMut(&dyn Runner)) -> Result<(), Self::Error>;
}

/// Runs `runs` on `jobs` workers at once, each taking the next run of the
/// plan as it finishes one, and hands the reports to `each` in plan order:
/// what [`run_all`] would hand on, verdict for verdict. At
/// `StopAt::FirstFailure`, no run after a failing one starts; those started
/// before it was known end, and are dropped. Once `interrupted()`, no run
/// starts; those in progress end and are judged.
pub fn run_jobs<W: Workshop>(
    workshop: &W,
    jobs: usize,
    runs: &[&Run<'_>],
    stop: StopAt,
    interrupted: &(dyn Fn() -> bool + Sync),
    mut each: impl FnMut(&RunReport),
) -> Result<Ran, W::Error> {
    let (queue_in, queue) = crossbeam_channel::unbounded();
    for item in runs.iter().enumerate() {
        let _ = queue_in.send(item);
    }
    drop(queue_in);
    // The first failing run's index, once a worker has seen one.
    let failed_at = AtomicUsize::new(usize::MAX);
    let (done_in, done) = std::sync::mpsc::channel::<(usize, RunReport)>();
    let mut collector = Collector::new(stop, &mut each);
    let served = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs.max(1))
            .map(|_| {
                let (queue, done_in, failed_at) = (queue.clone(), done_in.clone(), &failed_at);
                scope.spawn(move || {
                    workshop.serve(&mut |runner| {
                        for (index, run) in queue.iter() {
                            if index > failed_at.load(Ordering::SeqCst) || interrupted() {
                                break;
                            }
                            let report = runner.run(run);
                            if !report.passed() && stop == StopAt::FirstFailure {
                                failed_at.fetch_min(index, Ordering::SeqCst);
                            }
                            if done_in.send((index, report)).is_err() {
                                break;
                            }
                        }
                    })
                })
            })
            .collect();
        drop(done_in);
        for (index, report) in done {
            collector.take(index, report);
        }
        let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        joined
    });
    for result in served {
        match result {
            Ok(served) => served?,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    Ok(collector.finish())
}

/// Puts reports that come in any order back in plan order, hands them on,
/// and keeps the loop's tally.
struct Collector<'e> {
    started: Instant,
    stop: StopAt,
    each: &'e mut dyn FnMut(&RunReport),
    /// Handed on, in plan order.
    reports: Vec<RunReport>,
    /// Come in ahead of a run still going.
    waiting: BTreeMap<usize, RunReport>,
    first_failure: Option<FirstFailure>,
}

impl<'e> Collector<'e> {
    fn new(stop: StopAt, each: &'e mut dyn FnMut(&RunReport)) -> Self {
        Collector {
            started: Instant::now(),
            stop,
            each,
            reports: Vec::new(),
            waiting: BTreeMap::new(),
            first_failure: None,
        }
    }

    /// The report of the plan's run `index`.
    fn take(&mut self, index: usize, report: RunReport) {
        self.waiting.insert(index, report);
        while !self.stopped() {
            let Some(report) = self.waiting.remove(&self.reports.len()) else {
                break;
            };
            (self.each)(&report);
            if !report.passed() && self.first_failure.is_none() {
                self.first_failure = Some(FirstFailure {
                    position: self.reports.len() + 1,
                    after: self.started.elapsed(),
                });
            }
            self.reports.push(report);
        }
    }

    /// Whether the loop's verdict is known, at its first failure.
    fn stopped(&self) -> bool {
        self.stop == StopAt::FirstFailure && self.first_failure.is_some()
    }

    fn finish(self) -> Ran {
        Ran {
            reports: self.reports,
            first_failure: self.first_failure,
            elapsed: self.started.elapsed(),
        }
    }
}

/// The scenarios `only` names, in the set's order (all of them if `only`
/// is empty); a name the set does not hold is an error.
pub fn select(set: Vec<Scenario>, only: &[String]) -> Result<Vec<Scenario>, UnknownScenario> {
    for name in only {
        catalogue::find(&set, name)?;
    }
    Ok(set
        .into_iter()
        .filter(|s| only.is_empty() || only.contains(&s.name))
        .collect())
}

/// A gate: the whole plan of its scenarios, and the shard of it this
/// machine runs.
pub struct Gate<'s> {
    pub scenarios: &'s [Scenario],
    /// The whole plan, every shard's runs included.
    pub plan: Vec<Run<'s>>,
    pub shard: Shard,
}

/// One scenario's line of the gate's summary.
pub struct ScenarioTally<'s> {
    pub scenario: &'s Scenario,
    pub runs: usize,
    pub failed: usize,
}

impl<'s> Gate<'s> {
    pub fn new(scenarios: &'s [Scenario], random: u32, seed: u64, shard: Shard) -> Gate<'s> {
        Gate {
            scenarios,
            plan: plan::plan(scenarios, random, seed),
            shard,
        }
    }

    /// This shard's runs, in plan order.
    pub fn mine(&self) -> Vec<&Run<'s>> {
        (self.plan.iter().enumerate())
            .filter(|(i, _)| self.shard.takes(*i))
            .map(|(_, run)| run)
            .collect()
    }

    /// Runs this shard's runs on `jobs` workers.
    pub fn run<W: Workshop>(
        &self,
        workshop: &W,
        jobs: usize,
        stop: StopAt,
        interrupted: &(dyn Fn() -> bool + Sync),
        each: impl FnMut(&RunReport),
    ) -> Result<Ran, W::Error> {
        run_jobs(workshop, jobs, &self.mine(), stop, interrupted, each)
    }

    /// The coverage of what ran (the reports of [`Gate::run`]).
    pub fn coverage(&self, reports: &[RunReport]) -> Coverage {
        let mine = self.mine();
        coverage::coverage(
            self.scenarios,
            mine.into_iter()
                .zip(reports)
                .map(|(run, report)| (run, report.passed())),
        )
    }

    /// The JUnit report of what ran: one case per run, the coverage of a
    /// whole gate (a shard's is told once merged), and the stamp of the
    /// plan it was cut from.
    pub fn junit(&self, reports: &[RunReport], coverage: &Coverage) -> quick_junit::Report {
        let mut xml = junit(reports, JUNIT_NAME);
        if self.shard == Shard::WHOLE {
            add_coverage(&mut xml, coverage);
        }
        let plan_tokens: Vec<String> = self.plan.iter().map(|r| r.token().to_string()).collect();
        shard::stamp(&mut xml, self.shard, &plan_tokens);
        xml
    }

    /// Each scenario's runs and failures, in the scenarios' order.
    pub fn tallies(&self, reports: &[RunReport]) -> Vec<ScenarioTally<'s>> {
        (self.scenarios.iter())
            .map(|scenario| {
                let runs: Vec<_> = (reports.iter())
                    .filter(|r| r.token.scenario == scenario.name)
                    .collect();
                ScenarioTally {
                    scenario,
                    runs: runs.len(),
                    failed: runs.iter().filter(|r| !r.passed()).count(),
                }
            })
            .collect()
    }
}

/// Each scenario's suite carries its pairs: which ran, with what verdict.
fn add_coverage(xml: &mut quick_junit::Report, coverage: &Coverage) {
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

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error(transparent)]
    Token(#[from] TokenError),
}

/// Shards joined into one gate.
pub struct Merged {
    /// The whole plan's JUnit report, with its coverage.
    pub report: quick_junit::Report,
    pub coverage: Coverage,
}

/// Joins shard reports (`(file name, XML)`) of a gate over `set` into one
/// report of the whole plan, checked run by run (see [`shard::merge`]).
pub fn merge(set: &[Scenario], shards: &[(String, String)]) -> Result<Merged, MergeError> {
    let mut report = shard::merge(JUNIT_NAME, shards)?;
    // The whole plan ran across the shards: its coverage can be told now.
    let mut runs = Vec::new();
    for suite in &report.test_suites {
        for case in &suite.test_cases {
            let run = Token::parse(case.name.as_str(), set)?;
            let passed = matches!(case.status, quick_junit::TestCaseStatus::Success { .. });
            runs.push((run, passed));
        }
    }
    // Only the scenarios the shards ran (a gate may have been cut with --only).
    let ran: Vec<Scenario> = (set.iter())
        .filter(|s| runs.iter().any(|(r, _)| r.scenario.name == s.name))
        .cloned()
        .collect();
    let coverage = coverage::coverage(&ran, runs.iter().map(|(r, p)| (r, *p)));
    add_coverage(&mut report, &coverage);
    Ok(Merged { report, coverage })
}

/// A replay's verdict: pass, or which invariants broke and whether any
/// other problem did (problem texts carry pids and paths, which differ
/// between repetitions of one run).
pub fn replay_verdict(report: &RunReport) -> String {
    if report.passed() {
        return report.verdict().to_string();
    }
    let mut broken: Vec<&str> = report.violations.iter().map(|v| v.invariant.id()).collect();
    broken.sort_unstable();
    broken.dedup();
    let problems = if report.problems.is_empty() {
        ""
    } else {
        " + problems"
    };
    format!("{} [{}]{problems}", RunVerdict::Fail, broken.join("; "))
}

/// Repetitions of one run grouped by verdict: how many reached each, and
/// the first report of each.
pub fn verdicts(reports: &[RunReport]) -> BTreeMap<String, (u32, &RunReport)> {
    let mut verdicts: BTreeMap<String, (u32, &RunReport)> = BTreeMap::new();
    for report in reports {
        verdicts
            .entry(replay_verdict(report))
            .or_insert((0, report))
            .0 += 1;
    }
    verdicts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::catalogue;
    use std::sync::Mutex;

    /// Fails the runs whose token is listed, and records what it ran.
    struct Scripted {
        failing: Vec<String>,
        ran: Mutex<Vec<String>>,
    }

    impl Scripted {
        fn failing(tokens: &[String]) -> Scripted {
            Scripted {
                failing: tokens.to_vec(),
                ran: Mutex::default(),
            }
        }

        fn ran(&self) -> Vec<String> {
            self.ran.lock().unwrap().clone()
        }
    }

    impl Workshop for Scripted {
        type Error = std::convert::Infallible;

        fn serve(&self, work: &mut dyn FnMut(&dyn Runner)) -> Result<(), Self::Error> {
            work(self);
            Ok(())
        }
    }

    impl Runner for Scripted {
        fn run(&self, run: &Run<'_>) -> RunReport {
            let token = run.token();
            self.ran.lock().unwrap().push(token.to_string());
            let failed = self.failing.contains(&token.to_string());
            RunReport {
                token,
                description: run.describe(),
                violations: Vec::new(),
                problems: if failed {
                    vec!["scripted".into()]
                } else {
                    vec![]
                },
                expected: Vec::new(),
                history: Vec::new(),
                duration: Duration::ZERO,
                kept: None,
            }
        }
    }

    fn selected(names: &[&str]) -> Vec<Scenario> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        select(catalogue(), &names).unwrap()
    }

    #[test]
    fn the_loop_yields_reports_in_plan_order_and_stops_as_asked() {
        let set = selected(&["sidecar-stop", "agent-kill"]);
        let plan = plan::plan(&set, 2, 1);
        let tokens: Vec<String> = plan.iter().map(|r| r.token().to_string()).collect();
        let runner = Scripted::failing(&tokens[3..5]);
        let mut seen = Vec::new();
        let ran = run_all(&runner, &plan, StopAt::End, &|| false, |r| {
            seen.push(r.token.to_string())
        });
        assert_eq!(seen, tokens);
        assert_eq!(runner.ran(), tokens);
        assert_eq!(ran.failed(), 2);
        assert_eq!(ran.first_failure.as_ref().unwrap().position, 4);
        let mut failing = tokens[3..5].to_vec();
        failing.sort();
        assert_eq!(ran.failing_tokens(), failing);

        let fast = run_all(&runner, &plan, StopAt::FirstFailure, &|| false, |_| {});
        assert_eq!(fast.reports.len(), 4, "stops at the first failure");
        let interrupted = run_all(&runner, &plan, StopAt::End, &|| true, |_| {});
        assert_eq!(interrupted.reports.len(), 1, "the run in progress ends");
    }

    /// Two workers hand on what one runner would: the same reports in plan
    /// order, the same first failure, and at `FirstFailure` no run after
    /// it handed on (a run started before it was known is dropped).
    #[test]
    fn jobs_hand_on_what_one_runner_would() {
        let set = selected(&["sidecar-stop", "agent-kill"]);
        let plan = plan::plan(&set, 2, 1);
        let runs: Vec<&Run<'_>> = plan.iter().collect();
        let tokens: Vec<String> = plan.iter().map(|r| r.token().to_string()).collect();
        let runner = Scripted::failing(&tokens[3..5]);
        let serial = run_all(&runner, &plan, StopAt::End, &|| false, |_| {});
        for jobs in [1, 2, 3] {
            let mut seen = Vec::new();
            let scripted = Scripted::failing(&tokens[3..5]);
            let ran = run_jobs(&scripted, jobs, &runs, StopAt::End, &|| false, |r| {
                seen.push(r.token.to_string())
            })
            .unwrap();
            assert_eq!(seen, tokens, "{jobs} jobs");
            let mut all_ran = scripted.ran();
            all_ran.sort();
            let mut planned = tokens.clone();
            planned.sort();
            assert_eq!(all_ran, planned, "{jobs} jobs ran each run once");
            assert_eq!(ran.failing_tokens(), serial.failing_tokens());
            assert_eq!(ran.first_failure.unwrap().position, 4);

            let fast = run_jobs(
                &scripted,
                jobs,
                &runs,
                StopAt::FirstFailure,
                &|| false,
                |_| {},
            )
            .unwrap();
            let handed: Vec<String> = fast.reports.iter().map(|r| r.token.to_string()).collect();
            assert_eq!(handed, tokens[..4], "{jobs} jobs stop at the first failure");
            let none = run_jobs(&scripted, jobs, &runs, StopAt::End, &|| true, |_| {}).unwrap();
            assert!(none.reports.is_empty(), "interrupted before any run starts");
        }
    }

    #[test]
    fn unknown_names_are_refused_and_the_selection_keeps_the_sets_order() {
        assert!(select(catalogue(), &["nope".into()]).is_err());
        let set = selected(&["agent-kill", "sidecar-stop"]);
        let all = catalogue();
        let order: Vec<&str> = (all.iter())
            .map(|s| s.name.as_str())
            .filter(|n| ["agent-kill", "sidecar-stop"].contains(n))
            .collect();
        assert_eq!(
            set.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            order
        );
    }

    /// Shards run on their own and merged give the whole gate's runs,
    /// verdicts and coverage.
    #[test]
    fn shards_merge_into_the_whole_gate() {
        let set = selected(&["sidecar-stop", "agent-kill", "held-runner-stop"]);
        let whole = Gate::new(&set, 2, 7, Shard::WHOLE);
        let failing = vec![whole.plan[5].token().to_string()];
        let runner = Scripted::failing(&failing);
        let ran = whole
            .run(&runner, 2, StopAt::End, &|| false, |_| {})
            .unwrap();
        let coverage = whole.coverage(&ran.reports);
        let whole_xml = whole.junit(&ran.reports, &coverage);
        let shards: Vec<(String, String)> = (1..=3)
            .map(|index| {
                let gate = Gate::new(&set, 2, 7, Shard { index, count: 3 });
                let ran = gate
                    .run(&runner, 2, StopAt::End, &|| false, |_| {})
                    .unwrap();
                let xml = gate.junit(&ran.reports, &gate.coverage(&ran.reports));
                (format!("{index}.xml"), xml.to_string().unwrap())
            })
            .collect();
        let merged = merge(&catalogue(), &shards).unwrap();
        assert_eq!(merged.report.tests, whole_xml.tests);
        assert_eq!(merged.report.failures, 1);
        assert_eq!(merged.coverage.pairs, coverage.pairs);
        assert_eq!(
            render_cases(&merged.report),
            render_cases(&whole_xml),
            "the same runs with the same verdicts"
        );
    }

    fn render_cases(report: &quick_junit::Report) -> Vec<(String, bool)> {
        let mut cases: Vec<(String, bool)> = (report.test_suites.iter())
            .filter(|s| s.name.as_str() != shard::STAMP_SUITE)
            .flat_map(|s| &s.test_cases)
            .map(|c| {
                let passed = matches!(c.status, quick_junit::TestCaseStatus::Success { .. });
                (c.name.to_string(), passed)
            })
            .collect();
        cases.sort();
        cases
    }

    #[test]
    fn a_replays_verdict_names_the_broken_invariants_not_the_problem_texts() {
        let set = selected(&["sidecar-stop"]);
        let run = &set[0].runs(0, 0)[0];
        let runner = Scripted::failing(&[run.token().to_string()]);
        let mut reports = vec![runner.run(run), runner.run(run)];
        reports[1].problems = vec!["pid 4242 left behind".into()];
        let verdicts = verdicts(&reports);
        assert_eq!(verdicts.len(), 1, "{:?}", verdicts.keys());
        assert_eq!(verdicts.values().next().unwrap().0, 2);
        assert_eq!(replay_verdict(&reports[0]), "FAIL [] + problems");
    }
}
