//! The invariant registry: every invariant a run is judged by, with the
//! short id that violations, scenario files (`known_violation`) and the
//! docs name it by, and its statement in one sentence. Each one's check is
//! [`Invariant::check`] (in [`crate::check`]); this module imports none.

use serde::{Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// One row per invariant, in the order they are checked and listed: the
/// variant, its id, its statement. Builds the enum and [`ALL`] from the one
/// table, so neither can miss an invariant the other has.
macro_rules! registry {
    ($($variant:ident = $id:literal: $statement:literal,)+) => {
        /// An invariant of a run's history.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Invariant {
            $($variant,)+
        }

        /// Every invariant, in the order they are checked.
        pub const ALL: &[Invariant] = &[$(Invariant::$variant,)+];

        impl Invariant {
            /// Its short, stable name (`kill-order`).
            pub fn id(self) -> &'static str {
                match self {
                    $(Invariant::$variant => $id,)+
                }
            }

            /// What it holds, in one sentence.
            pub fn statement(self) -> &'static str {
                match self {
                    $(Invariant::$variant => $statement,)+
                }
            }
        }
    };
}

registry! {
    LayoutBeforeExec = "layout-before-exec":
        "the task directory and log files exist before every exec",
    NoExecAfterTerminal = "no-exec-after-terminal":
        "no exec after the task runner observed the alloc terminal",
    OneExecPerAttempt = "one-exec-per-attempt":
        "at most one executor exec per start attempt",
    StartedTasksEnd = "started-tasks-end":
        "every started task is eventually killed or exits, and no attempt ends twice",
    NoRestartAfterCompletion = "no-restart-after-completion":
        "no completed task or attempt is started again after a restore",
    NoExecAfterKill = "no-exec-after-kill":
        "no task is started after its runner was told to die",
    OneLiveTree = "one-live-tree":
        "at most one live process tree and one executor per task",
    KillOrder = "kill-order":
        "leader killed first, main tasks dead before sidecars are killed, poststop after all",
    PoststopOnce = "poststop-once":
        "a poststop task runs exactly once",
    StatusMatchesExits = "status-matches-exits":
        "the alloc's final status is the one its recorded exits give",
    NoSurvivors = "no-survivors":
        "no process of a task outlives its executor unobserved",
    RestartsMonotonic = "restarts-monotonic":
        "a task's restart count never goes backwards",
    StartOrder = "start-order":
        "main tasks start after every prestart task completed, poststart tasks after the main tasks",
    AttemptsWithinPolicy = "attempts-within-policy":
        "no task runs more attempts than its restart policy allows",
    ExitsObserved = "exits-observed":
        "every task tree's end is recorded by its own executor, unless the harness killed it",
    UpdatesWhole = "updates-whole":
        "every attempt starts with one whole job version, never older than its runner was given",
    RestartOrder = "restart-order":
        "a restart takes its tasks down leader first and sidecars last, starts nothing until they are down, and brings them back in lifecycle order, a completed prestart task only when all tasks restart; none is accepted after a stop",
    LaunchesAccounted = "launches-accounted":
        "every attempt of a task, lost ones too, is one its restart policy grants, interval by interval",
    CommandsTakeEffect = "commands-take-effect":
        "every stop, restart and update takes effect, never after a restart delay it should have cut short, no restart is decided once a task was told to die, and a stop stays final",
    RestartWindows = "restart-windows":
        "a restart states and waits its delay and jitter, and a task is given up only once its interval's attempts are used, across restores too",
    KillSignal = "kill-signal":
        "a task told to die is sent its kill signal, as the task itself reports, before any SIGKILL",
    KillGrace = "kill-grace":
        "a task told to die is SIGKILLed only after its shutdown delay and the grace its attempt started with",
}

impl Invariant {
    /// Whether it judges each exec by what the exec gate saw at that exec
    /// alone (a tree's cgroup peers, an executor's live peers, a denied
    /// exec): a breach in the first part of a run's history stands whatever
    /// the rest does, so a run that shows one can end at once.
    pub fn settled_at_exec(self) -> bool {
        matches!(self, Invariant::LayoutBeforeExec | Invariant::OneLiveTree)
    }

    /// A breach of this invariant, by `task` (`None`: by the alloc as a whole).
    pub fn violation(self, task: Option<&str>, detail: String) -> Violation {
        Violation {
            invariant: self,
            task: task.map(str::to_string),
            detail,
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl Serialize for Invariant {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.id())
    }
}

/// A name that is no invariant's id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown invariant `{0}` (the invariants: {ids})", ids = ids().join(", "))]
pub struct UnknownInvariant(pub String);

impl FromStr for Invariant {
    type Err = UnknownInvariant;

    fn from_str(id: &str) -> Result<Invariant, UnknownInvariant> {
        ALL.iter()
            .copied()
            .find(|i| i.id() == id)
            .ok_or_else(|| UnknownInvariant(id.to_string()))
    }
}

/// Every invariant's id, in [`ALL`]'s order.
pub fn ids() -> Vec<&'static str> {
    ALL.iter().map(|i| i.id()).collect()
}

/// A broken invariant, found in one run's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub invariant: Invariant,
    pub task: Option<String>,
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_short_kebab_case_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for invariant in ALL {
            let id = invariant.id();
            assert!(
                id.split('-')
                    .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase())),
                "{id} is not kebab case"
            );
            assert!(id.len() <= 30, "{id} is not short");
            assert!(seen.insert(id), "{id} twice");
            assert!(!invariant.statement().is_empty());
        }
    }

    #[test]
    fn every_id_parses_back_and_nothing_else_does() {
        for &invariant in ALL {
            assert_eq!(invariant.id().parse(), Ok(invariant));
            assert_eq!(invariant.to_string(), invariant.id());
        }
        let err = "kill-ordr".parse::<Invariant>().unwrap_err();
        assert_eq!(err, UnknownInvariant("kill-ordr".into()));
        let message = err.to_string();
        assert!(
            message
                .starts_with("unknown invariant `kill-ordr` (the invariants: layout-before-exec, "),
            "{message}"
        );
        assert!(message.ends_with(", kill-grace)"), "{message}");
        // A statement is no id: scenario files name invariants by id only.
        assert!(Invariant::KillOrder
            .statement()
            .parse::<Invariant>()
            .is_err());
    }

    #[test]
    fn a_violation_serializes_its_invariant_by_id() {
        let v = Invariant::KillOrder.violation(Some("web"), "too early".into());
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"invariant":"kill-order","task":"web","detail":"too early"}"#
        );
    }

    /// docs/invariants.md's table lists every invariant, by id and
    /// statement, in [`ALL`]'s order; the README counts them right.
    #[test]
    fn the_docs_list_exactly_the_registry() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let docs = std::fs::read_to_string(format!("{root}/docs/invariants.md")).unwrap();
        let rows: Vec<(String, String)> = docs
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| {
                let (id, rest) = l.split_once("` | ")?;
                Some((id.to_string(), rest.strip_suffix(" |")?.to_string()))
            })
            .collect();
        let registry: Vec<(String, String)> = ALL
            .iter()
            .map(|i| (i.id().to_string(), i.statement().to_string()))
            .collect();
        assert_eq!(
            rows, registry,
            "docs/invariants.md's table must list ALL: id and statement"
        );
        let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
        let words: Vec<&str> = readme.split_whitespace().collect();
        let counts: Vec<&str> = (words.windows(2))
            .filter(|w| w[1].trim_end_matches([',', '.', ';', ')']) == "invariants")
            .filter(|w| w[0].bytes().all(|b| b.is_ascii_digit()))
            .map(|w| w[0])
            .collect();
        assert!(!counts.is_empty(), "the README counts no invariants");
        for n in counts {
            assert_eq!(n, ALL.len().to_string(), "README: {n} invariants");
        }
    }
}
