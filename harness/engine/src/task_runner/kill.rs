//! Supervising a started attempt: its exit, or its kill (a stop's or a
//! restart's), and accounting for what a lost executor left.

use super::*;

impl TaskRunner {
    /// Kills whatever is left of this task's earlier attempts (an executor
    /// this agent cannot reach, a task tree whose executor died), as Nomad
    /// does when a reattach fails (#1795, #17424), so that no attempt ever
    /// runs beside another (an executor that died used to leave its task
    /// running, and the restart launched the next attempt into the same
    /// cgroup: docs/bugs.md, B3).
    pub(super) async fn destroy_remains(&self) -> Result<Remains, ExecutorError> {
        let destroyed = self
            .deps
            .driver
            .destroy_remains(&self.deps.alloc_id, &self.task.name)
            .await;
        if let Err(err) = &destroyed {
            tracing::error!(task = self.name(), error = %err, "destroying remains failed");
        }
        destroyed
    }

    /// A lost attempt: its executor is gone or unreachable. Once its remains
    /// are destroyed the attempt is known to be over, and is reported killed;
    /// if they could not be, it stays lost and unaccounted for.
    pub(super) async fn lose_attempt(&mut self, attempt: u32, why: String) {
        if SeededBug::RestartBesideLostTask.active() {
            self.emit(EventKind::Lost, attempt, why);
            return;
        }
        let destroyed = self.destroy_remains().await;
        self.emit(EventKind::Lost, attempt, why);
        match destroyed {
            // A dead agent's runner may have ended it already (its restore
            // finds the same executor gone).
            Ok(_) if self.record.end_reported(attempt) => {}
            Ok(remains) if remains.is_empty() => self.emit(
                EventKind::Killed,
                attempt,
                "Nothing of the lost attempt was running",
            ),
            Ok(remains) => self.emit(
                EventKind::Killed,
                attempt,
                format!("Killed what was left of the lost attempt: {remains}"),
            ),
            Err(err) => self.emit(
                EventKind::Lost,
                attempt,
                format!("destroying what was left of it failed: {err}"),
            ),
        }
    }

    /// Waits for the task to exit, or kills it when told to die or to
    /// restart.
    pub(super) async fn supervise(&mut self, running: &RunningTask) -> AttemptEnd {
        let exited = tokio::select! {
            biased;
            _ = told(&mut self.kill_rx) => Err(Doom::Kill),
            _ = asked(&mut self.restart_rx) => Err(Doom::Restart),
            res = running.wait() => Ok(res),
        };
        match exited {
            Ok(Ok(result)) => {
                self.record_end(&result, EndedBy::Exit);
                AttemptEnd::Exited(result)
            }
            Ok(Err(err)) => AttemptEnd::Lost(err.to_string()),
            Err(doom) => self.end_as_told(running, doom, false).await,
        }
    }

    /// A restored attempt: a kill or a restart a dead agent's runner began
    /// (it doomed the task, and then died) is carried through; else it is
    /// supervised as any. (Taken for its own end, what the dead runner's
    /// kill or restart caused was judged by the policy, and a restart never
    /// came.) In an alloc that is stopping, or told to die here, a doomed
    /// task waits for its own kill, its turn in the stop's kill order, and
    /// any end it meets meanwhile is that kill's.
    pub(super) async fn supervise_restored(&mut self, running: &RunningTask) -> AttemptEnd {
        let attempt = self.current_attempt();
        // The executor's record, or the dead runner's (its peek may not
        // have reached the executor, nor may this ask, the executor gone).
        // Doomed by neither: its wait finds out.
        let doomed = running.doomed().await.ok().flatten();
        let Some(doom) = doomed.or(self.record.doomed_by(attempt)) else {
            return self.supervise(running).await;
        };
        if self.should_shutdown() || self.killed() {
            let exited = tokio::select! {
                biased;
                _ = told(&mut self.kill_rx) => None,
                res = running.wait() => Some(res),
            };
            return match exited {
                None => self.end_as_told(running, Doom::Kill, true).await,
                Some(Ok(result)) => self.kill_done(attempt, Some(result), EndedBy::Kill),
                Some(Err(err)) => {
                    let why = format!("executor lost while its kill waited: {err}");
                    self.lost_to(attempt, why, EndedBy::Kill).await
                }
            };
        }
        self.end_as_told(running, doom, true).await
    }

    /// Ends the attempt as told: `doom` a stop's kill or a user restart.
    /// `doomed`: a runner already doomed the task (a dead agent's), so an
    /// executor gone since is that kill's or restart's end, not the task's.
    async fn end_as_told(&mut self, running: &RunningTask, doom: Doom, doomed: bool) -> AttemptEnd {
        let by = EndedBy::from(doom);
        let attempt = self.current_attempt();
        // The peek dooms the task, so that an agent restored after this
        // runner died takes what ends it from here for the kill's (or the
        // restart's), as this runner does. An exit its executor recorded
        // before any runner was told to die or to restart (this one, or a
        // dead agent's) is the task's own end, which its policy judges (a
        // stop then ends it between attempts, or it failed), and so is an
        // executor already gone (a lost attempt): taken for the kill's or
        // the restart's, a failure just before either was hidden, and
        // which one hid it followed the scheduling.
        match running.own_end(doom).await {
            Ok(ExitPeek::OwnEnd(result)) => {
                self.ended_before(by, Some(&result));
                return AttemptEnd::Exited(result);
            }
            Ok(ExitPeek::ExecutorGone) if doomed => {
                let why = "executor lost after it was doomed: nothing answers on its socket";
                return self.lost_to(attempt, why.into(), by).await;
            }
            Ok(ExitPeek::ExecutorGone) => {
                self.ended_before(by, None);
                return AttemptEnd::Lost("nothing answers on its socket".into());
            }
            // Doomed now, or not answering (it may be alive): killed, its
            // signal and grace first.
            Ok(ExitPeek::ToKill) | Err(_) => {}
        }
        self.record.doomed = Some(DoomedAttempt { attempt, by: doom });
        self.publish();
        if by == EndedBy::Restart {
            fault_point!(self.deps.faults, points::TR_RESTART_SIGNALED, self.name());
            self.emit(
                EventKind::RestartSignaled,
                attempt,
                "User requested restart",
            );
        } else {
            fault_point!(self.deps.faults, points::TR_KILLING, self.name());
        }
        let delay = self.run_prekill_hooks(attempt);
        if !delay.is_zero() {
            self.publish();
            let exited = tokio::select! {
                biased;
                res = running.wait() => Some(res),
                _ = self.deps.clock.sleep(delay) => None,
            };
            // Gone during the delay: its end is the kill's (or the
            // restart's), its executor's too.
            match exited {
                Some(Ok(result)) => return self.kill_done(attempt, Some(result), by),
                Some(Err(err)) => {
                    let why = format!("executor lost during the shutdown delay: {err}");
                    return self.lost_to(attempt, why, by).await;
                }
                None => {}
            }
        }
        let grace = self.task.kill_timeout;
        self.emit(
            EventKind::Killing,
            attempt,
            format!(
                "Sent {}. Waiting {grace:?} before force killing",
                self.task.kill_signal
            ),
        );
        self.publish();
        if let Err(err) = running.stop(self.task.kill_signal, grace, doom).await {
            tracing::warn!(task = self.name(), error = %err, "stopping task failed");
        }
        let result = match running.wait().await {
            Ok(result) => result,
            Err(err) => {
                // Its executor is gone (killed, crashed) and may have left
                // the task's tree running: destroyed here, so nothing of
                // the attempt outlives its kill.
                let why = format!("executor lost while stopping the task: {err}");
                return self.lost_to(attempt, why, by).await;
            }
        };
        // Any end once the task was doomed is the kill's or the restart's,
        // an exit 0 (a trap's answer, or a batch task done just then) too:
        // taken for an ordinary end, a restart waited out the policy's
        // delay (bug 2 of issue 22) or a completion stood against the
        // restart a restored agent carries through.
        self.kill_done(attempt, Some(result), by)
    }

    /// An attempt whose executor was lost once its kill or restart (`by`)
    /// was under way: its remains are destroyed, and the loss is that end.
    async fn lost_to(&mut self, attempt: u32, why: String, by: EndedBy) -> AttemptEnd {
        self.lose_attempt(attempt, why).await;
        self.kill_done(attempt, None, by)
    }

    /// The attempt was over before the kill or the restart (`by`) reached
    /// it: its own exit (`own_end`), or its executor gone. A restart that
    /// found it so is still asked: it cuts short the delay the policy then
    /// gives (or, the task dead, is answered as a dead task's is). The end
    /// and the restart it owes are one write, so an agent restored after
    /// this runner died anywhere here owes the restart too.
    fn ended_before(&mut self, by: EndedBy, own_end: Option<&ExitResult>) {
        if by != EndedBy::Restart {
            if let Some(result) = own_end {
                self.record_end(result, EndedBy::Exit);
            }
            return;
        }
        self.record.restart_owed = Some(self.current_attempt());
        match own_end {
            Some(result) => self.record_end(result, EndedBy::Exit),
            None => self.publish(),
        }
        fault_point!(self.deps.faults, points::TR_RESTART_KEPT, self.name());
        if !SeededBug::RestartMeetsExitHangs.active() {
            self.restart_rx.mark_changed();
        }
    }

    /// The attempt ended by the kill path (or during it), `by` a stop's
    /// kill or a restart's. Without a result the attempt was lost, and
    /// accounted for as such.
    pub(super) fn kill_done(
        &mut self,
        attempt: u32,
        result: Option<ExitResult>,
        by: EndedBy,
    ) -> AttemptEnd {
        match &result {
            Some(result) => {
                self.emit(EventKind::Killed, attempt, "Task successfully killed");
                self.record_end(result, by);
            }
            None => self.publish(),
        }
        if by == EndedBy::Restart {
            AttemptEnd::Restarted(result)
        } else {
            AttemptEnd::Killed(result)
        }
    }
}
