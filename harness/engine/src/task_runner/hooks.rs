//! Running a task runner's hooks: one runner for every phase, the phase
//! told by the hooks' trait (see [`PhaseHook`]), with a fault point before
//! and after each hook, named after its phase.

use super::*;
use crate::hooks::{HookPhase, PhaseHook};

impl TaskRunner {
    /// Runs the hooks of `H`'s phase for `attempt`, in order, `call`
    /// running one. A phase that must not fail (prestart, update) stops at
    /// the first failure, an error injected at a fault point among them,
    /// and returns it; the others are best effort, as in Nomad: a failure
    /// is an event, the next hook runs, and an injected error at their
    /// points is no failure (the point still pauses, delays or panics).
    /// Their return says whether a hook failed.
    pub(super) fn run_hooks<H: PhaseHook + ?Sized>(
        &mut self,
        attempt: u32,
        mut call: impl FnMut(&H, &mut HookContext<'_>) -> Result<(), HookError>,
    ) -> Result<HooksRan, HookError> {
        let phase = H::PHASE;
        let hooks = self.deps.hooks.clone();
        let task = self.task.name.clone();
        let faults = self.deps.faults.clone();
        let mut ran = HooksRan::AllDone;
        for hook in H::of(&hooks) {
            let name = hook.name();
            let edge = |edge| reach(&faults, phase, edge, name, &task);
            let mut ctx = self.context(attempt);
            if phase.points_in_guard() {
                // A panic at the points is the hook's: the update is
                // deferred, as for an error.
                guarded(name, || {
                    edge(Edge::Before)?;
                    call(hook, &mut ctx)?;
                    edge(Edge::After)
                })?;
                continue;
            }
            let before = edge(Edge::Before);
            if !phase.best_effort() {
                before?;
            }
            let res = guarded(name, || call(hook, &mut ctx));
            if phase.best_effort() {
                if res.is_err() {
                    ran = HooksRan::SomeFailed;
                }
                self.hook_result(name, attempt, res);
            } else {
                res?;
            }
            let after = edge(Edge::After);
            if !phase.best_effort() {
                after?;
            }
        }
        Ok(ran)
    }

    pub(super) fn run_poststart_hooks(&mut self, running: &RunningTask, attempt: u32) {
        let done =
            self.run_hooks::<dyn PoststartHook>(attempt, |hook, ctx| hook.poststart(ctx, running));
        debug_assert!(done.is_ok(), "poststart hooks are best effort");
    }

    /// Exited hooks. One that failed is an executor that could not be shut
    /// down (it died just then, say), which leaves the task's cgroup and
    /// files: they are destroyed, as the next launch or a restore would.
    /// Not for an attempt with no result: it was lost, and
    /// [`TaskRunner::lose_attempt`] destroys (or destroyed) what it left.
    pub(super) async fn run_exited_hooks(
        &mut self,
        running: &RunningTask,
        result: Option<&ExitResult>,
        attempt: u32,
    ) {
        let done = self
            .run_hooks::<dyn ExitedHook>(attempt, |hook, ctx| hook.exited(ctx, running, result));
        debug_assert!(done.is_ok(), "exited hooks are best effort");
        if result.is_some() && !matches!(done, Ok(HooksRan::AllDone)) {
            let _ = self.destroy_remains().await;
        }
    }

    /// Prekill hooks; the longest hold on the kill signal they ask for.
    pub(super) fn run_prekill_hooks(&mut self, attempt: u32) -> Duration {
        let mut hold = Duration::ZERO;
        let done = self.run_hooks::<dyn PrekillHook>(attempt, |hook, ctx| {
            hold = hold.max(hook.prekill(ctx)?);
            Ok(())
        });
        debug_assert!(done.is_ok(), "prekill hooks are best effort");
        hold
    }

    pub(super) fn run_stop_hooks(&mut self) {
        let attempt = self.current_attempt();
        let done = self.run_hooks::<dyn StopHook>(attempt, |hook, ctx| hook.stop(ctx));
        debug_assert!(done.is_ok(), "stop hooks are best effort");
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

    /// A best-effort hook's failure is an event, not a reason to tear down
    /// a running task.
    fn hook_result(&mut self, hook: &str, attempt: u32, res: Result<(), HookError>) {
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

/// How a best-effort phase's hooks went; a phase that must not fail stops
/// at its first failure instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HooksRan {
    AllDone,
    SomeFailed,
}

/// Reaches the fault point at `edge` of `hook` in `phase`: an error
/// injected there comes back as the hook's.
fn reach(
    faults: &Faults,
    phase: HookPhase,
    edge: Edge,
    hook: &str,
    task: &str,
) -> Result<(), HookError> {
    fault_point!(faults, &phase.point(edge, hook), task, |msg| Err(
        HookError::Injected(msg)
    ));
    Ok(())
}
