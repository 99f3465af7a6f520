//! Seeded bugs: each re-creates one lifecycle bug from an orchestrator's
//! history in the engine or the executor, compiled in only by its cargo
//! feature (`taskgate-faults/bug-<name>`), so that CI can prove the gate
//! catches the whole class (`ci/zoo.sh`). A default build has none: every
//! [`SeededBug::active`] is then a constant `false` the compiler removes.
//! (The report's own bug, `legacy-prestart-skip`, predates this and is the
//! engine's feature.)

/// One seeded bug; its feature is `bug-` and its name in kebab case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeededBug {
    /// Nomad #5883/#5945: a restored agent forgets that the committed
    /// attempt already ended, and runs a completed task again (B2).
    RerunCompletedTask,
    /// Nomad #17424: an attempt whose executor is lost (dead, or gone while
    /// the agent was down) is restarted without killing what is left of
    /// it, so the new attempt runs beside the old tree (B3).
    RestartBesideLostTask,
    /// Nomad #24219: a lost executor is killed, but its task tree is not;
    /// the tree lives on, orphaned.
    OrphanedTaskTree,
    /// Nomad #13055: sidecars are told to die together with the main
    /// tasks, instead of after them (B5).
    SidecarsKilledWithMains,
    /// Nomad #17971: a poststop task's last events are never published, so
    /// it shows as started and never finished.
    PoststopEventsLost,
    /// Kubernetes #36485: after a node restart, completed init containers
    /// run again.
    InitRerunAfterRestore,
    /// Kubernetes #140309: after a node restart, an init container whose
    /// setup had run is taken as completed, and the main task starts
    /// without it.
    InitSkippedAfterRestore,
    /// B1: attempt 2 is committed while the record still names attempt 1's
    /// executor, so a restore reattaches to the wrong one.
    StaleHandle,
    /// B4: the launch takes no task lock, so a second executor can start
    /// while the first one has not bound its socket yet.
    UnlockedLaunch,
    /// A restored agent forgets the task's restarts and grants its policy's
    /// attempts afresh.
    RestartCountReset,
    /// The alloc reports complete although a task failed.
    StatusHidesFailure,
    /// A task runner keeps the definition it was created with: an in-place
    /// update reaches the alloc's record, never a restarted attempt.
    UpdateNeverTaken,
    /// A task runner takes an in-place update's env but keeps its old meta:
    /// the next attempt starts half-way between two versions.
    UpdateHalfTaken,
    /// Nomad #19403: a user restart tells every task at once, sidecars
    /// with the main tasks, instead of in the kill order.
    RestartKillsAllAtOnce,
    /// A restart of the running tasks brings the completed prestart task
    /// back too, as only a restart of all tasks may.
    RestartRerunsCompletedPrestart,
    /// Issue 22, bug 1: a restored agent that finds an attempt lost starts
    /// the next one at once, with no restart decision: uncounted, even
    /// with no restart left.
    LostAttemptUncounted,
    /// Issue 22, bug 2: a user restart that meets a task's exit 0 (its
    /// stop answers "already exited") takes it for an ordinary end, even
    /// for a task restarted on success: the restart waits out the
    /// policy's delay.
    RestartMeetsExitHangs,
    /// Issue 22, bug 3: a restored tracker forgets its window and counts
    /// every restart of the task's life in one beginning at the restore.
    RestartWindowLost,
}

impl SeededBug {
    /// Whether this build carries the bug.
    pub const fn active(self) -> bool {
        match self {
            SeededBug::RerunCompletedTask => cfg!(feature = "bug-rerun-completed-task"),
            SeededBug::RestartBesideLostTask => cfg!(feature = "bug-restart-beside-lost-task"),
            SeededBug::OrphanedTaskTree => cfg!(feature = "bug-orphaned-task-tree"),
            SeededBug::SidecarsKilledWithMains => cfg!(feature = "bug-sidecars-killed-with-mains"),
            SeededBug::PoststopEventsLost => cfg!(feature = "bug-poststop-events-lost"),
            SeededBug::InitRerunAfterRestore => cfg!(feature = "bug-init-rerun-after-restore"),
            SeededBug::InitSkippedAfterRestore => cfg!(feature = "bug-init-skipped-after-restore"),
            SeededBug::StaleHandle => cfg!(feature = "bug-stale-handle"),
            SeededBug::UnlockedLaunch => cfg!(feature = "bug-unlocked-launch"),
            SeededBug::RestartCountReset => cfg!(feature = "bug-restart-count-reset"),
            SeededBug::StatusHidesFailure => cfg!(feature = "bug-status-hides-failure"),
            SeededBug::UpdateNeverTaken => cfg!(feature = "bug-update-never-taken"),
            SeededBug::UpdateHalfTaken => cfg!(feature = "bug-update-half-taken"),
            SeededBug::RestartKillsAllAtOnce => cfg!(feature = "bug-restart-kills-all-at-once"),
            SeededBug::RestartRerunsCompletedPrestart => {
                cfg!(feature = "bug-restart-reruns-completed-prestart")
            }
            SeededBug::LostAttemptUncounted => cfg!(feature = "bug-lost-attempt-uncounted"),
            SeededBug::RestartMeetsExitHangs => cfg!(feature = "bug-restart-meets-exit-hangs"),
            SeededBug::RestartWindowLost => cfg!(feature = "bug-restart-window-lost"),
        }
    }
}

#[cfg(test)]
mod tests {
    /// The features in Cargo.toml and the `active` match name the same set:
    /// a feature without a bug would build nothing, and CI builds each one.
    #[test]
    fn every_bug_feature_is_matched() {
        let manifest = include_str!("../Cargo.toml");
        let source = include_str!("seeded.rs");
        let features: Vec<&str> = manifest
            .lines()
            .filter_map(|l| l.split_once(" = []").map(|(name, _)| name.trim()))
            .filter(|name| name.starts_with("bug-"))
            .collect();
        assert!(
            features.len() >= 10,
            "the zoo has ten bugs or more: {features:?}"
        );
        for feature in &features {
            let used = format!("cfg!(feature = \"{feature}\")");
            assert_eq!(source.matches(&used).count(), 1, "{feature}");
        }
        assert_eq!(
            source.matches("cfg!(feature = \"bug-").count(),
            features.len()
        );
    }
}
