//! The catalogue of fault points. Per-task points are reached with the task's
//! name as scope (`sidecar:tr.before_prestart`); hook points are built from
//! the hook kind and name with [`hook_point`].

/// Record-only: the harness (or an agent acting for it) delivered a stop update.
pub const HARNESS_STOP_DELIVERED: &str = "harness.stop_delivered";
/// Record-only, with the version as its detail: the harness delivered an
/// in-place update (the alloc's next job version).
pub const HARNESS_UPDATE_DELIVERED: &str = "harness.update_delivered";

/// The agent's control server read a request and is about to carry it out.
pub const CONTROL_ANSWERING: &str = "control.answering";
/// Record-only: a follower (of a run, a stop, `logs -f`) hung up, and the
/// agent let its connection go without waiting for the next event.
pub const CONTROL_FOLLOWER_LEFT: &str = "control.follower_left";

/// An agent passed its drain check and is placing a job: a drain that
/// begins here must still wait for the alloc it places.
pub const AGENT_PLACING: &str = "agent.placing";

/// An agent's engine recorded and started an allocation that the agent
/// has not adopted yet: a stop of it here must reach it, never be refused
/// as one no agent restored.
pub const AGENT_RECORDED: &str = "agent.recorded";
/// Record-only: a lookup by name found a recorded allocation not yet
/// adopted while a placement was under way, and waits for that placement.
pub const AGENT_AWAITING_PLACEMENT: &str = "agent.awaiting_placement";

/// An agent resolved a name to an allocation from its records and is about
/// to look for it among those it runs: an alloc that ends here is told
/// finished, never taken for one no agent restored.
pub const AGENT_RESOLVED: &str = "agent.resolved";

// Alloc runner, while applying an alloc update (handleAllocUpdate in
// docs/nomad-prestart-race-report.txt).
pub const AR_UPDATE_RECEIVED: &str = "ar.update_received";
pub const AR_ALLOC_STATE_SET: &str = "ar.alloc_state_set";
/// Record-only: a stop made the alloc terminal (its start gate is shut);
/// reached just before `ar.alloc_state_set`, and only by that update, or
/// as a restored alloc that was stopping starts.
pub const AR_ALLOC_TERMINAL: &str = "ar.alloc_terminal";
pub const AR_TASK_RUNNERS_UPDATED: &str = "ar.task_runners_updated";
pub const AR_KILL_STARTED: &str = "ar.kill_started";

/// Record-only: an alloc runner started (a new alloc's, or a restored
/// one's); its tasks' restart trackers begin after it.
pub const AR_STARTED: &str = "ar.started";

/// Record-only: the alloc runner saw every task dead and set the alloc's
/// client status; an update it was still applying finishes after this.
pub const AR_FINISHED: &str = "ar.finished";

/// Record-only: the update handler finished applying one update.
pub const AR_UPDATE_APPLIED: &str = "ar.update_applied";

// Alloc runner, while applying a user restart (Nomad's `alloc restart`).
/// The restart reached the update handler, behind the updates before it.
pub const AR_RESTART_RECEIVED: &str = "ar.restart_received";
/// Record-only, with the scope as its detail: the restart was accepted;
/// every start is held from here until its targets are down.
pub const AR_RESTART_ACCEPTED: &str = "ar.restart_accepted";
/// Every target of the restart is down; the start conditions reopen next.
pub const AR_RESTART_TARGETS_DOWN: &str = "ar.restart_targets_down";
/// Record-only: the restart let starts through again (after the stop sent
/// during it, if one was).
pub const AR_RESTART_RELEASED: &str = "ar.restart_released";

/// Update boundaries in the order one update passes them.
pub const UPDATE_BOUNDARIES: [&str; 4] = [
    AR_UPDATE_RECEIVED,
    AR_ALLOC_STATE_SET,
    AR_TASK_RUNNERS_UPDATED,
    AR_KILL_STARTED,
];

// Task runner MAIN loop, scoped by task name.
pub const TR_START_CONDITION_MET: &str = "tr.start_condition_met";
pub const TR_BEFORE_PRESTART: &str = "tr.before_prestart";
pub const TR_AFTER_PRESTART: &str = "tr.after_prestart";
pub const TR_BEFORE_DRIVER_START: &str = "tr.before_driver_start";
pub const TR_AFTER_DRIVER_START: &str = "tr.after_driver_start";

/// Between the start gate's commit (persisted) and the executor launch: not
/// part of the stop-race enumeration (a stop can no longer stop this
/// attempt here), but an agent killed here must not start the task twice.
pub const TR_START_COMMITTED: &str = "tr.start_committed";

/// Record-only: the task runner saw its alloc terminal (or itself killed) and
/// will not start this attempt.
pub const TR_OBSERVED_TERMINAL: &str = "tr.observed_terminal";
/// Record-only: the task runner left its MAIN loop for good.
pub const TR_MAIN_EXITED: &str = "tr.main_exited";

/// The task runner was told to die (the coordinator's kill reached it),
/// before it signals its task.
pub const TR_KILLING: &str = "tr.killing";

/// The task runner took a user restart that ends its live attempt (before
/// it signals its task) or brings it back from the dead.
pub const TR_RESTART_SIGNALED: &str = "tr.restart_signaled";
/// The task runner took a user restart that found its attempt already over
/// (its own exit came first, or its executor is gone): the restart stays
/// owed, and cuts short the delay the policy gives next.
pub const TR_RESTART_KEPT: &str = "tr.restart_kept";

/// The task runner decided to restart its task by the restart policy
/// and persisted it (the "Restarting" event, the count, when the delay
/// ends); reached just before it waits out the delay.
pub const TR_RESTART_DELAY: &str = "tr.restart_delay";
/// Record-only: a restart delay ran out in full; neither a kill nor a user
/// restart cut it short.
pub const TR_RESTART_DELAY_ELAPSED: &str = "tr.restart_delay_elapsed";
/// Record-only, with the wait as its detail: the task runner decided a
/// restart by its policy, and chose to wait that long first. Recorded while
/// the runner's kill is held still: a kill is either seen here (no restart
/// is decided) or asked after the record.
pub const TR_RESTART_DECIDED: &str = "tr.restart_decided";

/// Reached by the alloc runner, for the task, once it asked the task's
/// runner to restart (a user restart's wave reached it).
pub const TR_RESTART_ASKED: &str = "tr.restart_asked";
/// Reached by the alloc runner, for the task, once it told the task's
/// runner to die (a stop's kill, or the coordinator's).
pub const TR_KILL_ASKED: &str = "tr.kill_asked";

/// A restored task runner is about to look for the executor of the attempt
/// the dead agent committed (running, lost, or ended while no agent ran).
pub const TR_RESTORING: &str = "tr.restoring";
/// A restored task runner reattached to the committed attempt's executor,
/// and is about to ask it whether a dead runner doomed its task. Engine
/// tests lose the executor here; scenario files do not name it.
pub const TR_REATTACHED: &str = "tr.reattached";

/// Task runner boundaries in the order one attempt passes them.
pub const TASK_RUNNER_BOUNDARIES: [&str; 5] = [
    TR_START_CONDITION_MET,
    TR_BEFORE_PRESTART,
    TR_AFTER_PRESTART,
    TR_BEFORE_DRIVER_START,
    TR_AFTER_DRIVER_START,
];

// Executor process, scoped by task name; configured through the environment.
pub const EX_AFTER_CGROUP: &str = "ex.after_cgroup";
pub const EX_AFTER_MOUNTS: &str = "ex.after_mounts";
pub const EX_BEFORE_EXEC: &str = "ex.before_exec";

pub const EXECUTOR_BOUNDARIES: [&str; 3] = [EX_AFTER_CGROUP, EX_AFTER_MOUNTS, EX_BEFORE_EXEC];

/// In the executor: no executor answered on the task's socket path, and
/// this one is about to claim it.
pub const EX_BEFORE_BIND: &str = "ex.before_bind";

/// In the engine's process (the executor client): the executor daemon was
/// forked and the launch waits for its ready report; the socket may not
/// be bound yet.
pub const EX_SPAWNED: &str = "ex.spawned";
/// In the engine's process (the executor client): the task's lock is held
/// by a process that is no executor of the task (a launcher's fork child
/// before its exec), and the launch or destroy is about to wait for it.
/// Only concurrent launches lead there, which no scenario can steer, so
/// scenario files do not name it; tests park at it.
pub const EX_LOCK_WAITED: &str = "ex.lock_waited";
/// Record-only, in the executor: its task's process exited (the hit
/// carries the exit).
pub const EX_TASK_EXITED: &str = "ex.task_exited";
/// Record-only, in the executor: it answered a runner told to die (or to
/// restart) whether its task ended on its own, under the lock it records
/// exits under. An exit recorded before the first such answer, and before
/// any kill signal, is the task's own end; one after it, the kill's (or
/// the restart's).
pub const EX_PEEKED: &str = "ex.peeked";
/// Record-only, in the executor: the task's first output on a stream
/// reached its log. What a task does before it writes, it has done: a
/// fault that must not act before the task's own set-up (a trap, a marker
/// file) awaits this.
pub const EX_TASK_OUTPUT: &str = "ex.task_output";

/// Every per-task point a fault can act at, other than the hook points
/// (which the engine's hook set names), for scenario files to name and
/// check against. (`ex.task_exited`, `tr.restart_delay_elapsed` and
/// `tr.restart_decided` only record.)
pub const TASK_POINTS: [&str; 20] = [
    TR_RESTORING,
    TR_START_CONDITION_MET,
    TR_BEFORE_PRESTART,
    TR_AFTER_PRESTART,
    TR_BEFORE_DRIVER_START,
    TR_START_COMMITTED,
    EX_SPAWNED,
    EX_AFTER_CGROUP,
    EX_BEFORE_BIND,
    EX_AFTER_MOUNTS,
    EX_BEFORE_EXEC,
    TR_AFTER_DRIVER_START,
    TR_KILLING,
    TR_RESTART_SIGNALED,
    TR_RESTART_KEPT,
    TR_RESTART_DELAY,
    TR_RESTART_ASKED,
    TR_KILL_ASKED,
    TR_OBSERVED_TERMINAL,
    TR_MAIN_EXITED,
];

/// Per-task points that only record (no fault acts at them), which a
/// fault can still await.
pub const RECORDED_TASK_POINTS: [&str; 5] = [
    EX_TASK_EXITED,
    EX_PEEKED,
    EX_TASK_OUTPUT,
    TR_RESTART_DELAY_ELAPSED,
    TR_RESTART_DECIDED,
];

/// Every alloc-wide point.
pub const ALLOC_POINTS: [&str; 8] = [
    AR_UPDATE_RECEIVED,
    AR_ALLOC_STATE_SET,
    AR_TASK_RUNNERS_UPDATED,
    AR_KILL_STARTED,
    AR_UPDATE_APPLIED,
    AR_RESTART_RECEIVED,
    AR_RESTART_TARGETS_DOWN,
    HARNESS_STOP_DELIVERED,
];

/// Points reached in the executor process: configured through its
/// environment, not the engine's.
pub fn in_executor(point: &str) -> bool {
    EXECUTOR_BOUNDARIES.contains(&point) || point == EX_BEFORE_BIND
}

/// The hook phase whose fault points run inside the hooks' panic guard: a
/// panic there fails the hook (the update is deferred, as for an error).
pub const GUARDED_HOOK_PHASE: &str = "update";

/// Whether a panic injected at the task point `point` panics the task's
/// runner: every point the runner itself reaches (its boundaries, the
/// launch's, a hook's outside the guard), not one the alloc runner reaches
/// for the task, nor an executor's.
pub fn panics_task_runner(point: &str) -> bool {
    let guarded = point.starts_with(&format!("hook.{GUARDED_HOOK_PHASE}."));
    !guarded && !in_executor(point) && point != TR_KILL_ASKED && point != TR_RESTART_ASKED
}

/// `hook.<kind>.<before|after>.<hook name>`, e.g. `hook.prestart.before.task_dir`.
pub fn hook_point(kind: &str, edge: Edge, hook: &str) -> String {
    format!("hook.{kind}.{}.{hook}", edge.as_str())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    Before,
    After,
}

impl Edge {
    pub fn as_str(self) -> &'static str {
        match self {
            Edge::Before => "before",
            Edge::After => "after",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_panics_the_task_runner_only_at_the_runners_own_points() {
        for runner in [
            TR_BEFORE_PRESTART,
            EX_SPAWNED,
            "hook.prestart.before.task_dir",
            "hook.stop.after.forget_handle",
        ] {
            assert!(panics_task_runner(runner), "{runner}");
        }
        for other in [
            TR_KILL_ASKED,
            TR_RESTART_ASKED,
            EX_AFTER_CGROUP,
            EX_BEFORE_BIND,
            "hook.update.before.task_env",
        ] {
            assert!(!panics_task_runner(other), "{other}");
        }
    }
}
