//! What a gate runs: each scenario's cases, typed by the scenario's kind,
//! and the replay token that names each one.
//!
//! A [`Run`] is only made from its scenario ([`Scenario::runs`]) or from a
//! token checked against it ([`Token::parse`]), so a case always fits its
//! scenario: no runner has a kind to check.

use crate::catalogue;
use crate::model::{FaultCase, FaultPlan, Host, Kind, Restore, Scenario, Then};
use std::fmt;
use std::path::PathBuf;
use taskgate_faults::schedule::Schedule;
use taskgate_faults::Fault;

/// One planned run: a scenario and one of its cases.
#[derive(Debug, Clone)]
pub struct Run<'s> {
    pub scenario: &'s Scenario,
    pub case: Case<'s>,
}

/// One case of a scenario, as its kind and host make it.
#[derive(Debug, Clone)]
pub enum Case<'s> {
    /// The engine runs in the harness's own process.
    InProcess(InProcess<'s>),
    /// The engine runs as `taskgate agent` processes, one of them killed.
    Agent(AgentCase<'s>),
}

/// A case the engine runs in the harness's own process.
#[derive(Debug, Clone)]
pub enum InProcess<'s> {
    /// A stop race under one schedule.
    Race {
        controlled: &'s str,
        schedule: Schedule,
    },
    /// The `index`-th fault case of the scenario.
    Faults {
        index: usize,
        case: &'s FaultCase,
        then: Then,
    },
}

/// The `index`-th fault case of a scenario whose engine runs as agents.
#[derive(Debug, Clone, Copy)]
pub struct AgentCase<'s> {
    pub index: usize,
    pub case: &'s FaultCase,
    pub then: Then,
    pub restore: Restore,
}

impl Scenario {
    /// Every case of the scenario, in plan order: the full enumeration plus
    /// `random` PCT schedules from `seed` for a stop race (one drawn again,
    /// or already enumerated, is run once: a run's token is its name);
    /// every listed fault case otherwise.
    pub fn runs(&self, random: u32, seed: u64) -> Vec<Run<'_>> {
        match &self.kind {
            Kind::StopRace { controlled } => {
                let mut seen = std::collections::HashSet::new();
                Schedule::enumerate()
                    .into_iter()
                    .chain(
                        (0..random as u64).map(|i| {
                            Schedule::random(seed.wrapping_add(i), Schedule::PCT_DEPTH - 1)
                        }),
                    )
                    .filter(|schedule| seen.insert(schedule.to_string()))
                    .map(|schedule| self.race(controlled, schedule))
                    .collect()
            }
            Kind::Faults(plan) => (0..plan.cases.len())
                .filter_map(|index| self.fault_run(plan, index))
                .collect(),
        }
    }

    /// What the scenario's cases are called: schedules or cases.
    pub fn case_noun(&self) -> &'static str {
        match self.kind {
            Kind::StopRace { .. } => "schedule",
            Kind::Faults(_) => "case",
        }
    }

    fn race<'s>(&'s self, controlled: &'s str, schedule: Schedule) -> Run<'s> {
        Run {
            scenario: self,
            case: Case::InProcess(InProcess::Race {
                controlled,
                schedule,
            }),
        }
    }

    /// The `index`-th case of the scenario's fault `plan`, if it has one.
    fn fault_run<'s>(&'s self, plan: &'s FaultPlan, index: usize) -> Option<Run<'s>> {
        let case = plan.cases.get(index)?;
        let then = plan.then;
        Some(Run {
            scenario: self,
            case: match plan.host {
                Host::InProcess => Case::InProcess(InProcess::Faults { index, case, then }),
                Host::Agent { restore } => Case::Agent(AgentCase {
                    index,
                    case,
                    then,
                    restore,
                }),
            },
        })
    }
}

/// Every run of `scenarios`, scenario by scenario: the gate's whole plan.
pub fn plan(scenarios: &[Scenario], random: u32, seed: u64) -> Vec<Run<'_>> {
    scenarios
        .iter()
        .flat_map(|s| s.runs(random, seed))
        .collect()
}

impl InProcess<'_> {
    /// The faults the case configures (a schedule's parks aside).
    pub fn faults(&self) -> &[Fault] {
        match self {
            InProcess::Race { .. } => &[],
            InProcess::Faults { case, .. } => &case.faults,
        }
    }
}

impl Run<'_> {
    /// The token that replays this run.
    pub fn token(&self) -> Token {
        let case = match &self.case {
            Case::InProcess(InProcess::Race { schedule, .. }) => format!("@{schedule}"),
            Case::InProcess(InProcess::Faults { index, .. })
            | Case::Agent(AgentCase { index, .. }) => {
                format!("#{index}:{}", self.fingerprint().unwrap_or_default())
            }
        };
        Token {
            scenario: self.scenario.name.clone(),
            case,
            file: self.scenario.file.clone(),
        }
    }

    /// A fault case's fingerprint, which its token carries: what the case
    /// does as its report says it ([`Run::describe`]: its faults in the
    /// scenario syntax, what follows them, the restored agent's part),
    /// hashed to 8 hex digits (FNV-1a, a hash fixed by its definition, not
    /// by the toolchain). The scenario's job is not in it. `None` for a
    /// stop race, whose token holds its whole schedule.
    fn fingerprint(&self) -> Option<String> {
        self.fault_case()?;
        let mut hasher = fnv::FnvHasher::default();
        std::hash::Hasher::write(&mut hasher, self.describe().as_bytes());
        let hash = std::hash::Hasher::finish(&hasher);
        Some(format!("{:08x}", (hash ^ (hash >> 32)) as u32))
    }

    /// The fault case this run configures, if it is one.
    pub fn fault_case(&self) -> Option<&FaultCase> {
        match &self.case {
            Case::InProcess(InProcess::Race { .. }) => None,
            Case::InProcess(InProcess::Faults { case, .. })
            | Case::Agent(AgentCase { case, .. }) => Some(case),
        }
    }

    /// What the case does, as a report says it.
    pub fn describe(&self) -> String {
        match &self.case {
            Case::InProcess(InProcess::Race {
                controlled,
                schedule: s,
            }) => format!(
                "park {controlled} at [{}], update at [{}], stop at park #{}, {:?} first, swaps {:?}",
                s.task_park_points().collect::<Vec<_>>().join(", "),
                s.update_park_points().collect::<Vec<_>>().join(", "),
                s.stop_at,
                s.first,
                s.swaps
            ),
            Case::InProcess(InProcess::Faults { case, then, .. }) => {
                format!("{}, {}", faults(case), then_text(*then))
            }
            Case::Agent(AgentCase {
                case,
                then,
                restore,
                ..
            }) => format!(
                "agent with {}, {}; restored agent {}{}",
                faults(case),
                then_text(*then),
                match restore {
                    Restore::Stop => "stops the alloc",
                    Restore::Run => "lets it run",
                },
                match &case.restored_kill {
                    Some(point) => format!(", is killed at {point}, and a third agent restores"),
                    None => String::new(),
                }
            ),
        }
    }
}

fn faults(case: &FaultCase) -> String {
    case.faults
        .iter()
        .map(Fault::to_string)
        .collect::<Vec<_>>()
        .join(" + ")
}

fn then_text(then: Then) -> &'static str {
    match then {
        Then::StopWhenSettled => "stop once the faulted task settled",
        Then::StopWhenRunning => "stop once every task runs",
        Then::RunToEnd => "no stop",
    }
}

/// `scenario@schedule` or `scenario#n:fingerprint`: everything needed to
/// replay a run, as [`Run::token`] names it, with the file its scenario
/// came from. A fault case is named by its place in its scenario and, so
/// that another build's case at that place is refused rather than run in
/// its stead, by its fingerprint ([`Run::fingerprint`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub scenario: String,
    /// `@schedule` or `#n:fingerprint`.
    case: String,
    /// The scenario's file, if it is not in the built-in catalogue.
    file: Option<PathBuf>,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.scenario, self.case)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("replay token {0:?} is neither SCENARIO@SCHEDULE nor SCENARIO#N[:FINGERPRINT]")]
    Shape(String),
    #[error(transparent)]
    CaseChanged(Box<CaseChanged>),
    #[error(transparent)]
    Scenario(#[from] catalogue::UnknownScenario),
    #[error(transparent)]
    Schedule(#[from] taskgate_faults::schedule::TokenError),
    #[error("scenario {scenario} has {count} cases; #{n} is out of range")]
    Range {
        scenario: String,
        n: usize,
        count: usize,
    },
    #[error("scenario {0} is not a stop race; replay it as {0}#N")]
    NotAStopRace(String),
    #[error(
        "scenario {0} is a stop race; replay it as {0}@SCHEDULE (the schedule its run printed)"
    )]
    AStopRace(String),
}

/// A token's fault case whose fingerprint is not the one at its place in
/// this build.
#[derive(Debug, thiserror::Error)]
#[error(
    "replay token {token}: case #{n} of scenario {scenario} is another case in this build \
     (fingerprint {now}, the token's {then}): it is \"{describe}\". Replay the token on the \
     build that printed it, or take this build's token for the case from its gate's output"
)]
pub struct CaseChanged {
    token: String,
    scenario: String,
    n: usize,
    then: String,
    now: String,
    describe: String,
}

impl Token {
    /// Fault case `index`'s token, for tests that build reports by hand.
    #[cfg(test)]
    pub(crate) fn of_fault_case(scenario: &str, index: usize) -> Token {
        Token {
            scenario: scenario.into(),
            case: format!("#{index}"),
            file: None,
        }
    }

    /// The command line that runs this case again, reading its scenario's
    /// file if it has one.
    pub fn replay_command(&self) -> String {
        match &self.file {
            Some(file) => format!(
                "taskgate replay --scenario {} {}",
                shell_word(&file.display().to_string()),
                shell_word(&self.to_string())
            ),
            None => format!("taskgate replay {}", shell_word(&self.to_string())),
        }
    }

    /// The run a token names, in a set of scenarios (the built-in
    /// catalogue, or the scenarios of a file).
    pub fn parse<'s>(token: &str, set: &'s [Scenario]) -> Result<Run<'s>, TokenError> {
        if let Some((name, schedule)) = token.split_once('@') {
            let scenario = catalogue::find(set, name)?;
            let schedule: Schedule = schedule.parse()?;
            match &scenario.kind {
                Kind::StopRace { controlled } => Ok(scenario.race(controlled, schedule)),
                Kind::Faults(_) => Err(TokenError::NotAStopRace(name.into())),
            }
        } else if let Some((name, case)) = token.split_once('#') {
            // A token without its fingerprint (typed by hand) is taken by place alone.
            let (n, fingerprint) = match case.split_once(':') {
                Some((_, "")) => return Err(TokenError::Shape(token.to_string())),
                Some((n, fingerprint)) => (n, Some(fingerprint)),
                None => (case, None),
            };
            let index: usize = n
                .parse()
                .map_err(|_| TokenError::Shape(token.to_string()))?;
            let scenario = catalogue::find(set, name)?;
            let run = match &scenario.kind {
                Kind::Faults(plan) => scenario.fault_run(plan, index).ok_or(TokenError::Range {
                    scenario: name.into(),
                    n: index,
                    count: plan.cases.len(),
                })?,
                Kind::StopRace { .. } => return Err(TokenError::AStopRace(name.into())),
            };
            let now = run.fingerprint().unwrap_or_default();
            match fingerprint {
                Some(then) if then != now => Err(TokenError::CaseChanged(Box::new(CaseChanged {
                    token: token.to_string(),
                    scenario: name.into(),
                    n: index,
                    then: then.into(),
                    now,
                    describe: run.describe(),
                }))),
                _ => Ok(run),
            }
        } else {
            Err(TokenError::Shape(token.to_string()))
        }
    }
}

/// `s` as one shell word, in single quotes.
fn shell_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_for_every_case() {
        let all = catalogue::catalogue();
        for run in plan(&all, 5, 42) {
            let token = run.token();
            let parsed = Token::parse(&token.to_string(), &all).unwrap();
            assert_eq!(parsed.token(), token);
            assert_eq!(parsed.scenario.name, run.scenario.name);
            assert_eq!(parsed.describe(), run.describe());
        }
    }

    /// A failing run of a scenario read from a file prints a replay command
    /// that reads that file too: the built-in catalogue may hold another
    /// scenario of the same name, or none.
    #[test]
    fn a_file_scenarios_replay_command_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let catalogue_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
        std::fs::create_dir(dir.path().join("jobs")).unwrap();
        for file in [
            "stop-races.hcl",
            "jobs/report.hcl",
            "jobs/web.hcl",
            "jobs/init.hcl",
        ] {
            std::fs::copy(catalogue_dir.join(file), dir.path().join(file)).unwrap();
        }
        let file = dir.path().join("stop-races.hcl");
        let set = catalogue::load_file(&file).unwrap();
        let run = &plan(&set, 0, 0)[0];
        let report = crate::report::RunReport {
            token: run.token(),
            description: run.describe(),
            violations: Vec::new(),
            problems: vec!["failed".into()],
            expected: Vec::new(),
            history: Vec::new(),
            duration: std::time::Duration::ZERO,
            kept: None,
        };
        let explained = report.explain();
        assert!(
            explained.contains(&format!(
                "replay: taskgate replay --scenario '{}' '{}'",
                file.display(),
                run.token()
            )),
            "{explained}"
        );
    }

    /// Every run of a plan has a token of its own, however many random
    /// schedules are drawn: a schedule drawn twice (or one the enumeration
    /// already has) would run twice under one name, which a JUnit file,
    /// a shard merge and a report's pages all take for one run.
    #[test]
    fn a_plans_tokens_are_unique() {
        let all = catalogue::catalogue();
        let runs = plan(&all, 500, 7);
        let mut seen = std::collections::BTreeSet::new();
        let repeated: Vec<String> = (runs.iter())
            .map(|r| r.token().to_string())
            .filter(|t| !seen.insert(t.clone()))
            .collect();
        assert!(
            repeated.is_empty(),
            "{} repeated, e.g. {:?}",
            repeated.len(),
            repeated.first()
        );
    }

    /// A token names a case by its place in its scenario; replayed after
    /// the scenario changed (another build, an edited file), that place may
    /// hold another case, which must be refused, not run in its stead.
    #[test]
    fn a_token_whose_case_moved_is_refused() {
        let all = catalogue::catalogue();
        let run = plan(&all, 0, 0)
            .into_iter()
            .find(|run| {
                matches!(&run.scenario.kind, Kind::Faults(plan) if plan.cases.len() > 1)
                    && run.token().to_string().contains("#0:")
            })
            .expect("a fault scenario of several cases");
        let token = run.token().to_string();
        let mut changed = all.clone();
        let scenario = changed
            .iter_mut()
            .find(|s| s.name == run.scenario.name)
            .unwrap();
        let Kind::Faults(plan) = &mut scenario.kind else {
            unreachable!("a fault scenario")
        };
        plan.cases.remove(0);
        let replayed = Token::parse(&token, &changed).map(|run| run.describe());
        let Err(TokenError::CaseChanged(changed_case)) = &replayed else {
            panic!("{token} replays {replayed:?}");
        };
        let next = Token::parse(&format!("{}#1", run.scenario.name), &all).unwrap();
        assert_eq!(
            changed_case.describe,
            next.describe(),
            "names the case now at #0"
        );
        // Typed by place alone, it is taken as it is.
        let by_place = token.split(':').next().unwrap();
        assert_eq!(
            Token::parse(by_place, &changed).unwrap().describe(),
            next.describe()
        );
    }

    /// A tripwire: a case's fingerprint changes only with what the case
    /// does, or with the words its report uses for it. Should this fail,
    /// every token printed before the change is refused from now on: say so
    /// in the change.
    #[test]
    fn a_cases_fingerprint_is_fixed() {
        let all = catalogue::catalogue();
        let run = Token::parse("failing-batch-agent-kill#1", &all).unwrap();
        assert_eq!(
            run.token().to_string(),
            "failing-batch-agent-kill#1:7f90123c"
        );
    }

    /// A token of the wrong form for its scenario says which form it takes.
    #[test]
    fn a_token_of_the_wrong_form_names_the_right_one() {
        let all = catalogue::catalogue();
        let numbered = Token::parse("sidecar-stop#0", &all)
            .err()
            .unwrap()
            .to_string();
        assert!(numbered.contains("sidecar-stop@SCHEDULE"), "{numbered}");
        let scheduled = (Token::parse("agent-kill@tr=0/up=0/stop=0/first=tr/swaps=", &all))
            .err()
            .unwrap()
            .to_string();
        assert!(scheduled.contains("agent-kill#N"), "{scheduled}");
    }

    #[test]
    fn bad_tokens_say_why() {
        let all = catalogue::catalogue();
        assert!(matches!(
            Token::parse("nonsense", &all),
            Err(TokenError::Shape(_))
        ));
        assert!(matches!(
            Token::parse("nope#1", &all),
            Err(TokenError::Scenario(_))
        ));
        assert!(matches!(
            Token::parse("agent-kill#1:", &all),
            Err(TokenError::Shape(_))
        ));
        assert!(matches!(
            Token::parse("agent-kill#999", &all),
            Err(TokenError::Range { .. })
        ));
        assert!(matches!(
            Token::parse("agent-kill@tr=0/up=0/stop=0/first=tr/swaps=", &all),
            Err(TokenError::NotAStopRace(_))
        ));
        assert!(matches!(
            Token::parse("sidecar-stop#0", &all),
            Err(TokenError::AStopRace(_))
        ));
    }
}
