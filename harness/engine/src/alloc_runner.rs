//! The alloc runner: starts a task runner per task, opens each task's start
//! condition by lifecycle (prestart → main → poststart; poststop last),
//! applies alloc updates (`handleAllocUpdate` in docs/nomad-prestart-race-report.txt), kills tasks
//! leader first, and derives the alloc's client status from its tasks.

use crate::alloc::{
    AllocStatus, AllocUpdate, ClientStatus, DesiredStatus, RestartRefused, RestartScope,
};
use crate::job::Job;
use crate::lifecycle::{kill_reason, live_client_status, may_start, KillReason, Member, Stage};
use crate::lock;
use crate::start_gate::StartGate;
use crate::state::{AllocRecord, StateDb, TaskRecord};
use crate::task_runner::{TaskRunner, TaskRunnerDeps, TaskRunnerHandle};
use crate::task_state::{TaskEvent, TaskState};
use std::sync::{Arc, Mutex};
use taskgate_faults::points;
use taskgate_faults::seeded::SeededBug;
use taskgate_faults::{fault_point, record_point, Faults};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// The caller's side of a running allocation.
pub struct AllocHandle {
    pub alloc_id: String,
    control: AllocControl,
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

/// What the alloc runner's update handler takes, one at a time, in order.
enum Command {
    Update(AllocUpdate),
    Restart {
        scope: RestartScope,
        reply: oneshot::Sender<Result<(), RestartRefused>>,
    },
}

/// Sends updates and restarts to an allocation; cheap to clone, so the
/// event stream, the wait and the control can go to different places.
#[derive(Clone)]
pub struct AllocControl {
    commands: mpsc::UnboundedSender<Command>,
    /// Where a stop is marked sent, under the lock its queueing takes (see
    /// [`Shared::stop_sent`]).
    shared: Arc<Shared>,
}

impl AllocControl {
    /// Delivers an update from the server (e.g. desired status stop). A
    /// stop is persisted as sent before this returns.
    pub fn update(&self, update: AllocUpdate) {
        let mut stop_sent = lock(&self.shared.stop_sent);
        if update.desired_status == DesiredStatus::Stop && !*stop_sent {
            *stop_sent = true;
            self.shared.persist_stop_sent();
        }
        // The alloc runner only stops listening once the alloc is done, when
        // an update no longer matters.
        let _ = self.commands.send(Command::Update(update));
    }

    pub fn stop(&self) {
        self.update(AllocUpdate::stop());
    }

    /// Asks for a user restart (Nomad's `alloc restart`). It is queued
    /// behind the updates sent before it as soon as this is called; the
    /// future says how it went once every target is down and the start
    /// conditions reopen.
    pub fn restart(
        &self,
        scope: RestartScope,
    ) -> impl std::future::Future<Output = Result<(), RestartRefused>> + Send + 'static {
        let (reply, answer) = oneshot::channel();
        let _ = self.commands.send(Command::Restart { scope, reply });
        // No answer: the alloc finished first.
        async move { answer.await.unwrap_or(Err(RestartRefused::AllocFinished)) }
    }
}

impl AllocHandle {
    pub fn update(&self, update: AllocUpdate) {
        self.control.update(update);
    }

    pub fn stop(&self) {
        self.control.stop();
    }

    pub fn control(&self) -> AllocControl {
        self.control.clone()
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
        self.ended().await.expect("alloc runner panicked")
    }

    /// The final state, or how the alloc runner went without one: it
    /// panicked (a bug), or was dropped with the runtime.
    pub async fn ended(self) -> Result<AllocSummary, tokio::task::JoinError> {
        self.done.await
    }
}

/// What the alloc runner shares between its update handler and coordinator.
struct Shared {
    record: Mutex<AllocRecord>,
    runners: Vec<TaskRunnerHandle>,
    gate: Arc<StartGate>,
    state: Arc<StateDb>,
    /// One lock for a restart's start and end and every decision of the
    /// coordinator, so the two never interleave.
    phase: Mutex<Phase>,
    /// Held by each kill the coordinator sends and by a restart: a restart
    /// never runs beside one.
    kills: tokio::sync::Mutex<()>,
    /// Wakes the coordinator (a task runner's change, a restart's end).
    changed: mpsc::UnboundedSender<()>,
    /// A stop was sent, though its command may still wait in the queue
    /// behind a restart's: that restart lets no start through before it.
    /// A restart's end looks at it and lets starts through under its lock,
    /// so a stop is sent either before that end (and applied first) or
    /// after it. Persisted too (`AllocRecord::stop_sent`).
    stop_sent: Mutex<bool>,
    faults: Faults,
}

/// What an alloc runner shares with the engine that spawns it.
pub(crate) struct AllocDeps {
    pub state: Arc<StateDb>,
    /// The run's fault points.
    pub faults: Faults,
}

/// Where the alloc is, for the coordinator and user restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Phase {
    stage: AllocStage,
    /// Restarts that brought dead tasks back: a kill the coordinator
    /// decided before one is stale.
    revivals: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AllocStage {
    Live,
    /// A restart holds every start until its targets are down.
    Restarting,
    /// Every task is dead and stays so.
    Finished,
}

/// Starts the allocation's task runners and returns its handle. `records`
/// holds each task's persisted record (none for a new alloc).
pub(crate) fn spawn(
    record: AllocRecord,
    records: Vec<TaskRecord>,
    AllocDeps { state, faults }: AllocDeps,
    make_deps: impl Fn(&Arc<StartGate>, mpsc::UnboundedSender<TaskEvent>) -> TaskRunnerDeps,
) -> AllocHandle {
    record_point!(faults, points::AR_STARTED);
    let record = stop_left_unapplied(record, &state);
    let gate = Arc::new(StartGate::new());
    let status = AllocStatus {
        desired: record.desired,
        client: record.client,
    };
    if status.terminal() {
        gate.set_terminal();
        // Restored stopping: its start gate is shut before any task runs.
        record_point!(faults, points::AR_ALLOC_TERMINAL);
    }
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let (changed_tx, changed_rx) = mpsc::unbounded_channel();
    let (commands_tx, commands_rx) = mpsc::unbounded_channel();
    // Let the runners of dead tasks return: no restart can bring them back.
    let (released_tx, released_rx) = watch::channel(false);
    let mut runners = Vec::new();
    let mut joins = Vec::new();
    for task in record.tasks() {
        let task_record = records
            .iter()
            .find(|r| r.task == task.name)
            .cloned()
            .unwrap_or_else(|| TaskRecord::new(&task.name));
        let deps = make_deps(&gate, events_tx.clone());
        let (runner, handle) = TaskRunner::new(
            task,
            deps,
            task_record,
            status,
            changed_tx.clone(),
            released_rx.clone(),
        );
        let cleanup = runner.panic_cleanup();
        joins.push(tokio::spawn(async move {
            match tokio::spawn(runner.run()).await {
                Ok(record) => record,
                Err(panic) => cleanup.after_panic(panic).await,
            }
        }));
        runners.push(handle);
    }
    let alloc_id = record.alloc_id.clone();
    let stop_sent = record.stop_sent;
    let shared = Arc::new(Shared {
        record: Mutex::new(record),
        runners,
        gate,
        state,
        phase: Mutex::new(Phase {
            stage: AllocStage::Live,
            revivals: 0,
        }),
        kills: tokio::sync::Mutex::new(()),
        changed: changed_tx,
        stop_sent: Mutex::new(stop_sent),
        faults,
    });
    if status.terminal() {
        // Restored after the agent died while stopping: the update that made
        // the alloc terminal was persisted, but its kill may never have run.
        let shared = shared.clone();
        tokio::spawn(async move { kill_tasks(&shared, |_| true).await });
    }
    let control = AllocControl {
        commands: commands_tx,
        shared: shared.clone(),
    };
    let (finished_tx, finished_rx) = watch::channel(false);
    let handler = tokio::spawn(handle_commands(shared.clone(), commands_rx, finished_rx));
    let done = tokio::spawn(coordinate(
        shared,
        changed_rx,
        (joins, handler),
        (released_tx, finished_tx),
    ));
    AllocHandle {
        alloc_id,
        control,
        events: events_rx,
        done,
    }
}

/// Writes the alloc record; a failed write is logged, and the alloc goes on
/// from what it holds in memory.
fn persist(state: &StateDb, rec: &AllocRecord) {
    if let Err(err) = state.put_alloc(rec) {
        tracing::error!(alloc = %rec.alloc_id, error = %err, "persisting alloc state failed");
    }
}

/// The record to run: a stop its last agent acknowledged but did not
/// apply (it exited while the stop waited behind a restart) is applied
/// now, as one that agent had applied: the alloc is stopping from the
/// start, and no task starts again.
fn stop_left_unapplied(mut record: AllocRecord, state: &StateDb) -> AllocRecord {
    if record.stop_sent && record.desired != DesiredStatus::Stop {
        record.desired = DesiredStatus::Stop;
        persist(state, &record);
    }
    record
}

impl Shared {
    /// Marks the record's stop sent (see [`AllocRecord::stop_sent`]), unless
    /// the alloc has finished: its record is final then, and may already
    /// have been collected.
    fn persist_stop_sent(&self) {
        let mut rec = lock(&self.record);
        if rec.client.is_terminal() || rec.stop_sent {
            return;
        }
        rec.stop_sent = true;
        persist(&self.state, &rec);
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        lock(&self.phase)
    }

    fn status(&self) -> AllocStatus {
        let rec = lock(&self.record);
        AllocStatus {
            desired: rec.desired,
            client: rec.client,
        }
    }

    /// Changes the alloc record under its lock, persists it, returns the new status.
    fn change(&self, f: impl FnOnce(&mut AllocRecord)) -> AllocStatus {
        let mut rec = lock(&self.record);
        f(&mut rec);
        persist(&self.state, &rec);
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
        let rec = lock(&self.record);
        match rec.job.check_in_place(&rec.group, &job) {
            Ok(()) => Some(job),
            Err(err) => {
                tracing::error!(alloc = %rec.alloc_id, version = job.version, error = %err, "refused an in-place update");
                None
            }
        }
    }

    /// Accepts a restart of `scope`, or says why not, in one step with
    /// the coordinator's decisions: the alloc must be live (not stopped,
    /// not finished, its poststop tasks not begun). From here every start
    /// is held and every start condition closed, until [`Shared::end_restart`].
    /// Returns the targets.
    fn begin_restart(
        &self,
        scope: &RestartScope,
    ) -> Result<Vec<&TaskRunnerHandle>, RestartRefused> {
        let mut phase = self.phase();
        if phase.stage == AllocStage::Finished {
            return Err(RestartRefused::AllocFinished);
        }
        if self.status().terminal() {
            return Err(RestartRefused::AllocTerminal);
        }
        let ending = |r: &&TaskRunnerHandle| r.task.is_poststop() && *r.start.borrow();
        if self.runners.iter().any(|r| ending(&r)) {
            return Err(RestartRefused::AllocEnding);
        }
        let running = |r: &TaskRunnerHandle| matches!(*r.state.borrow(), TaskState::Running { .. });
        let restartable = self.runners.iter().filter(|r| !r.task.is_poststop());
        let targets: Vec<&TaskRunnerHandle> = match scope {
            RestartScope::Task(name) => {
                let runner = (self.runners.iter().find(|r| r.task.name == *name))
                    .ok_or_else(|| RestartRefused::NoSuchTask(name.clone()))?;
                if runner.task.is_poststop() {
                    return Err(RestartRefused::PoststopTask(name.clone()));
                }
                if !running(runner) {
                    return Err(RestartRefused::TaskNotRunning(name.clone()));
                }
                vec![runner]
            }
            // Every task is asked: one whose start was committed before
            // the hold is about to run, and is taken down too (a task
            // that is down says so at once; a dead one stays dead).
            RestartScope::Running if self.runners.iter().any(running) => restartable.collect(),
            RestartScope::Running => return Err(RestartRefused::NothingRunning),
            RestartScope::All => restartable.collect(),
        };
        if !self.gate.hold() {
            return Err(RestartRefused::AllocTerminal);
        }
        record_point!(self.faults, alloc points::AR_RESTART_ACCEPTED, taskgate_faults::Detail::Restart {
            all_tasks: *scope == RestartScope::All,
        });
        for runner in self.runners.iter().filter(|r| !r.task.is_poststop()) {
            runner.start.send_replace(false);
        }
        phase.stage = AllocStage::Restarting;
        Ok(targets)
    }

    /// Asks one target to restart; when all tasks restart, a dead one is
    /// let start again first. Returns whether a dead task was revived.
    fn ask_restart(&self, runner: &TaskRunnerHandle, all_tasks: bool) -> bool {
        let revive = all_tasks && runner.state.borrow().is_dead();
        if revive {
            self.gate.revive(&runner.task.name);
            runner.kill.send_replace(false);
        }
        runner.restart.send_modify(|ask| {
            ask.generation += 1;
            ask.all_tasks = all_tasks;
        });
        // Once the runner can see it (the oracle orders its delays by it).
        fault_point!(
            self.faults,
            points::TR_RESTART_ASKED,
            runner.task.name.as_str()
        );
        revive
    }

    /// Every target is down: starts are let through again, and the
    /// coordinator reopens the start conditions in lifecycle order.
    fn end_restart(&self, revived: bool) {
        let mut phase = self.phase();
        phase.stage = AllocStage::Live;
        phase.revivals += u64::from(revived);
        self.gate.release();
        record_point!(self.faults, points::AR_RESTART_RELEASED);
        drop(phase);
        let _ = self.changed.send(());
    }

    /// Tells the task runners the alloc changed (Nomad's `tr.Update`): its
    /// status, and each task's definition.
    fn update_task_runners(&self, status: AllocStatus) {
        let tasks = lock(&self.record).tasks();
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

/// Nomad's `handleAllocUpdates`: applies server updates and user
/// restarts one at a time, in order, in its own task, concurrently with
/// the task runners. A stop sent after a restart is applied once the
/// restart's targets are down, before it lets any start through (see
/// [`hold_for_stop`]), and ends the alloc stopped.
async fn handle_commands(
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut finished: watch::Receiver<bool>,
) {
    loop {
        let command = tokio::select! {
            biased;
            _ = finished.wait_for(|f| *f) => return,
            command = commands.recv() => match command {
                Some(command) => command,
                None => return,
            },
        };
        match command {
            Command::Update(update) => apply_update(&shared, update).await,
            Command::Restart { scope, reply } => {
                let answer = match restart(&shared, &scope).await {
                    Ok(RestartEnd::Released) => Ok(()),
                    Ok(RestartEnd::HeldForStop {
                        revived,
                        no_kill_beside,
                    }) => {
                        hold_for_stop(&shared, &mut commands).await;
                        shared.end_restart(revived);
                        drop(no_kill_beside);
                        Err(RestartRefused::StoppedMeanwhile)
                    }
                    Err(refused) => Err(refused),
                };
                let _ = reply.send(answer);
            }
        }
    }
}

/// Applies one server update (Nomad's `handleAllocUpdate`).
async fn apply_update(shared: &Shared, update: AllocUpdate) {
    fault_point!(shared.faults, points::AR_UPDATE_RECEIVED);
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
        record_point!(shared.faults, points::AR_ALLOC_TERMINAL);
    }
    fault_point!(shared.faults, points::AR_ALLOC_STATE_SET);
    shared.update_task_runners(status);
    fault_point!(shared.faults, points::AR_TASK_RUNNERS_UPDATED);
    if stopping {
        fault_point!(shared.faults, points::AR_KILL_STARTED);
        kill_tasks(shared, |_| true).await;
    }
    fault_point!(shared.faults, points::AR_UPDATE_APPLIED);
}

/// Nomad's `alloc restart` (its alloc runner's `restartTasks`): takes the
/// targets down in the kill order, each wave down before the next is
/// asked, with every start held meanwhile; then, when all tasks restart,
/// lets the dead ones start again; then the coordinator reopens the start
/// conditions in lifecycle order. Not counted against any restart policy.
async fn restart<'a>(
    shared: &'a Shared,
    scope: &RestartScope,
) -> Result<RestartEnd<'a>, RestartRefused> {
    fault_point!(shared.faults, points::AR_RESTART_RECEIVED);
    let no_kill_beside = shared.kills.lock().await;
    let targets = shared.begin_restart(scope)?;
    let all_tasks = *scope == RestartScope::All;
    // A restart is not persisted: a dead task is revived (and written so)
    // only once every running target is down, so an agent killed before
    // then leaves it dead, never pending beside a task still running.
    let (dead, running): (Vec<_>, Vec<_>) =
        (targets.into_iter()).partition(|r| all_tasks && r.state.borrow().is_dead());
    let mut revived = false;
    let waves = (0..WAVES).map(|n| running.iter().filter(|r| restart_wave(r) == n).collect());
    for wave in waves.chain([dead.iter().collect::<Vec<_>>()]) {
        let down: Vec<_> = wave
            .into_iter()
            .map(|r| {
                revived |= shared.ask_restart(r, all_tasks);
                let (mut restarted, mut state) = (r.restarted.clone(), r.state.clone());
                let asked = r.restart.borrow().generation;
                async move {
                    // A closed channel: the runner is gone (it panicked).
                    // Its task is down once the panic's cleanup has killed
                    // what was left and published it dead.
                    if restarted.wait_for(|&done| done >= asked).await.is_err() {
                        let _ = state.wait_for(|s| s.is_dead()).await;
                    }
                }
            })
            .collect();
        for target in down {
            target.await;
        }
    }
    fault_point!(shared.faults, points::AR_RESTART_TARGETS_DOWN);
    let stop_sent = lock(&shared.stop_sent);
    if *stop_sent {
        return Ok(RestartEnd::HeldForStop {
            revived,
            no_kill_beside,
        });
    }
    shared.end_restart(revived);
    Ok(RestartEnd::Released)
}

/// How a restart whose targets are down ended.
enum RestartEnd<'a> {
    /// Starts are let through again.
    Released,
    /// A stop was sent while the targets went down: starts stay held until
    /// the commands queued behind the restart, that stop among them, are
    /// applied (see [`hold_for_stop`]).
    /// The coordinator's kills stay out until then, as during the restart.
    HeldForStop {
        revived: bool,
        no_kill_beside: tokio::sync::MutexGuard<'a, ()>,
    },
}

/// Applies the commands queued behind a restart, in order, until the stop
/// sent during it has made the alloc terminal; only then does the restart
/// let starts through, so nothing starts after that stop was sent. A
/// restart queued meanwhile is refused: the stop ends the alloc.
async fn hold_for_stop(shared: &Shared, commands: &mut mpsc::UnboundedReceiver<Command>) {
    while !shared.status().terminal() {
        match commands.recv().await {
            Some(Command::Update(update)) => apply_update(shared, update).await,
            Some(Command::Restart { reply, .. }) => {
                let _ = reply.send(Err(RestartRefused::StoppedMeanwhile));
            }
            None => break,
        }
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
        fault_point!(shared.faults, points::TR_KILL_ASKED, r.task.name.as_str());
        let mut state = r.state.clone();
        async move {
            // A closed channel means the runner already finished: dead.
            let _ = state.wait_for(|s| s.is_dead()).await;
        }
    };
    for n in 0..WAVES {
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

/// How many kill waves there are: the leader; every other task; the sidecars.
const WAVES: u8 = 3;

/// The kill wave of a task (see [`kill_tasks`]).
fn wave(runner: &TaskRunnerHandle) -> u8 {
    match (runner.task.leader, runner.task.is_sidecar()) {
        _ if SeededBug::SidecarsKilledWithMains.active() => 0,
        (true, _) => 0,
        (false, false) => 1,
        (false, true) => 2,
    }
}

/// The kill wave a restart asks a task in: the same as a stop's.
fn restart_wave(runner: &TaskRunnerHandle) -> u8 {
    if SeededBug::RestartKillsAllAtOnce.active() {
        return 0;
    }
    wave(runner)
}

/// Opens start conditions as the lifecycle allows, reacts to task deaths,
/// and finishes the alloc once every task is dead outside a restart. Holds
/// off while a restart runs.
async fn coordinate(
    shared: Arc<Shared>,
    mut changed: mpsc::UnboundedReceiver<()>,
    (joins, handler): (Vec<JoinHandle<TaskRecord>>, JoinHandle<()>),
    (released, finished): (watch::Sender<bool>, watch::Sender<bool>),
) -> AllocSummary {
    let mut kills_sent: Vec<KillReason> = Vec::new();
    let mut revivals = 0;
    loop {
        {
            let mut phase = shared.phase();
            let states = shared.task_states();
            if phase.revivals != revivals {
                // Tasks came back: what killed them may happen again.
                kills_sent.clear();
                revivals = phase.revivals;
            }
            if phase.stage == AllocStage::Live {
                if states.iter().all(|(_, s)| s.is_dead()) {
                    phase.stage = AllocStage::Finished;
                    break;
                }
                shared.follow_live_status(&states);
                open_start_conditions(&states);
                if let Some(reason) =
                    kill_reason(&members(&states)).filter(|r| !kills_sent.contains(r))
                {
                    kills_sent.push(reason);
                    tokio::spawn(kill_for(shared.clone(), reason, revivals));
                }
            }
        }
        if changed.recv().await.is_none() {
            break;
        }
    }
    released.send_replace(true);
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
    // After every finish recorded before it, whatever the clock did: the
    // newest finished allocations are the ones a collection keeps.
    let newest = (shared.state.alloc_entries().unwrap_or_default().into_iter())
        .filter_map(|(_, record)| record.ok()?.finished_at_ms)
        .max();
    let finished_at = newest.map_or(0, |n| n + 1).max(crate::task_state::now_ms());
    let status = shared.change(|rec| {
        rec.client = client;
        rec.finished_at_ms = Some(finished_at);
    });
    record_point!(shared.faults, points::AR_FINISHED);
    shared.update_task_runners(status);
    finished.send_replace(true);
    // The update handler finishes what it is applying (a stop's kill
    // returns once every task is dead): the alloc is done only when
    // nothing of its runner still runs.
    let _ = handler.await;
    let alloc_id = lock(&shared.record).alloc_id.clone();
    AllocSummary {
        alloc_id,
        // Read again: a stop the handler was applying is the alloc's too.
        status: shared.status(),
        tasks,
    }
}

/// The coordinator's own kill, unless a restart brought tasks back since
/// it was decided.
async fn kill_for(shared: Arc<Shared>, reason: KillReason, revivals: u64) {
    let _one_at_a_time = shared.kills.lock().await;
    if shared.phase().revivals != revivals {
        return;
    }
    tracing::debug!(?reason, "killing tasks");
    kill_tasks(&shared, |r| reason.targets(Stage::of(&r.task))).await;
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
