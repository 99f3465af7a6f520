//! Seeded bugs: each re-creates one lifecycle bug from an orchestrator's
//! history in the engine or the executor, so that CI can prove the gate
//! catches the whole class (`ci/zoo.sh`). They are compiled only into a zoo
//! build (the `zoo` feature), all of them in one build, and one is chosen
//! per process by [`SEEDED_BUG_ENV`], which the agents and executors a run
//! starts inherit. Without the feature, [`SeededBug::active`] is a constant
//! `false` the compiler removes, whatever the environment says.

use std::sync::OnceLock;

/// The environment variable that chooses a zoo build's seeded bug, by name;
/// unset, a zoo build has none.
pub const SEEDED_BUG_ENV: &str = "TASKGATE_SEEDED_BUG";

macro_rules! seeded_bugs {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)+) => {
        /// One seeded bug, named in kebab case.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum SeededBug {
            $($(#[$doc])* $variant,)+
        }

        impl SeededBug {
            /// Every seeded bug, in the zoo's order.
            pub const ALL: &'static [SeededBug] = &[$(SeededBug::$variant,)+];

            /// The bug's name, as [`SEEDED_BUG_ENV`] and `ci/zoo.sh` spell it.
            pub const fn name(self) -> &'static str {
                match self {
                    $(SeededBug::$variant => $name,)+
                }
            }
        }
    };
}

seeded_bugs! {
    /// The report's own bug (Nomad's task runner before the fix): a stop
    /// that lands between the shutdown check and the driver start skips
    /// the prestart hooks, yet the task starts, in a task dir that does
    /// not exist. The start gate is bypassed too: only a kill refuses.
    LegacyPrestartSkip = "legacy-prestart-skip",
    /// Nomad #5883/#5945: a restored agent forgets that the committed
    /// attempt already ended, and runs a completed task again (B2).
    RerunCompletedTask = "rerun-completed-task",
    /// Nomad #17424: an attempt whose executor is lost (dead, or gone while
    /// the agent was down) is restarted without killing what is left of
    /// it, so the new attempt runs beside the old tree (B3).
    RestartBesideLostTask = "restart-beside-lost-task",
    /// Nomad #24219: a lost executor is killed, but its task tree is not;
    /// the tree lives on, orphaned.
    OrphanedTaskTree = "orphaned-task-tree",
    /// Nomad #13055: sidecars are told to die together with the main
    /// tasks, instead of after them (B5).
    SidecarsKilledWithMains = "sidecars-killed-with-mains",
    /// Nomad #17971: a poststop task's last events are never published, so
    /// it shows as started and never finished.
    PoststopEventsLost = "poststop-events-lost",
    /// Kubernetes #36485: after a node restart, completed init containers
    /// run again.
    InitRerunAfterRestore = "init-rerun-after-restore",
    /// Kubernetes #140309: after a node restart, an init container whose
    /// setup had run is taken as completed, and the main task starts
    /// without it.
    InitSkippedAfterRestore = "init-skipped-after-restore",
    /// B1: attempt 2 is committed while the record still names attempt 1's
    /// executor, so a restore reattaches to the wrong one.
    StaleHandle = "stale-handle",
    /// B4: the launch takes no task lock, so a second executor can start
    /// while the first one has not bound its socket yet.
    UnlockedLaunch = "unlocked-launch",
    /// A restored agent forgets the task's restarts and grants its policy's
    /// attempts afresh.
    RestartCountReset = "restart-count-reset",
    /// The alloc reports complete although a task failed.
    StatusHidesFailure = "status-hides-failure",
    /// A task runner keeps the definition it was created with: an in-place
    /// update reaches the alloc's record, never a restarted attempt.
    UpdateNeverTaken = "update-never-taken",
    /// A task runner takes an in-place update's env but keeps its old meta:
    /// the next attempt starts half-way between two versions.
    UpdateHalfTaken = "update-half-taken",
    /// Nomad #19403: a user restart tells every task at once, sidecars
    /// with the main tasks, instead of in the kill order.
    RestartKillsAllAtOnce = "restart-kills-all-at-once",
    /// A restart of the running tasks brings the completed prestart task
    /// back too, as only a restart of all tasks may.
    RestartRerunsCompletedPrestart = "restart-reruns-completed-prestart",
    /// Issue 22, bug 1: a restored agent that finds an attempt lost starts
    /// the next one at once, with no restart decision: uncounted, even
    /// with no restart left.
    LostAttemptUncounted = "lost-attempt-uncounted",
    /// Issue 22, bug 2: a user restart that meets a task's exit 0 leaves
    /// it to the policy as an ordinary end and is forgotten: the restart
    /// waits out the policy's delay.
    RestartMeetsExitHangs = "restart-meets-exit-hangs",
    /// Issue 22, bug 3: a restored tracker forgets its window and counts
    /// every restart of the task's life in one beginning at the restore.
    RestartWindowLost = "restart-window-lost",
    /// `lost-attempt-pending-undecided` (docs/bugs.md): a restored runner
    /// that finds its attempt lost writes the task pending before its
    /// policy decides, so an agent killed right then leaves the next one
    /// to start the next attempt at once, uncounted. Only a second agent
    /// kill shows it.
    LostAttemptWrittenUndecided = "lost-attempt-written-undecided",
    /// An executor that never sends a task's kill signal: the task is
    /// SIGKILLed once the grace has passed, with no chance to shut down.
    KillSignalSkipped = "kill-signal-skipped",
    /// A task restarted on failure only (a batch job's, a prestart task)
    /// has its exit 0 taken for a failure: its policy restarts it, with
    /// restarts left, though it completed. Within one agent's life:
    /// `no-restart-after-completion` looks across restores only.
    RestartsCompletedTask = "restarts-completed-task",
}

impl SeededBug {
    /// Whether this process carries the bug: only in a zoo build, and only
    /// the one [`SEEDED_BUG_ENV`] names.
    #[inline]
    pub fn active(self) -> bool {
        cfg!(feature = "zoo") && chosen_once() == Some(self)
    }

    /// The bug named `name`.
    pub fn from_name(name: &str) -> Result<SeededBug, UnknownSeededBug> {
        SeededBug::ALL
            .iter()
            .copied()
            .find(|bug| bug.name() == name)
            .ok_or_else(|| UnknownSeededBug(name.to_string()))
    }
}

/// A name that is no seeded bug.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no seeded bug is named {0:?} (the zoo's bugs: ci/zoo.sh list)")]
pub struct UnknownSeededBug(pub String);

/// The bug [`SEEDED_BUG_ENV`] names in a zoo build (always `None` in any
/// other): a program calls this first, to refuse a misspelt name with an
/// error rather than run with no bug and prove nothing.
pub fn chosen() -> Result<Option<SeededBug>, UnknownSeededBug> {
    if !cfg!(feature = "zoo") {
        return Ok(None);
    }
    match std::env::var(SEEDED_BUG_ENV) {
        Ok(name) => SeededBug::from_name(&name).map(Some),
        Err(_) => Ok(None),
    }
}

/// [`chosen`], read once per process; a misspelt name that [`chosen`] did
/// not refuse first aborts here.
fn chosen_once() -> Option<SeededBug> {
    static CHOSEN: OnceLock<Option<SeededBug>> = OnceLock::new();
    *CHOSEN.get_or_init(|| chosen().unwrap_or_else(|err| panic!("{SEEDED_BUG_ENV}: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_distinct_and_found() {
        assert!(SeededBug::ALL.len() >= 10, "the zoo has ten bugs or more");
        for bug in SeededBug::ALL {
            assert_eq!(SeededBug::from_name(bug.name()), Ok(*bug));
        }
        assert_eq!(
            SeededBug::from_name("bug-nope"),
            Err(UnknownSeededBug("bug-nope".into()))
        );
    }

    /// ci/zoo.sh reads the names from this file's table, line by line.
    #[test]
    fn the_zoo_script_reads_every_name() {
        let listed: Vec<&str> = include_str!("seeded.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("    ")?.split_once(" = \""))
            .filter(|(variant, _)| variant.chars().all(|c| c.is_ascii_alphanumeric()))
            .filter_map(|(_, rest)| rest.strip_suffix("\","))
            .collect();
        let names: Vec<&str> = SeededBug::ALL.iter().map(|b| b.name()).collect();
        assert_eq!(listed, names);
    }

    /// A build without the zoo carries no bug (ci/zoo.sh also runs the
    /// fixed binaries with a bug named in the environment: they pass).
    #[cfg(not(feature = "zoo"))]
    #[test]
    fn no_bug_without_the_zoo_feature() {
        assert!(SeededBug::ALL.iter().all(|bug| !bug.active()));
    }
}
