//! Judging one run: its merged history against every invariant, then
//! against the scenario's expectations, an open bug's known violation
//! included.

use crate::history;
use crate::lab::LabError;
use crate::model::Scenario;
use crate::outcome::Outcome;
use crate::plan::Run;
use crate::report::RunReport;
use crate::shapes::shapes;
use std::time::Duration;

/// Builds the merged history and checks every invariant over it, then the
/// scenario's expectations, a known violation included.
pub(crate) fn judge(run: &Run<'_>, outcome: Outcome) -> RunReport {
    let scenario = run.scenario;
    let mut problems = outcome.problems;
    let history = history::merge(
        &outcome.hits,
        &outcome.execs,
        &outcome.tasks,
        &outcome.records,
    );
    let shapes = shapes(scenario, outcome.records.alloc_id.as_deref());
    let violations = taskgate_oracle::check(&history, &shapes);
    let expected = scenario.expect.status;
    if outcome.records.status != Some(expected) {
        problems.push(format!(
            "alloc ended {:?}, expected {expected:?}",
            outcome.records.status
        ));
    }
    for task in &outcome.tasks {
        if !task.state.is_dead() {
            problems.push(format!(
                "task {} is not dead at the end: {:?}",
                task.task, task.state
            ));
        }
    }
    for task in outcome.tasks.iter().filter(|t| t.handle.is_some()) {
        problems.push(format!(
            "task {} still holds an executor handle after the alloc finished",
            task.task
        ));
    }
    RunReport {
        token: run.token(),
        description: run.describe(),
        violations,
        problems,
        expected: Vec::new(),
        history,
        duration: Duration::ZERO,
        kept: None,
    }
}

/// A run the harness could not carry out: a failure of its own, not a verdict.
pub(crate) fn harness_error(run: &Run<'_>, description: String, err: &LabError) -> RunReport {
    RunReport {
        token: run.token(),
        description,
        violations: Vec::new(),
        problems: vec![format!("harness error: {err}")],
        expected: Vec::new(),
        history: Vec::new(),
        duration: Duration::ZERO,
        kept: None,
    }
}

/// A strict expected failure: while a scenario carries a known violation,
/// its run passes only if that violation shows, and fails the day it
/// quietly disappears. Whatever else the bug broke moves to the report's
/// expected consequences, shown but not failing.
pub(crate) fn expect_known(scenario: &Scenario, report: &mut RunReport) {
    let Some(known) = &scenario.expect.known_violation else {
        return;
    };
    if report
        .violations
        .iter()
        .any(|v| v.invariant == known.invariant)
    {
        report.expected.extend(
            std::mem::take(&mut report.violations)
                .into_iter()
                .map(|v| format!("{}: {}", v.invariant, v.detail))
                .chain(std::mem::take(&mut report.problems)),
        );
        report
            .expected
            .insert(0, format!("known violation, {}", known.bug));
    } else {
        report.problems.push(format!(
            "known violation of \"{}\" ({}) did not happen: if the bug is fixed, remove the marker",
            known.invariant, known.bug
        ));
    }
}
