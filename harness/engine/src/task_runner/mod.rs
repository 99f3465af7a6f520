//! The task runner: one task's MAIN loop, as in Nomad's `TaskRunner.Run`:
//! wait for the start condition, run prestart hooks, commit the start at the
//! start gate, start the driver, run poststart hooks, wait for exit or kill,
//! run exited hooks, ask the restart tracker, and finally run stop hooks.
//! Each concern beside it has its own file: starting an attempt
//! (`start`), hooks (`hooks`), in-place updates (`update`), the kill path
//! (`kill`), restart decisions (`restarts`), restore (`restore`), the
//! executor's spec (`spec`) and the task's record (`record`).

use crate::alloc::AllocStatus;
use crate::alloc_dir::AllocDir;
use crate::clock::Clock;
use crate::driver::{Driver, RunningTask};
use crate::hooks::{
    guarded, ExitedHook, HookContext, HookError, HookSet, PoststartHook, PrekillHook, PrestartHook,
    StopHook, TaskSetup, UpdateHook,
};
use crate::job::{JobType, Task};
use crate::restart::{Jitter, RestartDecision, RestartTracker};
use crate::start_gate::{PrestartReceipt, StartGate, StartRefused};
use crate::state::{AttemptEnded, DoomedAttempt, EndedBy, FailedStart, StateDb, TaskRecord};
use crate::task_state::{EventKind, Outcome, TaskEvent, TaskState};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use taskgate_executor::{
    Doom, ExecutorError, ExitPeek, ExitResult, Remains, Resources, Rlimits, TaskSpec,
};
use taskgate_faults::points::{self, Edge};
use taskgate_faults::seeded::SeededBug;
use taskgate_faults::{fault_point, record_point, Faults};
use tokio::sync::{mpsc, watch};

mod hooks;
mod kill;
mod panic;
mod record;
mod restarts;
mod restore;
mod seeded;
mod spec;
mod start;
mod update;
use record::describe_exit;
use restarts::Ask;
use restore::unknown_handle;
use start::PrestartError;
#[cfg(test)]
mod tests;
pub use panic::PanicCleanup;
pub use spec::SpecDefaults;

/// What the task runner needs from its alloc runner.
pub struct TaskRunnerDeps {
    pub alloc_id: String,
    pub alloc_dir: AllocDir,
    pub hooks: Arc<HookSet>,
    pub driver: Arc<dyn Driver>,
    pub gate: Arc<StartGate>,
    pub state: Arc<StateDb>,
    pub defaults: Arc<SpecDefaults>,
    /// Where executors keep their sockets (see `taskgate_executor::socket_path`).
    pub run_dir: PathBuf,
    pub clock: Arc<dyn Clock>,
    /// What a successful exit means for the alloc's tasks.
    pub job_type: JobType,
    /// The engine's seed for restart jitter.
    pub restart_seed: u64,
    pub events: mpsc::UnboundedSender<TaskEvent>,
    /// The run's fault points.
    pub faults: Faults,
}

/// The alloc runner's side of a task runner.
pub struct TaskRunnerHandle {
    pub task: Task,
    pub start: watch::Sender<bool>,
    pub kill: watch::Sender<bool>,
    /// Nomad's `tr.Update(alloc)`: the task runner's own view of the alloc.
    pub alloc: watch::Sender<AllocStatus>,
    /// The task's definition from the latest in-place update; the runner
    /// takes it between attempts (see [`crate::hooks::UpdateHook`]).
    pub definition: watch::Sender<Task>,
    /// The latest user restart asked of the task.
    pub restart: watch::Sender<RestartAsk>,
    /// The latest generation the task is down for: waiting at its start
    /// condition with nothing of the restarted attempt left.
    pub restarted: watch::Receiver<u64>,
    pub state: watch::Receiver<TaskState>,
}

pub struct TaskRunner {
    task: Task,
    deps: TaskRunnerDeps,
    record: TaskRecord,
    published: usize,
    start_rx: watch::Receiver<bool>,
    kill_rx: watch::Receiver<bool>,
    alloc_rx: watch::Receiver<AllocStatus>,
    definition_rx: watch::Receiver<Task>,
    restart_rx: watch::Receiver<RestartAsk>,
    restarted_tx: watch::Sender<u64>,
    /// Set once the alloc is done: a dead task's runner may return.
    finished_rx: watch::Receiver<bool>,
    state_tx: Arc<watch::Sender<TaskState>>,
    /// Set when restoring a task whose executor should still be running.
    restoring: bool,
    /// `changed` tells the alloc runner's coordinator to look again.
    changed: mpsc::UnboundedSender<()>,
}

/// A user restart asked of one task runner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestartAsk {
    /// Counts the restarts asked; a runner acknowledges each by its number.
    pub generation: u64,
    /// All tasks restart: a dead task comes back too. Otherwise only a
    /// live attempt is ended (or a restart delay cut short).
    pub all_tasks: bool,
}

/// How one attempt ended.
enum AttemptEnd {
    Exited(ExitResult),
    Killed(Option<ExitResult>),
    /// Ended by a user restart: the next attempt follows, outside the policy.
    Restarted(Option<ExitResult>),
    /// The executor was unreachable (e.g. lost while the agent was down).
    Lost(String),
}

impl TaskRunner {
    pub fn new(
        task: Task,
        deps: TaskRunnerDeps,
        record: TaskRecord,
        alloc: AllocStatus,
        changed: mpsc::UnboundedSender<()>,
        finished: watch::Receiver<bool>,
    ) -> (TaskRunner, TaskRunnerHandle) {
        let (start_tx, start_rx) = watch::channel(false);
        let (kill_tx, kill_rx) = watch::channel(false);
        let (alloc_tx, alloc_rx) = watch::channel(alloc);
        let (definition_tx, definition_rx) = watch::channel(task.clone());
        let (restart_tx, restart_rx) = watch::channel(RestartAsk::default());
        let (restarted_tx, restarted_rx) = watch::channel(0);
        // A record dead yet holding a handle (a dead agent's panic cleanup)
        // may have its task still running until `run` kills it: the alloc
        // runner must not act on that death before (a sibling killed, a
        // poststop task started, beside the task's tree).
        //
        // A task a dead agent's runner told to restart (or whose restart
        // it kept as owed, the attempt over before the restart reached it)
        // runs again only once this runner has carried the restart
        // through: shown pending, so the siblings that start after it wait
        // for it, as a restart of the alloc holds them.
        let shown = match (&record.state, &record.handle) {
            (TaskState::Dead { .. }, Some(_)) => TaskState::Running {
                attempt: record.committed.unwrap_or(0),
            },
            (TaskState::Running { attempt }, _)
                if record.doomed_by(*attempt) == Some(Doom::Restart)
                    || record.restart_owed == Some(*attempt) =>
            {
                TaskState::Pending
            }
            (state, _) => state.clone(),
        };
        let (state_tx, state_rx) = watch::channel(shown);
        let state_tx = Arc::new(state_tx);
        let restoring =
            matches!(record.state, TaskState::Running { .. }) || record.committed > record.launched;
        let published = record.events.len();
        let mut record = record;
        // A record no runner ever published: the task's first runner, whose
        // first event is Nomad's "Received" (streamed with its first publish).
        if record.events.is_empty() {
            let received = TaskEvent::new(
                &task.name,
                EventKind::Received,
                0,
                "Task received by client",
            );
            record.add_event(received);
        }
        if SeededBug::RestartCountReset.active() && restoring {
            record.restarts = 0;
            record.restart_window = None;
        }
        if SeededBug::RestartWindowLost.active() && restoring {
            record.restart_window = None;
        }
        let handle = TaskRunnerHandle {
            task: task.clone(),
            start: start_tx,
            kill: kill_tx,
            alloc: alloc_tx,
            definition: definition_tx,
            restart: restart_tx,
            restarted: restarted_rx,
            state: state_rx,
        };
        let runner = TaskRunner {
            task,
            deps,
            record,
            published,
            start_rx,
            kill_rx,
            alloc_rx,
            definition_rx,
            restart_rx,
            restarted_tx,
            finished_rx: finished,
            state_tx,
            restoring,
            changed,
        };
        (runner, handle)
    }

    fn name(&self) -> &str {
        &self.task.name
    }

    /// Nomad's `shouldShutdown`: the runner's *view* of the alloc, which the
    /// alloc runner updates before it starts killing. Only an early exit; the
    /// start gate has the final word.
    fn should_shutdown(&self) -> bool {
        let alloc = *self.alloc_rx.borrow();
        alloc.client_terminal() || (!self.task.is_poststop() && alloc.server_terminal())
    }

    fn killed(&self) -> bool {
        *self.kill_rx.borrow()
    }

    /// What cleans up after this runner if it panics (see [`PanicCleanup`]).
    pub fn panic_cleanup(&self) -> PanicCleanup {
        PanicCleanup {
            alloc_id: self.deps.alloc_id.clone(),
            task: self.task.name.clone(),
            driver: self.deps.driver.clone(),
            state: self.deps.state.clone(),
            state_tx: self.state_tx.clone(),
            socket: self.socket_path(),
            changed: self.changed.clone(),
            faults: self.deps.faults.clone(),
        }
    }

    pub async fn run(mut self) -> TaskRecord {
        self.seeded_restore_bugs();
        // Recorded dead with a handle: a dead agent's runner decided the
        // task's death (its panic's cleanup) and died before it killed
        // what was left, which is killed here.
        if let (true, Some(info)) = (self.record.state.is_dead(), self.record.handle.clone()) {
            let (alloc_id, task) = (&self.deps.alloc_id, &self.task.name);
            panic::kill_what_is_left(self.deps.driver.as_ref(), info, alloc_id, task).await;
            self.record.handle = None;
            self.state_tx.send_replace(self.record.state.clone());
            self.publish();
        }
        loop {
            // A task restored dead stays dead, unless all tasks restart.
            if !self.record.state.is_dead() {
                self.live().await;
            }
            if self.task.is_poststop() || !self.revived().await {
                return self.record;
            }
        }
    }

    /// The task's life up to its death.
    async fn live(&mut self) {
        let outcome = self.main_loop().await;
        if outcome.failed() {
            if let Some(last) = self.record.events.last_mut() {
                last.fails_task = true;
            }
        }
        fault_point!(self.deps.faults, points::TR_MAIN_EXITED, self.name());
        self.run_stop_hooks();
        self.set_state(TaskState::Dead { outcome });
        self.publish();
    }

    /// Once dead: waits for the alloc to finish (false), or for a restart
    /// of all tasks to bring the task back (true), pending as before its
    /// first start. The alloc runner only asks a dead task to restart when
    /// all tasks restart.
    async fn revived(&mut self) -> bool {
        loop {
            // An ask may have come while the task was dying (its live
            // attempt ended on its own first): answered here.
            let ask = *self.restart_rx.borrow_and_update();
            if ask.generation > *self.restarted_tx.borrow() {
                if ask.all_tasks || SeededBug::RestartRerunsCompletedPrestart.active() {
                    break;
                }
                // Only a running task restarts: done with, as it is.
                self.restarted_tx.send_replace(ask.generation);
            }
            tokio::select! {
                biased;
                _ = self.finished_rx.wait_for(|done| *done) => return false,
                _ = asked(&mut self.restart_rx) => {}
            }
        }
        fault_point!(self.deps.faults, points::TR_RESTART_SIGNALED, self.name());
        if let Err(err) = self.record.state.revive() {
            panic!("task {}: {err}", self.task.name);
        }
        self.state_tx.send_replace(self.record.state.clone());
        // What is restored is over, and no restart delay of its old life
        // (a runner that panicked in one left it): the next attempt starts
        // afresh, in the restart window the task was in.
        self.restoring = false;
        self.record.restart_due = None;
        self.record.restart_wait = None;
        self.record.restart_window_before = None;
        self.record.restart_owed = None;
        let attempt = self.current_attempt();
        self.emit(
            EventKind::RestartSignaled,
            attempt,
            "User requested restart: the task runs again",
        );
        self.publish();
        true
    }

    /// Waits for the start condition (false), or a kill before it came
    /// (true). The task is down here: every restart asked of it so far is
    /// acknowledged, and those asked while it waits are too.
    async fn wait_for_start(&mut self) -> bool {
        loop {
            let asked_so_far = self.restart_rx.borrow_and_update().generation;
            self.restarted_tx.send_replace(asked_so_far);
            tokio::select! {
                biased;
                _ = told(&mut self.kill_rx) => return true,
                _ = told(&mut self.start_rx) => return false,
                _ = asked(&mut self.restart_rx) => {}
            }
        }
    }

    async fn main_loop(&mut self) -> Outcome {
        let now = self.deps.clock.now();
        let mut tracker = RestartTracker::new(
            self.task.restart.clone(),
            self.deps.job_type.restarts_on_success(&self.task),
            Jitter::new(self.deps.restart_seed, &self.deps.alloc_id, self.name()),
            now,
        )
        .resumed(
            self.record.restarts,
            self.record.restart_window,
            self.record.window_ahead(now),
        );
        self.record.restart_window = Some(tracker.window());
        let mut attempt = self.record.committed.unwrap_or(0);
        if self.record.restart_owed == Some(attempt) {
            // A dead agent's runner kept a user restart this attempt had
            // outlived: still owed, it cuts the policy's delay short here
            // (the rest of one begun, or the one decided below).
            self.restart_rx.mark_changed();
        }
        let ended = (self.record.ended.clone())
            .filter(|e| e.attempt == attempt && !SeededBug::RerunCompletedTask.active());
        if let (true, Some(ended)) = (self.restoring, ended) {
            if let Some(outcome) = self.restore_ended(ended, &mut tracker).await {
                return outcome;
            }
        } else if self.restoring {
            match self.restore(attempt).await {
                Ok(running) => {
                    let end = self.supervise_restored(&running).await;
                    if let Some(outcome) = self
                        .after_attempt(&running, end, attempt, &mut tracker)
                        .await
                    {
                        return outcome;
                    }
                }
                // The alloc is stopping, or a dead agent's runner had set
                // out to end it: the loss is that kill's end (it ran, so it
                // is not "not started"), not the policy's to judge.
                Err(_)
                    if self.should_shutdown()
                        || self.killed()
                        || self.record.doomed_by(attempt) == Some(Doom::Kill) =>
                {
                    return Outcome::Killed { result: None };
                }
                Err(_) if self.record.doomed_by(attempt) == Some(Doom::Restart) => {
                    self.take_update(attempt, &mut tracker);
                    self.restart_now(attempt);
                }
                // Bug 1 of issue 22: a lost attempt is a failed start, which
                // the restart policy decides on; it used to start the next
                // attempt at once, uncounted, even with no restart left.
                Err(why) if !SeededBug::LostAttemptUncounted.active() => {
                    if let Some(outcome) = self.lost(why, attempt, &mut tracker).await {
                        return outcome;
                    }
                }
                Err(_) => {
                    if matches!(self.record.state, TaskState::Running { .. }) {
                        self.set_state(TaskState::Pending);
                    }
                }
            }
        } else if let Some(failed) = self.record.start_failed.clone() {
            // A dead agent's runner wrote this failed start and died taking
            // an update, before its decision: decided here, as it would have.
            attempt = failed.attempt;
            if let Some(outcome) = self.decide_failed_start(failed, &mut tracker).await {
                return outcome;
            }
        } else if let Some(outcome) = self.rest_of_restart_delay(attempt, &mut tracker).await {
            return outcome;
        }
        // Nomad's `MAIN: for !tr.shouldShutdown()`.
        while !self.should_shutdown() {
            if self.wait_for_start().await {
                return self.not_started("killed before its start condition was met");
            }
            fault_point!(
                self.deps.faults,
                points::TR_START_CONDITION_MET,
                self.name()
            );
            attempt += 1;
            self.take_update(attempt, &mut tracker);
            fault_point!(self.deps.faults, points::TR_BEFORE_PRESTART, self.name());
            let (receipt, setup) = match self.prestart(attempt) {
                Ok(ok) => ok,
                Err(PrestartError::AllocTerminal) => {
                    return self.not_started("allocation is terminal")
                }
                Err(PrestartError::Hook(err)) => {
                    let failure = (
                        EventKind::SetupFailure,
                        err.to_string(),
                        err.is_recoverable(),
                    );
                    match self.start_failed(failure, attempt, &mut tracker).await {
                        Some(outcome) => return outcome,
                        None => continue,
                    }
                }
            };
            fault_point!(self.deps.faults, points::TR_AFTER_PRESTART, self.name());
            fault_point!(
                self.deps.faults,
                points::TR_BEFORE_DRIVER_START,
                self.name()
            );
            match self.commit(receipt) {
                Ok(()) => {}
                // Back to the start condition, which the restart closed.
                Err(StartRefused::Held) => continue,
                Err(refused) => return self.not_started(&refused.to_string()),
            }
            fault_point!(self.deps.faults, points::TR_START_COMMITTED, self.name());
            let launch = self.launch(&setup).await;
            self.record.launched = Some(attempt);
            let running = match launch {
                Ok(running) => running,
                Err(err) => match self
                    .start_failed(
                        (EventKind::DriverFailure, err.to_string(), true),
                        attempt,
                        &mut tracker,
                    )
                    .await
                {
                    Some(outcome) => return outcome,
                    None => continue,
                },
            };
            fault_point!(self.deps.faults, points::TR_AFTER_DRIVER_START, self.name());
            self.set_state(TaskState::Running { attempt });
            self.emit(EventKind::Started, attempt, "Task started by client");
            self.run_poststart_hooks(&running, attempt);
            self.publish();
            let end = self.supervise(&running).await;
            if let Some(outcome) = self
                .after_attempt(&running, end, attempt, &mut tracker)
                .await
            {
                return outcome;
            }
        }
        self.not_started("allocation is terminal")
    }
}

/// Resolves once the alloc runner set the flag (start, or kill); never if
/// the alloc runner is gone: an agent shutting down drops its alloc runners
/// and must leave their tasks as they are for the next agent to restore. (A
/// closed channel used to count as the order itself: a sidecar was killed,
/// or a waiting task started, as the agent's runtime went down.)
async fn told(flag: &mut watch::Receiver<bool>) {
    if flag.wait_for(|set| *set).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves once a restart is asked that the runner has not seen yet;
/// never if the alloc runner is gone (see [`told`]).
async fn asked(restart: &mut watch::Receiver<RestartAsk>) {
    if restart.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}
