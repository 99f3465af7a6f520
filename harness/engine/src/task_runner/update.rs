//! In-place updates: the task runner takes a new definition between
//! attempts, after its update hooks ran, never half-way through one.

use super::*;

impl TaskRunner {
    /// Takes the latest in-place update, if there is one the runner does
    /// not run yet: its update hooks, then the new definition and restart
    /// policy, all at once. A failed hook leaves the old definition whole;
    /// the update is offered again at the next boundary. Its event is
    /// written with what the boundary leads to (every caller writes next):
    /// written alone, it showed an ended attempt's failure undecided.
    pub(super) fn take_update(&mut self, attempt: u32, tracker: &mut RestartTracker) {
        let mut new = self.definition_rx.borrow().clone();
        if new == self.task || SeededBug::UpdateNeverTaken.active() {
            return;
        }
        if SeededBug::UpdateHalfTaken.active() {
            new.meta.clone_from(&self.task.meta);
        }
        if let Err(err) =
            self.run_hooks::<dyn UpdateHook>(attempt, |hook, ctx| hook.update(ctx, &new))
        {
            self.emit(EventKind::HookFailed, attempt, err.to_string());
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
    }
}
