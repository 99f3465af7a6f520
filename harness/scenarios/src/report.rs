//! Results of runs: what was checked, what failed, the token that
//! replays a run exactly, and the JUnit report of many.

use crate::plan::Token;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;
use taskgate_oracle::{Event, Violation};

/// What one run amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunVerdict {
    /// No violation, no problem, and no open bug showed.
    Pass,
    /// A violation or a problem: the run fails its gate.
    Fail,
    /// A pass that showed an open bug's (expected) violation.
    Known,
}

impl RunVerdict {
    /// As the progress lines print it: `pass`, `FAIL` or `known`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunVerdict::Pass => "pass",
            RunVerdict::Fail => "FAIL",
            RunVerdict::Known => "known",
        }
    }
}

impl fmt::Display for RunVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub token: Token,
    /// What the case did, e.g. "park sidecar at tr.before_prestart, update at ar.alloc_state_set".
    pub description: String,
    /// Broken invariants, from the oracle's history checks.
    pub violations: Vec<Violation>,
    /// Everything else that makes the run fail: a fault that never fired, a
    /// hung engine, leftovers, an unexpected alloc outcome.
    pub problems: Vec<String>,
    /// What a known, still open bug broke (see the scenario's known
    /// violation): reported, not failing.
    pub expected: Vec<String>,
    pub history: Vec<Event>,
    pub duration: Duration,
    /// Where an HTML report's keeper copied the run's data (see
    /// [`crate::html::kept::Keeper`]).
    pub kept: Option<PathBuf>,
}

impl RunReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.problems.is_empty()
    }

    /// Pass, fail, or known: a pass that showed an open bug's violation.
    pub fn verdict(&self) -> RunVerdict {
        match (self.passed(), self.expected.is_empty()) {
            (false, _) => RunVerdict::Fail,
            (true, true) => RunVerdict::Pass,
            (true, false) => RunVerdict::Known,
        }
    }

    /// The failure as a user reads it: what broke, the history, and how to replay.
    pub fn explain(&self) -> String {
        let mut out = format!(
            "{} {}  ({})\n",
            match self.verdict() {
                RunVerdict::Known => "KNOWN BUG (fails as expected)",
                other => other.as_str(),
            },
            self.token,
            self.description
        );
        for v in &self.violations {
            out += &format!(
                "  violation: {} [{}]: {}\n",
                v.invariant,
                v.task.as_deref().unwrap_or("-"),
                v.detail
            );
        }
        for p in &self.problems {
            out += &format!("  problem: {p}\n");
        }
        for e in &self.expected {
            out += &format!("  expected: {e}\n");
        }
        out += "  history:\n";
        for (i, e) in self.history.iter().enumerate() {
            out += &format!("    #{i:<3} {}\n", describe(e));
        }
        out += &format!("  replay: {}\n", self.token.replay_command());
        out
    }
}

/// One history entry as a user reads it (`point  web:tr.before_prestart [park]`).
pub fn describe(e: &Event) -> String {
    match e {
        Event::FaultHit(h) => match &h.action {
            Some(a) => format!("point  {} [{a}]", h.point),
            None => format!("point  {}", h.point),
        },
        Event::Exec(r) => format!(
            "exec   {:?} {} pid {} -> {:?}{}{}",
            r.identity,
            r.exe.display(),
            r.pid,
            r.verdict,
            if r.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", r.reason)
            },
            match &r.started_version {
                Some(v) => format!(" [job version: env {:?}, meta {:?}]", v.env, v.meta),
                None => String::new(),
            }
        ),
        Event::StopDelivered { .. } => "stop   delivered".to_string(),
        Event::TaskEvent {
            task,
            kind,
            attempt,
            failed,
            message,
        } => format!(
            "event  {task} {kind:?} (attempt {attempt}){}{}",
            if *failed { ", failed" } else { "" },
            if message.is_empty() {
                String::new()
            } else {
                format!(": {message}")
            }
        ),
        Event::AgentRestarted { stop } => format!(
            "agent  restarted{}",
            if *stop { ", stopping the alloc" } else { "" }
        ),
        Event::TaskExited { task, exit } => format!("exit   {task} {exit:?} (its executor saw it)"),
        Event::Survivors { task, pids } => format!("alive  {task} after the run: pids {pids:?}"),
        Event::RestartCount { task, restarts } => format!("count  {task} restarts = {restarts}"),
        Event::AllocStatus(status) => format!("status {status:?}"),
        Event::DesiredStop(stop) => {
            format!("status desired {}", if *stop { "stop" } else { "run" })
        }
    }
}

/// A JUnit report of many runs, one test case per run, grouped by scenario.
pub fn junit(reports: &[RunReport], name: &str) -> quick_junit::Report {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut report = Report::new(name);
    let mut names: Vec<&str> = reports.iter().map(|r| r.token.scenario.as_str()).collect();
    names.dedup();
    for scenario in names {
        let mut suite = TestSuite::new(scenario);
        for r in reports.iter().filter(|r| r.token.scenario == scenario) {
            let status = if r.passed() {
                TestCaseStatus::success()
            } else {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                let first = r
                    .violations
                    .first()
                    .map(|v| v.invariant.to_string())
                    .or_else(|| r.problems.first().cloned());
                s.set_message(first.unwrap_or_default());
                s.set_description(r.explain());
                s
            };
            let mut case = TestCase::new(r.token.to_string(), status);
            case.set_classname(format!("taskgate.{scenario}"));
            case.set_time(r.duration);
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
    report
}
