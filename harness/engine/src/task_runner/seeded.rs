//! The seeded bugs of a restored task runner (see `taskgate_faults::seeded`):
//! none of this is compiled into a default build.

use super::TaskRunner;
use crate::task_state::{EventKind, Outcome, TaskState};
use taskgate_executor::ExitResult;
use taskgate_faults::seeded::SeededBug;

impl TaskRunner {
    /// Kubernetes #36485 (a completed init task runs again) and #140309 (an
    /// init task whose setup ran is taken as completed), after a restore.
    pub(super) fn seeded_restore_bugs(&mut self) {
        let init = self.task.is_prestart() && !self.task.is_sidecar();
        if SeededBug::InitRerunAfterRestore.active() && init && self.record.state.is_dead() {
            self.record.state = TaskState::Pending;
        }
        if SeededBug::InitSkippedAfterRestore.active()
            && init
            && self.record.prestart_done.is_some()
            && self.record.committed.is_none()
        {
            self.set_state(TaskState::Dead {
                outcome: Outcome::Exited {
                    result: ExitResult::with_code(0),
                    failed: false,
                },
            });
            self.emit(EventKind::NotRestarting, 1, "task completed successfully");
            self.publish();
        }
    }

    /// `lost-attempt-pending-undecided`: the lost attempt written pending,
    /// before the restart policy decided on it.
    pub(super) fn seeded_lost_written_undecided(&mut self) {
        if SeededBug::LostAttemptWrittenUndecided.active() {
            if matches!(self.record.state, TaskState::Running { .. }) {
                self.set_state(TaskState::Pending);
            }
            self.publish();
        }
    }
}
