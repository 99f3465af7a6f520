//! Starting an attempt: its prestart hooks mint the receipt the start
//! gate demands, the start is committed there, then the driver starts it.

use super::*;

/// Why prestart did not produce a receipt.
#[derive(Debug, thiserror::Error)]
pub(super) enum PrestartError {
    #[error("allocation is terminal")]
    AllocTerminal,
    #[error(transparent)]
    Hook(#[from] HookError),
}

impl TaskRunner {
    /// Runs every prestart hook for `attempt`, in order; only a full run
    /// mints the receipt the start gate demands.
    pub(super) fn prestart(
        &mut self,
        attempt: u32,
    ) -> Result<(PrestartReceipt, TaskSetup), PrestartError> {
        if self.should_shutdown() {
            if !SeededBug::LegacyPrestartSkip.active() {
                return Err(PrestartError::AllocTerminal);
            }
            // The report's original logic: skip the hooks and still hand
            // out a receipt.
            fault_point!(self.deps.faults, points::TR_OBSERVED_TERMINAL, self.name());
            tracing::trace!(
                task = self.name(),
                "skipping prestart hooks since allocation is terminal"
            );
            return Ok((
                PrestartReceipt::mint(&self.task.name, attempt),
                TaskSetup::default(),
            ));
        }
        let mut setup = TaskSetup::default();
        self.run_hooks::<dyn PrestartHook>(attempt, |hook, ctx| hook.prestart(ctx, &mut setup))?;
        self.record.prestart_done = Some(attempt);
        self.publish();
        Ok((PrestartReceipt::mint(&self.task.name, attempt), setup))
    }

    /// The linearization point (see `start_gate`). The committed attempt is
    /// persisted before the driver runs, so a restored agent knows to look
    /// for its executor instead of starting the attempt again.
    pub(super) fn commit(&mut self, receipt: PrestartReceipt) -> Result<(), StartRefused> {
        let attempt = receipt.attempt();
        if SeededBug::LegacyPrestartSkip.active() {
            // The report's check: only the kill context, not the alloc status.
            if self.killed() {
                return Err(StartRefused::Killed);
            }
        } else {
            self.deps
                .gate
                .commit_start(receipt, self.task.is_poststop())?;
        }
        self.record.committed = Some(attempt);
        // The handle named the previous attempt's executor; from here on the
        // committed attempt's executor is found at its socket path until its
        // own handle is persisted (a restore used to reattach to the stale
        // one, and the new executor ran with no supervisor: docs/bugs.md, B1).
        if !SeededBug::StaleHandle.active() {
            self.record.handle = None;
        }
        self.publish();
        Ok(())
    }

    /// Starts the committed attempt. An executor that still holds the task
    /// can only be an earlier attempt's that outlived its supervision: it is
    /// destroyed, and the start tried once more, instead of failing the
    /// attempt on it.
    pub(super) async fn launch(&mut self, setup: &TaskSetup) -> Result<RunningTask, ExecutorError> {
        match self.deps.driver.start(self.spec(setup)).await {
            Err(ExecutorError::AlreadyRunning { .. }) => {
                let remains = self.destroy_remains().await?;
                tracing::warn!(task = self.name(), %remains, "an earlier executor still ran");
                self.deps.driver.start(self.spec(setup)).await
            }
            launched => launched,
        }
    }

    pub(super) fn not_started(&mut self, reason: &str) -> Outcome {
        fault_point!(self.deps.faults, points::TR_OBSERVED_TERMINAL, self.name());
        let attempt = self.current_attempt();
        self.emit(
            EventKind::NotStarted,
            attempt,
            format!("Task not started: {reason}"),
        );
        Outcome::NeverStarted {
            reason: reason.to_string(),
        }
    }
}
