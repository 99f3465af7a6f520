//! The merged history of one run, and the engine's values turned into the
//! oracle's by exhaustive matches: a new engine event kind or status is a
//! compile error here, never a silently weaker invariant.

use taskgate_engine::state::TaskRecord;
use taskgate_engine::task_state::EventKind;
use taskgate_engine::ClientStatus;
use taskgate_faults::points::{EX_TASK_EXITED, HARNESS_STOP_DELIVERED};
use taskgate_faults::{Detail, Hit};
use taskgate_oracle::{AllocStatus, Event, ExecRecord, TaskEventKind, TaskExit};

pub fn event_kind(kind: EventKind) -> TaskEventKind {
    match kind {
        EventKind::Received => TaskEventKind::Received,
        EventKind::TaskSetup => TaskEventKind::TaskSetup,
        EventKind::Started => TaskEventKind::Started,
        EventKind::WaitingShutdownDelay => TaskEventKind::WaitingShutdownDelay,
        EventKind::Killing => TaskEventKind::Killing,
        EventKind::Killed => TaskEventKind::Killed,
        EventKind::Terminated => TaskEventKind::Terminated,
        EventKind::Restarting => TaskEventKind::Restarting,
        EventKind::NotRestarting => TaskEventKind::NotRestarting,
        EventKind::DriverFailure => TaskEventKind::DriverFailure,
        EventKind::SetupFailure => TaskEventKind::SetupFailure,
        EventKind::HookFailed => TaskEventKind::HookFailed,
        EventKind::Restored => TaskEventKind::Restored,
        EventKind::NotStarted => TaskEventKind::NotStarted,
        EventKind::Lost => TaskEventKind::Lost,
        EventKind::Updated => TaskEventKind::Updated,
        EventKind::RestartSignaled => TaskEventKind::RestartSignaled,
    }
}

pub fn alloc_status(status: ClientStatus) -> AllocStatus {
    match status {
        ClientStatus::Pending => AllocStatus::Pending,
        ClientStatus::Running => AllocStatus::Running,
        ClientStatus::Complete => AllocStatus::Complete,
        ClientStatus::Failed => AllocStatus::Failed,
    }
}

/// What the harness recorded besides fault hits and execs.
#[derive(Debug, Default)]
pub struct Records {
    /// The fault log's length each time a killed agent was replaced, and
    /// whether the new agent stopped the alloc at once.
    pub restarted_at: Vec<(u64, bool)>,
    /// Each task's restart count, read from the state after each agent
    /// process ended, in that order.
    pub restart_counts: Vec<(String, u32)>,
    /// What was still alive of each task after the run.
    pub survivors: Vec<(String, Vec<i32>)>,
    pub status: Option<ClientStatus>,
    /// Whether the alloc's desired status was `stop` at the end.
    pub desired_stop: Option<bool>,
    /// The alloc's id (which its tasks' restart jitter is drawn from).
    pub alloc_id: Option<String>,
}

/// One causal order: fault hits in log order (the engine's and every
/// executor's, appended to one file), each exec placed after the hits
/// logged before it was judged, then the harness's after-the-fact records,
/// then the engine's own task events (for liveness, and for each started
/// attempt's one end).
pub fn merge(
    hits: &[Hit],
    execs: &[(ExecRecord, u64)],
    tasks: &[TaskRecord],
    records: &Records,
) -> Vec<Event> {
    let mut keyed: Vec<(u64, u8, Event)> = Vec::new();
    for (i, hit) in hits.iter().enumerate() {
        let at = i as u64 + 1;
        let event = match (hit.point.scope(), hit.point.point.as_str(), hit.detail) {
            (None, HARNESS_STOP_DELIVERED, _) => Event::StopDelivered { seq: hit.seq },
            (Some(task), EX_TASK_EXITED, Some(Detail::Exit { code, signal })) => {
                keyed.push((at, 0, Event::FaultHit(hit.clone())));
                let task = task.to_string();
                let exit = match (code, signal) {
                    (_, Some(sig)) => TaskExit::Signal(sig),
                    (Some(code), None) => TaskExit::Code(code),
                    // waitpid failed: the executor does not know; the most
                    // cautious reading is that the task did not succeed.
                    (None, None) => TaskExit::Code(-1),
                };
                Event::TaskExited { task, exit }
            }
            _ => Event::FaultHit(hit.clone()),
        };
        keyed.push((at, 0, event));
    }
    for &(at, stop) in &records.restarted_at {
        keyed.push((at, 1, Event::AgentRestarted { stop }));
    }
    for (record, at) in execs {
        keyed.push((*at, 2, Event::Exec(record.clone())));
    }
    keyed.sort_by_key(|(at, order, _)| (*at, *order));
    let mut history: Vec<Event> = keyed.into_iter().map(|(_, _, e)| e).collect();
    history.extend(
        records
            .restart_counts
            .iter()
            .map(|(task, restarts)| Event::RestartCount {
                task: task.clone(),
                restarts: *restarts,
            }),
    );
    history.extend(
        records
            .survivors
            .iter()
            .map(|(task, pids)| Event::Survivors {
                task: task.clone(),
                pids: pids.clone(),
            }),
    );
    if let Some(status) = records.status {
        history.push(Event::AllocStatus(alloc_status(status)));
    }
    if let Some(stop) = records.desired_stop {
        history.push(Event::DesiredStop(stop));
    }
    for task in tasks {
        history.extend(task.events.iter().map(|e| Event::TaskEvent {
            task: e.task.clone(),
            kind: event_kind(e.kind),
            attempt: e.attempt,
            failed: e.fails_task,
            message: e.message.clone(),
        }));
    }
    history
}
