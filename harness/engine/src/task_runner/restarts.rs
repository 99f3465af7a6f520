//! How a task runner asks its restart policy after an attempt ends, and
//! waits out a restart delay: cut short by a kill or a user restart, its
//! end persisted so a restored agent waits out the rest.

use super::*;

/// What the restart tracker is asked about.
#[derive(Clone, Copy)]
pub(super) enum Ask {
    Exit { success: bool },
    StartError { recoverable: bool },
}

/// How a restart delay ended.
pub(super) enum DelayEnd {
    Elapsed,
    /// Cut short by a user restart.
    Restart,
    Killed,
}

impl TaskRunner {
    /// Exited hooks, then the restart decision. `Some` ends the MAIN loop.
    pub(super) async fn after_attempt(
        &mut self,
        running: &RunningTask,
        end: AttemptEnd,
        attempt: u32,
        tracker: &mut RestartTracker,
    ) -> Option<Outcome> {
        let result = match &end {
            AttemptEnd::Exited(r) => Some(r.clone()),
            AttemptEnd::Killed(r) | AttemptEnd::Restarted(r) => r.clone(),
            AttemptEnd::Lost(_) => None,
        };
        self.run_exited_hooks(running, result.as_ref(), attempt)
            .await;
        match end {
            AttemptEnd::Killed(result) => Some(Outcome::Killed { result }),
            AttemptEnd::Restarted(_) => {
                self.take_update(attempt, tracker);
                self.restart_now(attempt);
                None
            }
            AttemptEnd::Exited(result) => {
                self.emit(EventKind::Terminated, attempt, describe_exit(&result));
                self.take_update(attempt, tracker);
                let success = result.successful();
                let failed = tracker.stopping_fails(success);
                let asked = Ask::Exit { success };
                self.restart_or_stop(tracker, asked, attempt, |_| Outcome::Exited {
                    result,
                    failed,
                })
                .await
            }
            AttemptEnd::Lost(why) => {
                self.lose_attempt(attempt, format!("executor lost: {why}"))
                    .await;
                self.lost(format!("executor lost: {why}"), attempt, tracker)
                    .await
            }
        }
    }

    /// Setting up or starting an attempt failed: report it and ask the
    /// restart tracker. `Some` ends the MAIN loop.
    pub(super) async fn start_failed(
        &mut self,
        (kind, message, recoverable): (EventKind, String, bool),
        attempt: u32,
        tracker: &mut RestartTracker,
    ) -> Option<Outcome> {
        self.emit(kind, attempt, message.clone());
        // Written before the update hooks: an agent killed in them leaves
        // the next one this failure to decide, not a setup to run again.
        let failed = FailedStart {
            attempt,
            message,
            recoverable,
        };
        self.record.start_failed = Some(failed.clone());
        self.publish();
        self.decide_failed_start(failed, tracker).await
    }

    /// Takes a waiting update, then asks the restart tracker about a
    /// failed start (this runner's, or one a dead agent's runner wrote and
    /// died before deciding). `Some` ends the MAIN loop.
    pub(super) async fn decide_failed_start(
        &mut self,
        failed: FailedStart,
        tracker: &mut RestartTracker,
    ) -> Option<Outcome> {
        self.take_update(failed.attempt, tracker);
        let asked = Ask::StartError {
            recoverable: failed.recoverable,
        };
        self.restart_or_stop(tracker, asked, failed.attempt, |_| Outcome::Failed {
            reason: failed.message,
        })
        .await
    }

    /// An attempt whose executor was lost (and its remains destroyed): a
    /// failed start, which the restart policy decides on. `Some` ends the
    /// MAIN loop.
    pub(super) async fn lost(
        &mut self,
        why: String,
        attempt: u32,
        tracker: &mut RestartTracker,
    ) -> Option<Outcome> {
        self.take_update(attempt, tracker);
        let asked = Ask::StartError { recoverable: true };
        self.restart_or_stop(tracker, asked, attempt, |reason| Outcome::Failed {
            reason: format!("{why}; {reason}"),
        })
        .await
    }

    /// Asks the restart tracker about an attempt's end and applies its
    /// decision: `Some(stop(reason))` ends the MAIN loop, `None` means go
    /// round again for a new attempt after the delay. The tracker's window
    /// is persisted with the decision.
    pub(super) async fn restart_or_stop(
        &mut self,
        tracker: &mut RestartTracker,
        asked: Ask,
        attempt: u32,
        stop: impl FnOnce(String) -> Outcome,
    ) -> Option<Outcome> {
        let now = self.deps.clock.now();
        // Decided: written with the decision (or the death it leads to).
        self.record.start_failed = None;
        // Decided on a copy: a restart a kill refuses counts for nothing.
        let mut deciding = tracker.clone();
        let decision = match asked {
            Ask::Exit { success } => deciding.on_exit(success, now),
            Ask::StartError { recoverable } => deciding.on_start_error(recoverable, now),
        };
        let (delay, reason) = match decision {
            RestartDecision::NotRestarting { reason } => {
                *tracker = deciding;
                self.record.restart_window = Some(tracker.window());
                self.emit(EventKind::NotRestarting, attempt, reason.clone());
                return Some(stop(reason));
            }
            RestartDecision::Restart { delay, reason } => (delay, reason),
        };
        // A stop that ends a restart is the kill path at work, not a task
        // failure: the task is killed between attempts, as in Nomad.
        if !self.restart_decided(delay) {
            self.emit(EventKind::NotRestarting, attempt, "allocation is terminal");
            return Some(Outcome::Killed { result: None });
        }
        let before = std::mem::replace(tracker, deciding).window();
        self.record.restart_window = Some(tracker.window());
        self.record.restart_window_before = Some(before);
        self.emit(
            EventKind::Restarting,
            attempt,
            format!("{reason}; restarting in {delay:?}"),
        );
        if matches!(self.record.state, TaskState::Running { .. }) {
            self.set_state(TaskState::Pending);
        }
        self.record.restarts += 1;
        self.record.restart_due = Some(now + delay);
        self.record.restart_wait = Some(delay);
        self.publish();
        fault_point!(self.deps.faults, points::TR_RESTART_DELAY, self.name());
        let end = self.wait_restart_delay(delay).await;
        self.restart_delay_over(end, attempt, tracker)
    }

    /// The rest of a restart delay the previous agent began, and died in,
    /// waited out as its policy asked: a restored agent shortens a restart
    /// delay only for a user restart still owed (Nomad's skips the rest).
    /// `Some` ends the MAIN loop.
    pub(super) async fn rest_of_restart_delay(
        &mut self,
        attempt: u32,
        tracker: &mut RestartTracker,
    ) -> Option<Outcome> {
        let left = self.record.rest_of_restart_delay(self.deps.clock.now())?;
        // Stopped while no agent ran: killed in its delay, as a live
        // runner's would have been.
        let end = if self.should_shutdown() {
            DelayEnd::Killed
        } else {
            fault_point!(self.deps.faults, points::TR_RESTART_DELAY, self.name());
            self.wait_restart_delay(left).await
        };
        self.restart_delay_over(end, attempt, tracker)
    }

    /// A restart delay ended: `None` goes on to the next attempt, `Some`
    /// ends the MAIN loop (killed while waiting).
    pub(super) fn restart_delay_over(
        &mut self,
        end: DelayEnd,
        attempt: u32,
        tracker: &mut RestartTracker,
    ) -> Option<Outcome> {
        self.record.restart_due = None;
        self.record.restart_wait = None;
        self.record.restart_owed = None;
        let before = self.record.restart_window_before.take();
        match end {
            // Written at once: a task held at its start condition next
            // leaves no delay for a restored agent to wait again.
            DelayEnd::Elapsed => {
                self.publish();
                None
            }
            DelayEnd::Restart => {
                tracker.delay_cut_short(self.deps.clock.now());
                self.record.restart_window = Some(tracker.window());
                self.emit(
                    EventKind::RestartSignaled,
                    attempt,
                    "User requested restart: the restart delay is cut short",
                );
                self.publish();
                None
            }
            DelayEnd::Killed => {
                // The restart never came: it counts for nothing, as one a
                // kill refused, written with the death. (A record an older
                // agent wrote has no window before it: it stays counted.)
                if let Some(before) = before {
                    tracker.take_back(before);
                    self.record.restart_window = Some(before);
                    self.record.restarts = self.record.restarts.saturating_sub(1);
                }
                self.emit(
                    EventKind::Killed,
                    attempt,
                    "killed while waiting to restart",
                );
                Some(Outcome::Killed { result: None })
            }
        }
    }

    /// Waits out a restart delay, unless a kill or a user restart cuts it
    /// short.
    pub(super) async fn wait_restart_delay(&mut self, delay: std::time::Duration) -> DelayEnd {
        let woke = tokio::select! {
            biased;
            _ = told(&mut self.kill_rx) => DelayEnd::Killed,
            _ = asked(&mut self.restart_rx) => DelayEnd::Restart,
            _ = self.deps.clock.sleep(delay) => DelayEnd::Elapsed,
        };
        match woke {
            DelayEnd::Elapsed => self.delay_ran_out(),
            cut => cut,
        }
    }

    /// The delay ran out. A kill or a user restart asked as it did wins the
    /// tie; otherwise it ran out in full, which is recorded while both asks'
    /// channels are held still: an ask is either seen here or made after
    /// the record (the oracle orders stops and restarts by it).
    pub(super) fn delay_ran_out(&self) -> DelayEnd {
        let killed = self.kill_rx.borrow();
        let _restart = self.restart_rx.borrow();
        if *killed {
            return DelayEnd::Killed;
        }
        if self.restart_rx.has_changed().unwrap_or(false) {
            return DelayEnd::Restart;
        }
        record_point!(
            self.deps.faults,
            points::TR_RESTART_DELAY_ELAPSED,
            self.name()
        );
        DelayEnd::Elapsed
    }

    /// Whether the policy's restart stands: not once the alloc is stopping
    /// or the task was told to die. Decided, and recorded with the wait
    /// chosen, while the kill is held still (as [`Self::delay_ran_out`]
    /// does): a kill is either seen here or asked after the record, so the
    /// oracle can hold that no restart is decided after a kill.
    fn restart_decided(&self, wait: std::time::Duration) -> bool {
        let killed = self.kill_rx.borrow();
        if *killed || self.should_shutdown() {
            return false;
        }
        let wait_ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        record_point!(
            self.deps.faults,
            points::TR_RESTART_DECIDED,
            self.name(),
            taskgate_faults::Detail::RestartWait { wait_ns }
        );
        true
    }

    /// A user restart ended the attempt: the next one follows as soon as
    /// the start condition reopens, not counted against the restart policy
    /// (as in Nomad).
    pub(super) fn restart_now(&mut self, attempt: u32) {
        self.emit(
            EventKind::Restarting,
            attempt,
            "User requested restart; not counted against the restart policy",
        );
        if matches!(self.record.state, TaskState::Running { .. }) {
            self.set_state(TaskState::Pending);
        }
        self.publish();
    }
}
