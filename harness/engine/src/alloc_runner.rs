//! The alloc runner: starts a task runner per task, opens each task's start
//! condition by lifecycle (prestart → main → poststart; poststop last),
//! applies alloc updates (`handleAllocUpdate` in docs/nomad-prestart-race-report.txt), kills tasks
//! leader first, and derives the alloc's client status from its tasks.

use crate::alloc::{AllocStatus, AllocUpdate, ClientStatus, DesiredStatus};
use crate::jobspec::Job;
use crate::lifecycle::{kill_reason, live_client_status, may_start, KillReason, Member, Stage};
use crate::start_gate::StartGate;
use crate::state::{AllocRecord, StateDb, TaskRecord};
use crate::task_runner::{TaskRunner, TaskRunnerDeps, TaskRunnerHandle};
use crate::task_state::{TaskEvent, TaskState};
use std::sync::{Arc, Mutex};
use taskgate_faults::points;
use taskgate_faults::seeded::SeededBug;
use taskgate_faults::{fault_point, record_point};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// The caller's side of a running allocation.
pub struct AllocHandle {
    pub alloc_id: String,
    updates: mpsc::UnboundedSender<AllocUpdate>,
    /// Every task event, in the order the task runners emitted them.
    pub events: mpsc::UnboundedReceiver<TaskEvent>,
    done: JoinHandle<AllocSummary>,
}

/// How an allocation ended.
#[derive(Debug, Clone)]
pub struct AllocSummary {
    pub alloc_id: String,
    pub status: AllocStatus,
    pub tasks: Vec<TaskRecord>,
}

impl AllocHandle {
    /// Delivers an update from the server (e.g. desired status stop).
    pub fn update(&self, update: AllocUpdate) {
        // The alloc runner only stops listening once the alloc is done, when
        // an update no longer matters.
        let _ = self.updates.send(update);
    }

    pub fn stop(&self) {
        self.update(AllocUpdate::stop());
    }

    /// A second sender for updates, for callers that hand the event stream
    /// and the wait to different places.
    pub fn updater(&self) -> mpsc::UnboundedSender<AllocUpdate> {
        self.updates.clone()
    }

    /// Waits for every task to be dead and returns the final state.
    pub async fn wait(self) -> AllocSummary {
        self.done.await.expect("alloc runner panicked")
    }

    /// Splits off the event stream so events can be read while waiting.
    pub fn into_parts(self) -> (mpsc::UnboundedReceiver<TaskEvent>, AllocWaiter) {
        (self.events, AllocWaiter { done: self.done })
    }
}

pub struct AllocWaiter {
    done: JoinHandle<AllocSummary>,
}

impl AllocWaiter {
    pub async fn wait(self) -> AllocSummary {
        self.done.await.expect("alloc runner panicked")
    }
}

/// What the alloc runner shares between its update handler and coordinator.
struct Shared {
    record: Mutex<AllocRecord>,
    runners: Vec<TaskRunnerHandle>,
    gate: Arc<StartGate>,
    state: Arc<StateDb>,
}

/// Starts the allocation's task runners and returns its handle. `records`
/// holds each task's persisted record (none for a new alloc).
pub(crate) fn spawn(
    record: AllocRecord,
    records: Vec<TaskRecord>,
    state: Arc<StateDb>,
    make_deps: impl Fn(&Arc<StartGate>, mpsc::UnboundedSender<TaskEvent>) -> TaskRunnerDeps,
) -> AllocHandle {
    let gate = Arc::new(StartGate::new());
    let status = AllocStatus {
        desired: record.desired,
        client: record.client,
    };
    if status.terminal() {
        gate.set_terminal();
    }
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let (changed_tx, changed_rx) = mpsc::unbounded_channel();
    let (updates_tx, updates_rx) = mpsc::unbounded_channel();
    let mut runners = Vec::new();
    let mut joins = Vec::new();
    for task in record.tasks() {
        let task_record = records
            .iter()
            .find(|r| r.task == task.name)
            .cloned()
            .unwrap_or_else(|| TaskRecord::new(&task.name));
        let deps = make_deps(&gate, events_tx.clone());
        let (runner, handle) = TaskRunner::new(task, deps, task_record, status, changed_tx.clone());
        let cleanup = runner.panic_cleanup();
        joins.push(tokio::spawn(async move {
            match tokio::spawn(runner.run()).await {
                Ok(record) => record,
                Err(panic) => cleanup.after_panic(panic).await,
            }
        }));
        runners.push(handle);
    }
    drop(changed_tx);
    let alloc_id = record.alloc_id.clone();
    let shared = Arc::new(Shared {
        record: Mutex::new(record),
        runners,
        gate,
        state,
    });
    if status.terminal() {
        // Restored after the agent died while stopping: the update that made
        // the alloc terminal was persisted, but its kill may never have run.
        let shared = shared.clone();
        tokio::spawn(async move { kill_tasks(&shared, |_| true).await });
    }
    let (finished_tx, finished_rx) = watch::channel(false);
    tokio::spawn(handle_alloc_updates(
        shared.clone(),
        updates_rx,
        finished_rx,
    ));
    let done = tokio::spawn(coordinate(shared, changed_rx, joins, finished_tx));
    AllocHandle {
        alloc_id,
        updates: updates_tx,
        events: events_rx,
        done,
    }
}

impl Shared {
    fn status(&self) -> AllocStatus {
        let rec = self.record.lock().unwrap_or_else(|p| p.into_inner());
        AllocStatus {
            desired: rec.desired,
            client: rec.client,
        }
    }

    /// Changes the alloc record under its lock, persists it, returns the new status.
    fn change(&self, f: impl FnOnce(&mut AllocRecord)) -> AllocStatus {
        let mut rec = self.record.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut rec);
        if let Err(err) = self.state.put_alloc(&rec) {
            tracing::error!(alloc = %rec.alloc_id, error = %err, "persisting alloc state failed");
        }
        AllocStatus {
            desired: rec.desired,
            client: rec.client,
        }
    }

    fn task_states(&self) -> Vec<(&TaskRunnerHandle, TaskState)> {
        self.runners
            .iter()
            .map(|r| (r, r.state.borrow().clone()))
            .collect()
    }

    /// The client status while the alloc lives (see `live_client_status`);
    /// only the coordinator's end makes it terminal. Persisted only: the
    /// task runners act on terminal statuses alone, and a view sent from
    /// here could overtake the update handler's newer one.
    fn follow_live_status(&self, states: &[(&TaskRunnerHandle, TaskState)]) {
        let live = live_client_status(&members(states));
        if self.status().client != live {
            self.change(|rec| rec.client = live);
        }
    }

    /// `job` if it can be applied in place, else `None`, logged: the
    /// alloc keeps its version (the server's answer would be a new alloc).
    fn in_place(&self, job: Job) -> Option<Job> {
        let rec = self.record.lock().unwrap_or_else(|p| p.into_inner());
        match rec.job.check_in_place(&rec.group, &job) {
            Ok(()) => Some(job),
            Err(err) => {
                tracing::error!(alloc = %rec.alloc_id, version = job.version, error = %err, "refused an in-place update");
                None
            }
        }
    }

    /// Tells the task runners the alloc changed (Nomad's `tr.Update`): its
    /// status, and each task's definition.
    fn update_task_runners(&self, status: AllocStatus) {
        let tasks = self
            .record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tasks();
        for runner in &self.runners {
            if let Some(task) = tasks.iter().find(|t| t.name == runner.task.name) {
                runner.definition.send_if_modified(|current| {
                    let changed = current != task;
                    if changed {
                        current.clone_from(task);
                    }
                    changed
                });
            }
            runner.alloc.send_replace(status);
        }
    }
}

/// Nomad's `handleAllocUpdates`: applies server updates one at a time, in
/// its own task, concurrently with the task runners.
async fn handle_alloc_updates(
    shared: Arc<Shared>,
    mut updates: mpsc::UnboundedReceiver<AllocUpdate>,
    mut finished: watch::Receiver<bool>,
) {
    loop {
        let update = tokio::select! {
            _ = finished.wait_for(|f| *f) => return,
            update = updates.recv() => match update {
                Some(update) => update,
                None => return,
            },
        };
        fault_point!(points::AR_UPDATE_RECEIVED);
        let job = update.job.and_then(|job| shared.in_place(job));
        let was_terminal = shared.status().terminal();
        // One persisted change: an agent killed after it restores both. A
        // stop is final: a later update (an in-place version says `run`)
        // never undoes it.
        let status = shared.change(|rec| {
            if rec.desired != DesiredStatus::Stop {
                rec.desired = update.desired_status;
            }
            if let Some(job) = job {
                rec.job = job;
            }
        });
        let stopping = !was_terminal && status.terminal();
        if stopping {
            // Ordered against every task runner's commit_start: see start_gate.
            shared.gate.set_terminal();
            record_point!(points::AR_ALLOC_TERMINAL);
        }
        fault_point!(points::AR_ALLOC_STATE_SET);
        shared.update_task_runners(status);
        fault_point!(points::AR_TASK_RUNNERS_UPDATED);
        if stopping {
            fault_point!(points::AR_KILL_STARTED);
            kill_tasks(&shared, |_| true).await;
        }
        fault_point!(points::AR_UPDATE_APPLIED);
    }
}

/// Kills the matching non-poststop tasks in Nomad's order (since #13055):
/// the leader, then the other tasks, then the sidecars, each wave dead
/// before the next is told, so a main task that still needs its sidecar (a
/// proxy, a log shipper) while it shuts down has it. Idempotent: killing a
/// dead task returns at once.
async fn kill_tasks(shared: &Shared, select: impl Fn(&TaskRunnerHandle) -> bool) {
    let targets: Vec<&TaskRunnerHandle> = shared
        .runners
        .iter()
        .filter(|r| !r.task.is_poststop() && select(r))
        .collect();
    let kill = |r: &TaskRunnerHandle| {
        shared.gate.kill(&r.task.name);
        r.kill.send_replace(true);
        let mut state = r.state.clone();
        async move {
            // A closed channel means the runner already finished: dead.
            let _ = state.wait_for(|s| s.is_dead()).await;
        }
    };
    // 0: the leader; 1: every other task; 2: the sidecars.
    let wave = |r: &TaskRunnerHandle| match (r.task.leader, r.task.is_sidecar()) {
        _ if SeededBug::SidecarsKilledWithMains.active() => 0,
        (true, _) => 0,
        (false, false) => 1,
        (false, true) => 2,
    };
    for n in 0..3 {
        let dying: Vec<_> = targets
            .iter()
            .filter(|r| wave(r) == n)
            .map(|r| kill(r))
            .collect();
        for dead in dying {
            dead.await;
        }
    }
}

/// Opens start conditions as the lifecycle allows, reacts to task deaths,
/// and finishes the alloc once every task runner is done.
async fn coordinate(
    shared: Arc<Shared>,
    mut changed: mpsc::UnboundedReceiver<()>,
    joins: Vec<JoinHandle<TaskRecord>>,
    finished: watch::Sender<bool>,
) -> AllocSummary {
    let mut kills_sent: Vec<KillReason> = Vec::new();
    loop {
        let states = shared.task_states();
        if states.iter().all(|(_, s)| s.is_dead()) {
            break;
        }
        shared.follow_live_status(&states);
        open_start_conditions(&states);
        if let Some(reason) = kill_reason(&members(&states)).filter(|r| !kills_sent.contains(r)) {
            kills_sent.push(reason);
            tracing::debug!(?reason, "killing tasks");
            let shared = shared.clone();
            tokio::spawn(async move {
                kill_tasks(&shared, |r| reason.targets(Stage::of(&r.task))).await;
            });
        }
        if changed.recv().await.is_none() {
            break;
        }
    }
    let mut tasks = Vec::new();
    for join in joins {
        tasks.push(join.await.expect("task runner panicked"));
    }
    let failed = !SeededBug::StatusHidesFailure.active()
        && tasks
            .iter()
            .any(|t| matches!(&t.state, TaskState::Dead { outcome } if outcome.failed()));
    let client = if failed {
        ClientStatus::Failed
    } else {
        ClientStatus::Complete
    };
    let status = shared.change(|rec| rec.client = client);
    shared.update_task_runners(status);
    finished.send_replace(true);
    let alloc_id = shared
        .record
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .alloc_id
        .clone();
    AllocSummary {
        alloc_id,
        status,
        tasks,
    }
}

/// Opens every start condition the lifecycle rules allow (see [`lifecycle`]).
fn open_start_conditions(states: &[(&TaskRunnerHandle, TaskState)]) {
    let all = members(states);
    for (runner, _) in states {
        if may_start(Stage::of(&runner.task), &all) && !*runner.start.borrow() {
            runner.start.send_replace(true);
        }
    }
}

fn members(states: &[(&TaskRunnerHandle, TaskState)]) -> Vec<Member> {
    states
        .iter()
        .map(|(r, s)| Member::of(&r.task, s.clone()))
        .collect()
}
