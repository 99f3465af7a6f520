//! The task's record: its events, its state, and publishing both (to the
//! state database, the event stream and the alloc runner's coordinator).

use super::*;

impl TaskRunner {
    /// The attempt events belong to: the running one, else the furthest an
    /// attempt got (prestart done, or committed).
    pub(super) fn current_attempt(&self) -> u32 {
        // A running attempt was committed, after its prestart.
        (self.record.committed)
            .max(self.record.prestart_done)
            .unwrap_or(0)
    }

    pub(super) fn emit(&mut self, kind: EventKind, attempt: u32, message: impl Into<String>) {
        if SeededBug::PoststopEventsLost.active()
            && self.task.is_poststop()
            && kind == EventKind::Terminated
        {
            return;
        }
        (self.record).add_event(TaskEvent::new(&self.task.name, kind, attempt, message));
    }

    pub(super) fn set_state(&mut self, next: TaskState) {
        if let Err(err) = self.record.state.advance(next) {
            // A bug in this file, not a runtime condition: make it loud.
            panic!("task {}: {err}", self.task.name);
        }
        self.state_tx.send_replace(self.record.state.clone());
    }

    /// Persists the record (with its recent events only), streams every
    /// new event and wakes the coordinator.
    pub(super) fn publish(&mut self) {
        let new = self.record.events[self.published..].to_vec();
        self.record.keep_recent_events();
        if let Err(err) = self.deps.state.put_task(&self.deps.alloc_id, &self.record) {
            tracing::error!(task = self.name(), error = %err, "persisting task state failed");
        }
        for event in new {
            let _ = self.deps.events.send(event);
        }
        self.published = self.record.events.len();
        let _ = self.changed.send(());
    }

    /// Persists how the current attempt ended before anything else happens
    /// to it (an agent killed in the exited hooks used to restore the attempt
    /// as running, and start a completed task again: docs/bugs.md, B2).
    pub(super) fn record_end(&mut self, result: &ExitResult, by: EndedBy) {
        self.record.ended = Some(AttemptEnded {
            attempt: self.current_attempt(),
            result: result.clone(),
            by,
        });
        self.publish();
    }
}

pub(super) fn describe_exit(result: &ExitResult) -> String {
    let mut msg = match (result.exit_code, result.signal) {
        (_, Some(sig)) => format!(
            "Exit Code: {}, Signal: {sig}",
            result.exit_code.unwrap_or(128 + sig)
        ),
        (Some(code), None) => format!("Exit Code: {code}"),
        (None, None) => "Exit Code: unknown".to_string(),
    };
    if result.oom_killed {
        msg.push_str(", OOM Killed");
    }
    msg
}
