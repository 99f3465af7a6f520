//! Running a task runner's hooks at each stage: prestart is in `mod.rs`
//! (it mints the start's receipt); poststart, prekill, exited, stop and
//! the update hooks, with their fault points, here.

use super::*;

impl TaskRunner {
    /// Takes the latest in-place update, if there is one the runner does
    /// not run yet: its update hooks, then the new definition and restart
    /// policy, all at once. A failed hook leaves the old definition whole;
    /// the update is offered again at the next boundary.
    pub(super) fn take_update(&mut self, attempt: u32, tracker: &mut RestartTracker) {
        let mut new = self.definition_rx.borrow().clone();
        if new == self.task || SeededBug::UpdateNeverTaken.active() {
            return;
        }
        if SeededBug::UpdateHalfTaken.active() {
            new.meta.clone_from(&self.task.meta);
        }
        if let Err(err) = self.run_update_hooks(attempt, &new) {
            self.emit(EventKind::HookFailed, attempt, err.to_string());
            self.publish();
            return;
        }
        let changed = self.task.fields_changed_by(&new).join(", ");
        tracker.set_policy(new.restart.clone());
        self.task = new;
        self.emit(
            EventKind::Updated,
            attempt,
            format!("Updated in place: {changed}"),
        );
        self.publish();
    }

    /// The update hooks, their fault points inside their guard: a panic
    /// there is the hook's, and defers the update like an error does.
    pub(super) fn run_update_hooks(&mut self, attempt: u32, new: &Task) -> Result<(), HookError> {
        let hooks = self.deps.hooks.clone();
        let task = self.task.name.clone();
        for hook in &hooks.update {
            let mut ctx = self.context(attempt);
            guarded(hook.name(), || {
                let before = hook_point("update", Edge::Before, hook.name());
                fault_point!(&before, &task, |msg| Err(HookError::Injected(msg)));
                hook.update(&mut ctx, new)?;
                let after = hook_point("update", Edge::After, hook.name());
                fault_point!(&after, &task, |msg| Err(HookError::Injected(msg)));
                Ok(())
            })?;
        }
        Ok(())
    }

    pub(super) fn context(&mut self, attempt: u32) -> HookContext<'_> {
        HookContext {
            alloc_id: &self.deps.alloc_id,
            task: &self.task,
            alloc_dir: &self.deps.alloc_dir,
            attempt,
            record: &mut self.record,
        }
    }

    pub(super) fn run_poststart_hooks(&mut self, running: &RunningTask, attempt: u32) {
        let hooks = self.deps.hooks.clone();
        for hook in &hooks.poststart {
            fault_point!(
                &hook_point("poststart", Edge::Before, hook.name()),
                self.name()
            );
            let mut ctx = self.context(attempt);
            let res = guarded(hook.name(), || hook.poststart(&mut ctx, running));
            self.hook_result(hook.name(), attempt, res);
            fault_point!(
                &hook_point("poststart", Edge::After, hook.name()),
                self.name()
            );
        }
    }

    pub(super) fn run_exited_hooks(
        &mut self,
        running: &RunningTask,
        result: Option<&ExitResult>,
        attempt: u32,
    ) {
        let hooks = self.deps.hooks.clone();
        for hook in &hooks.exited {
            fault_point!(
                &hook_point("exited", Edge::Before, hook.name()),
                self.name()
            );
            let mut ctx = self.context(attempt);
            let res = guarded(hook.name(), || hook.exited(&mut ctx, running, result));
            self.hook_result(hook.name(), attempt, res);
            fault_point!(&hook_point("exited", Edge::After, hook.name()), self.name());
        }
    }

    /// Prekill hooks; the longest hold on the kill signal they ask for.
    pub(super) fn run_prekill_hooks(&mut self, attempt: u32) -> std::time::Duration {
        let hooks = self.deps.hooks.clone();
        let mut hold = std::time::Duration::ZERO;
        for hook in &hooks.prekill {
            fault_point!(
                &hook_point("prekill", Edge::Before, hook.name()),
                self.name()
            );
            let mut ctx = self.context(attempt);
            let mut asked = std::time::Duration::ZERO;
            let res = guarded(hook.name(), || {
                asked = hook.prekill(&mut ctx)?;
                Ok(())
            });
            hold = hold.max(asked);
            self.hook_result(hook.name(), attempt, res);
            fault_point!(
                &hook_point("prekill", Edge::After, hook.name()),
                self.name()
            );
        }
        hold
    }

    pub(super) fn run_stop_hooks(&mut self) {
        let hooks = self.deps.hooks.clone();
        let attempt = self.current_attempt();
        for hook in &hooks.stop {
            fault_point!(&hook_point("stop", Edge::Before, hook.name()), self.name());
            let mut ctx = self.context(attempt);
            let res = guarded(hook.name(), || hook.stop(&mut ctx));
            self.hook_result(hook.name(), attempt, res);
            fault_point!(&hook_point("stop", Edge::After, hook.name()), self.name());
        }
    }

    /// Hooks after the start are best effort, as in Nomad: a failure is an
    /// event, not a reason to tear down a running task.
    pub(super) fn hook_result(&mut self, hook: &str, attempt: u32, res: Result<(), HookError>) {
        match res {
            Ok(()) => {}
            // Only an injected error does not name its hook.
            Err(err @ HookError::Injected(_)) => {
                self.emit(EventKind::HookFailed, attempt, format!("{hook}: {err}"))
            }
            Err(err) => self.emit(EventKind::HookFailed, attempt, err.to_string()),
        }
    }
}
