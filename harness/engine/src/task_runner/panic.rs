//! What happens when a task runner panics.

use super::unknown_handle;
use crate::driver::Driver;
use crate::state::{StateDb, TaskRecord};
use crate::task_state::{EventKind, Outcome, TaskEvent, TaskState};
use std::path::PathBuf;
use std::sync::Arc;
use taskgate_faults::points;
use taskgate_faults::{fault_point, Faults};
use tokio::sync::{mpsc, watch};

/// Cleans up after a task runner that panicked (a bug, or a panic injected
/// at one of its boundaries): whatever it may have started is killed, and
/// the task is recorded dead and failed, so the alloc runner's kill path and
/// completion still work instead of waiting forever on a runner that is gone.
pub struct PanicCleanup {
    pub(super) alloc_id: String,
    pub(super) task: String,
    pub(super) driver: Arc<dyn Driver>,
    pub(super) state: Arc<StateDb>,
    pub(super) state_tx: Arc<watch::Sender<TaskState>>,
    pub(super) socket: PathBuf,
    pub(super) changed: mpsc::UnboundedSender<()>,
    pub(super) faults: Faults,
}

impl PanicCleanup {
    pub async fn after_panic(self, panic: tokio::task::JoinError) -> TaskRecord {
        if panic.is_cancelled() {
            return self.as_left();
        }
        let reason = format!("task runner panicked: {panic}");
        // A panic a harness injected is its scenario's doing, not news.
        if reason.contains(taskgate_faults::INJECTED) {
            tracing::debug!(task = %self.task, %reason);
        } else {
            tracing::error!(task = %self.task, %reason);
        }
        let mut record = self.as_left();
        // What the attempt may have left is reached by its handle, or by
        // the executor's socket path when it was never persisted.
        let remains = (record.committed.is_some()).then(|| {
            (record.handle.clone()).unwrap_or_else(|| unknown_handle(self.socket.clone()))
        });
        // Failed even if it was dead: the panic came as it was revived (a
        // restart of all tasks), which it now never is. Written first, with
        // the handle: the panic is known to this agent alone, and an agent
        // killed from here on leaves the next one the decision and what is
        // left to kill (`TaskRunner::run`).
        self.fail(&mut record, reason);
        record.handle = remains.clone();
        self.persist(&record);
        fault_point!(self.faults, points::TR_MAIN_EXITED, self.task.as_str());
        if let Some(info) = remains {
            kill_what_is_left(self.driver.as_ref(), info, &self.alloc_id, &self.task).await;
            record.handle = None;
            self.persist(&record);
        }
        self.state_tx.send_replace(record.state.clone());
        let _ = self.changed.send(());
        record
    }

    fn persist(&self, record: &TaskRecord) {
        if let Err(err) = self.state.put_task(&self.alloc_id, record) {
            tracing::error!(task = %self.task, error = %err, "persisting task state failed");
        }
    }

    /// Records the task failed by its runner's panic, and first its running
    /// attempt killed if nothing ended it yet, as the kill path would have:
    /// every Started is followed by one end.
    fn fail(&self, record: &mut TaskRecord, reason: String) {
        let attempt = record.committed.unwrap_or(0);
        let unended =
            matches!(record.state, TaskState::Running { .. }) && !record.end_reported(attempt);
        if unended {
            record.add_event(TaskEvent::new(
                &self.task,
                EventKind::Killed,
                attempt,
                "Task killed after its task runner panicked",
            ));
        }
        record.add_event(TaskEvent {
            fails_task: true,
            ..TaskEvent::new(
                &self.task,
                EventKind::NotRestarting,
                attempt,
                reason.clone(),
            )
        });
        record.keep_recent_events();
        record.state = TaskState::Dead {
            outcome: Outcome::Failed { reason },
        };
    }

    /// The task's record as its runner last persisted it. A runner the
    /// runtime cancelled (the agent is shutting down) leaves it so: the task
    /// runs on, for the next agent to restore.
    fn as_left(&self) -> TaskRecord {
        (self.state.tasks(&self.alloc_id).ok())
            .and_then(|all| all.into_iter().find(|r| r.task == self.task))
            .unwrap_or_else(|| TaskRecord::new(&self.task))
    }
}

/// Kills what is left of a task's attempt at once: through its executor,
/// which records the task's end, or, if none answers at `info`, whatever
/// of the task is there.
pub(super) async fn kill_what_is_left(
    driver: &dyn Driver,
    info: taskgate_executor::ReattachInfo,
    alloc_id: &str,
    task: &str,
) {
    match driver.reattach(info).await {
        Ok(running) => {
            let _ = running
                .stop(
                    taskgate_executor::KillSignal::SIGKILL,
                    std::time::Duration::ZERO,
                    taskgate_executor::Doom::Kill,
                )
                .await;
            let _ = running.wait().await;
            let _ = tokio::task::spawn_blocking(move || running.shutdown()).await;
        }
        // Not answering (yet, or any more): kill whatever is there.
        Err(_) => {
            let _ = driver.destroy_remains(alloc_id, task).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_driver::{Call, FakeDriver};

    /// The cleanup of web's runner, web running attempt 1 (persisted).
    struct Running {
        cleanup: PanicCleanup,
        state: Arc<StateDb>,
        driver: FakeDriver,
        record: TaskRecord,
    }

    fn running_task(dir: &std::path::Path) -> Running {
        cleanup_of(
            dir,
            TaskState::Running { attempt: 1 },
            &[EventKind::Started],
        )
    }

    /// The cleanup of web's runner, its attempt 1 in `state` (persisted)
    /// after `events`.
    fn cleanup_of(dir: &std::path::Path, state: TaskState, events: &[EventKind]) -> Running {
        let record = TaskRecord {
            state,
            committed: Some(1),
            launched: Some(1),
            events: (events.iter())
                .map(|&kind| TaskEvent::new("web", kind, 1, "before the panic"))
                .collect(),
            ..TaskRecord::new("web")
        };
        let state = Arc::new(StateDb::open(&crate::DataDir::new(dir).state_db()).unwrap());
        state.put_task("a1", &record).unwrap();
        let faults = Faults::new();
        let driver = FakeDriver::new(dir.join("run"), faults.clone());
        let (changed, _) = mpsc::unbounded_channel();
        let cleanup = PanicCleanup {
            alloc_id: "a1".into(),
            task: "web".into(),
            driver: Arc::new(driver.clone()),
            state: state.clone(),
            state_tx: Arc::new(watch::channel(record.state.clone()).0),
            socket: dir.join("run/web.sock"),
            changed,
            faults,
        };
        Running {
            cleanup,
            state,
            driver,
            record,
        }
    }

    /// A runner whose task the runtime cancelled, as it does to every task
    /// when the agent shuts down (the task runs on), not one that panicked.
    async fn cancelled_runner() -> tokio::task::JoinError {
        let runner = tokio::spawn(std::future::pending::<()>());
        runner.abort();
        runner.await.expect_err("aborted")
    }

    /// The agent's runtime shutting down cancels the task runners; a
    /// cancelled runner's join was taken for a panic, and the cleanup
    /// killed the running task and recorded it dead and failed, so the next
    /// agent restored a failed alloc instead of reattaching.
    #[tokio::test]
    async fn a_cancelled_runner_leaves_its_task_to_the_next_agent() {
        let dir = tempfile::tempdir().unwrap();
        let Running {
            cleanup,
            state,
            driver,
            record: running,
        } = running_task(dir.path());
        let left = cleanup.after_panic(cancelled_runner().await).await;
        let killed = (driver.calls().iter())
            .any(|c| matches!(c, Call::Stop { .. } | Call::DestroyRemains { .. }));
        assert!(!killed, "a shutting-down agent killed its task");
        assert_eq!(state.tasks("a1").unwrap(), vec![running.clone()]);
        assert_eq!(left, running);
    }

    /// A runner that panicked with its task running: the cleanup kills the
    /// task and records it killed, then failed by the panic.
    #[tokio::test]
    async fn a_panicked_runners_running_task_is_killed_and_recorded_so() {
        let dir = tempfile::tempdir().unwrap();
        let Running {
            cleanup, driver, ..
        } = running_task(dir.path());
        let left = cleanup.after_panic(panicked().await).await;
        let killed = (driver.calls().iter())
            .any(|c| matches!(c, Call::Stop { .. } | Call::DestroyRemains { .. }));
        assert!(killed, "the running task was left running");
        let kinds: Vec<EventKind> = left.events.iter().map(|e| e.kind).collect();
        use EventKind::*;
        assert_eq!(kinds, [Started, Killed, NotRestarting]);
        assert!(left.events[2].fails_task);
        assert!(matches!(
            left.state,
            TaskState::Dead {
                outcome: Outcome::Failed { .. }
            }
        ));
    }

    async fn panicked() -> tokio::task::JoinError {
        tokio::spawn(async { panic!("a bug") })
            .await
            .expect_err("it panicked")
    }

    /// A runner that panicked after its kill path recorded the running
    /// attempt killed: the cleanup fails the task, but adds no second end.
    #[tokio::test]
    async fn a_killed_attempt_is_not_killed_again_after_a_panic() {
        use EventKind::*;
        let dir = tempfile::tempdir().unwrap();
        let running = TaskState::Running { attempt: 1 };
        let Running { cleanup, .. } = cleanup_of(dir.path(), running, &[Started, Killed]);
        let left = cleanup.after_panic(panicked().await).await;
        let kinds: Vec<EventKind> = left.events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [Started, Killed, NotRestarting], "a second Killed");
    }

    /// A runner that panicked once its task was recorded dead (as a
    /// restart of all tasks revived it): the task failed, its end kept, and
    /// its record says so throughout (its state kept the old end while a
    /// failing event was added).
    #[tokio::test]
    async fn a_dead_task_whose_runner_panics_is_failed() {
        use EventKind::*;
        let dir = tempfile::tempdir().unwrap();
        let dead = TaskState::Dead {
            outcome: Outcome::Killed { result: None },
        };
        let Running { cleanup, .. } = cleanup_of(dir.path(), dead, &[Started, Killed]);
        let left = cleanup.after_panic(panicked().await).await;
        let kinds: Vec<EventKind> = left.events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [Started, Killed, NotRestarting]);
        assert!(left.events[2].fails_task);
        assert!(
            matches!(&left.state, TaskState::Dead { outcome } if outcome.failed()),
            "a failing event, but {:?}",
            left.state
        );
    }
}
