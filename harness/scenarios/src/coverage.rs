//! The coverage table: which declared depth-2 pairs (an actor held at one
//! boundary while an event happens at another) ran, with what verdict, and
//! which known boundaries no scenario names at all.

use crate::model::{Kind, Scenario};
use crate::plan::{AgentCase, Case, InProcess, Run};
use std::collections::{BTreeMap, BTreeSet};
use taskgate_faults::points::{self, TASK_RUNNER_BOUNDARIES, UPDATE_BOUNDARIES};
use taskgate_faults::Action;

/// One declared pair: `held` (an actor parked there) x `event` (where the
/// event happens: the stop update's boundary, a crash, a kill).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pair {
    pub scenario: String,
    pub held: String,
    pub event: String,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    pub runs: u32,
    pub failed: u32,
}

#[derive(Debug, Default)]
pub struct Coverage {
    /// Every declared pair, with its runs (zero if none ran).
    pub pairs: BTreeMap<Pair, Tally>,
    /// Known boundaries no scenario names.
    pub unreached: Vec<String>,
}

impl Coverage {
    /// The pairs grouped by their scenario, in name order.
    pub fn by_scenario(&self) -> BTreeMap<&str, Vec<(&Pair, &Tally)>> {
        let mut by_scenario: BTreeMap<&str, Vec<(&Pair, &Tally)>> = BTreeMap::new();
        for (pair, tally) in &self.pairs {
            by_scenario
                .entry(&pair.scenario)
                .or_default()
                .push((pair, tally));
        }
        by_scenario
    }

    pub fn missing(&self) -> impl Iterator<Item = &Pair> {
        self.pairs
            .iter()
            .filter(|(_, t)| t.runs == 0)
            .map(|(p, _)| p)
    }
}

/// The pair a run covers, if it is a declared depth-2 case: the
/// enumerated stop-race schedules (the task runner's first park x the
/// update handler's park), and fault cases declared as pairs.
fn pair_of(run: &Run<'_>) -> Option<(String, String)> {
    let case = match &run.case {
        Case::InProcess(InProcess::Race {
            controlled,
            schedule: s,
        }) => {
            if !(s.swaps.is_empty() && s.update_parks.len() == 1) {
                return None;
            }
            let held = s.task_park_points().next()?;
            let event = s.update_park_points().next()?;
            return Some((format!("{controlled}:{held}"), format!("stop at {event}")));
        }
        Case::InProcess(InProcess::Faults { case, .. }) | Case::Agent(AgentCase { case, .. }) => {
            case
        }
    };
    case.pair.as_ref().map(|(p, q)| {
        let action = (case.faults.iter())
            .find(|f| &f.point == q)
            .map_or(String::new(), |f| format!("{} at ", f.action));
        (p.to_string(), format!("{action}{q}"))
    })
}

/// The pairs each scenario declares, before anything ran.
fn declared(scenario: &Scenario) -> Vec<(String, String)> {
    match &scenario.kind {
        Kind::StopRace { controlled } => TASK_RUNNER_BOUNDARIES
            .iter()
            .flat_map(|p| {
                UPDATE_BOUNDARIES
                    .iter()
                    .map(move |q| (format!("{controlled}:{p}"), format!("stop at {q}")))
            })
            .collect(),
        Kind::Faults(_) => scenario.runs(0, 0).iter().filter_map(pair_of).collect(),
    }
}

/// Every point a scenario names: its faults', the points they await, and
/// its schedules'.
fn named(scenario: &Scenario) -> BTreeSet<String> {
    match &scenario.kind {
        Kind::StopRace { .. } => TASK_RUNNER_BOUNDARIES
            .iter()
            .chain(UPDATE_BOUNDARIES.iter())
            .map(|p| p.to_string())
            .collect(),
        Kind::Faults(plan) => plan
            .cases
            .iter()
            .flat_map(|c| &c.faults)
            .flat_map(|f| {
                let awaited = match &f.action {
                    Action::AwaitHit { point, .. } => Some(point.point.clone()),
                    _ => None,
                };
                std::iter::once(f.point.point.clone()).chain(awaited)
            })
            .collect(),
    }
}

/// The table from `runs`: each run and whether it passed (from the
/// reports of one gate, or from the merged JUnit of its shards). Runs of
/// scenarios not in `scenarios` are left out.
pub fn coverage<'r, 's: 'r>(
    scenarios: &[Scenario],
    runs: impl IntoIterator<Item = (&'r Run<'s>, bool)>,
) -> Coverage {
    let mut pairs: BTreeMap<Pair, Tally> = BTreeMap::new();
    let by_name: BTreeSet<&str> = scenarios.iter().map(|s| s.name.as_str()).collect();
    for scenario in scenarios {
        for (held, event) in declared(scenario) {
            pairs
                .entry(Pair {
                    scenario: scenario.name.clone(),
                    held,
                    event,
                })
                .or_default();
        }
    }
    for (run, passed) in runs {
        if !by_name.contains(run.scenario.name.as_str()) {
            continue;
        }
        if let Some((held, event)) = pair_of(run) {
            let tally = pairs
                .entry(Pair {
                    scenario: run.scenario.name.clone(),
                    held,
                    event,
                })
                .or_default();
            tally.runs += 1;
            tally.failed += u32::from(!passed);
        }
    }
    let named: BTreeSet<String> = scenarios.iter().flat_map(named).collect();
    let unreached = points::TASK_POINTS
        .iter()
        .map(|p| p.to_string())
        .chain(taskgate_engine::hook_points())
        .chain(points::ALLOC_POINTS.iter().map(|p| p.to_string()))
        .filter(|p| !named.contains(p))
        .collect();
    Coverage { pairs, unreached }
}

/// The table as the gate prints it.
pub fn render(coverage: &Coverage) -> String {
    let mut out = String::from("coverage: declared depth-2 pairs (held x event)\n");
    for (scenario, rows) in coverage.by_scenario() {
        let ran = rows.iter().filter(|(_, t)| t.runs > 0).count();
        out += &format!("  {scenario}: {ran} of {} pairs ran\n", rows.len());
        for (pair, tally) in rows {
            out += &format!(
                "    {:<44} x {:<36} {}\n",
                pair.held,
                pair.event,
                match (tally.runs, tally.failed) {
                    (0, _) => "NOT RUN".to_string(),
                    (n, 0) => format!("{n} pass"),
                    (n, f) => format!("{n} run, {f} FAIL"),
                }
            );
        }
    }
    out += &format!(
        "boundaries no scenario names ({}): {}\n",
        coverage.unreached.len(),
        if coverage.unreached.is_empty() {
            "none".to_string()
        } else {
            coverage.unreached.join(", ")
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::catalogue;

    #[test]
    fn every_declared_stop_race_pair_is_run_by_the_enumeration() {
        let all = catalogue();
        let race: Vec<Scenario> = all
            .into_iter()
            .filter(|s| matches!(s.kind, Kind::StopRace { .. }))
            .collect();
        let runs = crate::plan::plan(&race, 0, 0);
        let cov = coverage(&race, runs.iter().map(|r| (r, true)));
        assert_eq!(
            cov.pairs.len(),
            race.len() * TASK_RUNNER_BOUNDARIES.len() * UPDATE_BOUNDARIES.len()
        );
        assert_eq!(cov.missing().count(), 0, "{}", render(&cov));
    }

    #[test]
    fn a_pair_that_did_not_run_or_failed_shows() {
        let all: Vec<Scenario> = catalogue()
            .into_iter()
            .filter(|s| s.name == "sidecar-stop")
            .collect();
        let first = all[0].runs(0, 0).remove(0);
        let cov = coverage(&all, [(&first, false)]);
        assert_eq!(cov.missing().count(), cov.pairs.len() - 1);
        let table = render(&cov);
        assert!(table.contains("1 run, 1 FAIL"), "{table}");
        assert!(table.contains("NOT RUN"), "{table}");
        assert!(
            !cov.unreached.is_empty(),
            "one scenario names few boundaries"
        );
    }
}
