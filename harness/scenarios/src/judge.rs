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
use taskgate_engine::ClientStatus;

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
        problems.push(status_problem(outcome.records.status, expected));
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

/// How the problem of an alloc that did not end as expected begins.
const ENDED_OTHERWISE: &str = "alloc ended ";

/// The problem of an alloc that did not end as its scenario expects.
fn status_problem(ended: Option<ClientStatus>, expected: ClientStatus) -> String {
    format!("{ENDED_OTHERWISE}{ended:?}, expected {expected:?}")
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
/// quietly disappears. What the marker excuses moves to the report's
/// expected consequences, shown but not failing: its invariant's
/// violations, and the alloc's end, which the bug may change. Anything
/// else (another invariant broken, something left behind) still fails the
/// run: the marker must not hide a regression from the gate.
pub(crate) fn expect_known(scenario: &Scenario, report: &mut RunReport) {
    let Some(known) = &scenario.expect.known_violation else {
        return;
    };
    let (excused, others) = std::mem::take(&mut report.violations)
        .into_iter()
        .partition::<Vec<_>, _>(|v| known.excuses(v));
    report.violations = others;
    if excused.is_empty() {
        report.problems.push(format!(
            "known violation of \"{}\" ({}) did not happen: if the bug is fixed, remove the marker",
            known.invariant, known.bug
        ));
        return;
    }
    let (ended, problems) = std::mem::take(&mut report.problems)
        .into_iter()
        .partition::<Vec<_>, _>(|p| p.starts_with(ENDED_OTHERWISE));
    report.problems = problems;
    report
        .expected
        .push(format!("known violation, {}", known.bug));
    report.expected.extend(
        (excused.into_iter())
            .map(|v| format!("{}: {}", v.invariant, v.detail))
            .chain(ended),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::{catalogue, find};
    use crate::model::KnownViolation;
    use crate::report::RunVerdict;
    use taskgate_oracle::{Invariant, Violation};

    fn violation(invariant: Invariant) -> Violation {
        Violation {
            invariant,
            task: None,
            detail: "shown".into(),
        }
    }

    /// `sidecar-stop`, marked with a known bug breaking `kill-order` (of
    /// `task` only, if given).
    fn marked_kill_order(task: Option<&str>) -> Scenario {
        let mut scenario = find(&catalogue(), "sidecar-stop").unwrap().clone();
        scenario.expect.known_violation = Some(KnownViolation {
            bug: "B9".into(),
            invariant: Invariant::KillOrder,
            task: task.map(str::to_string),
        });
        scenario
    }

    fn report(scenario: &Scenario, violations: Vec<Violation>, problems: Vec<String>) -> RunReport {
        RunReport {
            token: crate::plan::plan(std::slice::from_ref(scenario), 0, 0)[0].token(),
            description: String::new(),
            violations,
            problems,
            expected: Vec::new(),
            history: Vec::new(),
            duration: Duration::ZERO,
            kept: None,
        }
    }

    /// A known bug's marker excuses its own invariant (and the alloc's
    /// status it may change), nothing else: a regression that breaks
    /// another invariant, or leaves a process, in the same run still fails
    /// it, or the marker would hide it from the gate.
    #[test]
    fn a_known_marker_excuses_only_its_own_invariant() {
        let scenario = marked_kill_order(None);
        let mut known_only = report(
            &scenario,
            vec![violation(Invariant::KillOrder)],
            vec![status_problem(None, scenario.expect.status)],
        );
        expect_known(&scenario, &mut known_only);
        assert_eq!(known_only.verdict(), RunVerdict::Known, "{known_only:?}");
        let mut more = report(
            &scenario,
            vec![
                violation(Invariant::KillOrder),
                violation(Invariant::LayoutBeforeExec),
            ],
            vec!["leftover process 42".into()],
        );
        expect_known(&scenario, &mut more);
        assert_eq!(more.verdict(), RunVerdict::Fail, "{more:?}");
        assert_eq!(more.violations, [violation(Invariant::LayoutBeforeExec)]);
        assert_eq!(more.problems, ["leftover process 42"]);
    }

    /// A marker that names its task excuses that task's violations of
    /// its invariant only: another task's breach of the same invariant (a
    /// second bug) still fails the run.
    #[test]
    fn a_known_marker_with_a_task_excuses_only_that_tasks() {
        let scenario = marked_kill_order(Some("web"));
        let of = |task: &str| Violation {
            task: Some(task.into()),
            ..violation(Invariant::KillOrder)
        };
        let mut theirs = report(&scenario, vec![of("web")], Vec::new());
        expect_known(&scenario, &mut theirs);
        assert_eq!(theirs.verdict(), RunVerdict::Known, "{theirs:?}");
        let mut another = report(&scenario, vec![of("web"), of("sidecar")], Vec::new());
        expect_known(&scenario, &mut another);
        assert_eq!(another.verdict(), RunVerdict::Fail, "{another:?}");
        assert_eq!(another.violations, [of("sidecar")]);
        // Only another task's: the marked bug did not show.
        let mut elsewhere = report(&scenario, vec![of("sidecar")], Vec::new());
        expect_known(&scenario, &mut elsewhere);
        assert_eq!(elsewhere.verdict(), RunVerdict::Fail, "{elsewhere:?}");
    }
}
