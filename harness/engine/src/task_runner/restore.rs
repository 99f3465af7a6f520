//! What a restored task runner does with the attempt the previous agent
//! left (see the restore rules in docs/lifecycle.md).

use super::*;

impl TaskRunner {
    /// The previous agent saw this attempt end, and died before it finished
    /// with it: give its executor the shutdown the exited hooks owed it (if
    /// it still answers), then decide as that agent would have. Never
    /// starts the attempt again. `Some` ends the MAIN loop.
    pub(super) async fn restore_ended(
        &mut self,
        ended: AttemptEnded,
        tracker: &mut RestartTracker,
    ) -> Option<Outcome> {
        let attempt = ended.attempt;
        self.deps.gate.restore_committed(&self.task.name, attempt);
        fault_point!(self.deps.faults, points::TR_RESTORING, self.name());
        let info = self
            .record
            .handle
            .clone()
            .unwrap_or_else(|| unknown_handle(self.socket_path()));
        match self.deps.driver.reattach(info).await {
            Ok(running) => {
                self.run_exited_hooks(&running, Some(&ended.result), attempt)
                    .await
            }
            Err(_) => {
                let _ = self.destroy_remains().await;
            }
        }
        match ended.by {
            EndedBy::Kill => {
                return Some(Outcome::Killed {
                    result: Some(ended.result),
                })
            }
            EndedBy::Restart => {
                self.restart_now(attempt);
                return None;
            }
            EndedBy::Exit => {}
        }
        let result = ended.result;
        // The dead agent may have reported it before it died.
        if !self.record.end_reported(attempt) {
            self.emit(EventKind::Terminated, attempt, describe_exit(&result));
        }
        let success = result.successful();
        let failed = tracker.stopping_fails(success);
        self.restart_or_stop(tracker, Ask::Exit { success }, attempt, |_| {
            Outcome::Exited { result, failed }
        })
        .await
    }

    /// Re-attaches to the executor of a task that was running (or whose start
    /// was committed) when the previous agent died. Never re-runs prestart.
    /// A lost attempt is accounted for (its remains destroyed) and said why.
    pub(super) async fn restore(&mut self, attempt: u32) -> Result<RunningTask, String> {
        // Committed but the handle was never persisted: the executor's socket
        // path is deterministic, so look for it there.
        fault_point!(self.deps.faults, points::TR_RESTORING, self.name());
        let info = self
            .record
            .handle
            .clone()
            .unwrap_or_else(|| unknown_handle(self.socket_path()));
        let reattached = self.deps.driver.reattach(info).await;
        // Done with, found or lost: written with what comes next, the
        // attempt no longer reads as a launch under way (committed past
        // launched), which a later agent would restore again, and count
        // its end, or its loss, twice.
        self.record.launched = Some(attempt);
        match reattached {
            Ok(running) => {
                self.deps.gate.restore_committed(&self.task.name, attempt);
                if !matches!(self.record.state, TaskState::Running { .. }) {
                    self.set_state(TaskState::Running { attempt });
                }
                self.emit(
                    EventKind::Restored,
                    attempt,
                    "Re-attached to the running executor after an agent restart",
                );
                self.record.handle = Some(running.reattach_info());
                self.publish();
                fault_point!(self.deps.faults, points::TR_REATTACHED, self.name());
                Ok(running)
            }
            Err(err) => {
                // The attempt is over (its executor is gone); it counts as
                // committed, so it is never started again under this number.
                self.deps.gate.restore_committed(&self.task.name, attempt);
                let why = format!("could not re-attach to the executor: {err}");
                self.lose_attempt(attempt, why.clone()).await;
                self.record.handle = None;
                self.seeded_lost_written_undecided();
                // Written with what the loss leads to (the policy's decision,
                // a doomed kill's end): written alone, a pending task told
                // the next agent to start the next attempt, undecided.
                Err(why)
            }
        }
    }
}

/// Where a task's executor is found when its handle was never persisted:
/// its socket path is deterministic.
pub(super) fn unknown_handle(socket_path: PathBuf) -> taskgate_executor::ReattachInfo {
    taskgate_executor::ReattachInfo {
        socket_path,
        executor_pid: 0,
        task_pid: 0,
    }
}
