//! Task and alloc state that survives an agent restart, in an embedded redb
//! database. Records are JSON values keyed by alloc id (and task name), so a
//! schema change shows up as a readable decode error, not silent garbage.
//! The records go through a [`Store`]: redb on disk, or memory for runs
//! that restore nothing.

mod store;

use store::{MemoryStore, RedbStore, Removal, Store, Table};

use crate::alloc::{ClientStatus, DesiredStatus};
use crate::job::Job;
use crate::restart::RestartWindow;
use crate::task_state::{TaskEvent, TaskState};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use taskgate_executor::{Doom, ExitResult, ReattachInfo};

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state database {path}: {source}")]
    Open {
        path: PathBuf,
        source: redb::DatabaseError,
    },
    /// Another process has it open: an agent of the data dir, running or
    /// starting.
    #[error("state database {path} is in use by another process: an agent of this data dir is running or starting (wait for it to serve, or stop it)")]
    InUse { path: PathBuf },
    #[error("state database {path}: reading a copy: {source}")]
    Copy {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Each read of the file for a copy differed from the one before: an
    /// agent is writing it.
    #[error("state database {path} changed at each of {reads} reads of it: an agent of this data dir is writing it")]
    Unsettled { path: PathBuf, reads: usize },
    #[error("state database: {0}")]
    Db(String),
    #[error("state database record {key}: {source}")]
    Decode {
        key: String,
        source: serde_json::Error,
    },
}

macro_rules! db_err {
    ($($t:ty),*) => {$(
        impl From<$t> for StateError {
            fn from(e: $t) -> Self { StateError::Db(e.to_string()) }
        }
    )*};
}
db_err!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocRecord {
    pub alloc_id: String,
    pub job: Job,
    pub group: String,
    pub alloc_dir: PathBuf,
    pub desired: DesiredStatus,
    pub client: ClientStatus,
    /// When its client status turned terminal (ms since the epoch): which
    /// finished allocations are the newest, the ones a collection keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
    /// A stop was sent: written before its sender is told so, while its
    /// command may still wait behind a restart's. An agent that exits
    /// before applying it leaves the stop to the next one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop_sent: bool,
}

impl AllocRecord {
    /// The tasks of the allocation's group.
    pub fn tasks(&self) -> Vec<crate::job::Task> {
        self.job
            .groups
            .iter()
            .find(|g| g.name == self.group)
            .map(|g| g.tasks.clone())
            .unwrap_or_default()
    }
}

/// How one attempt ended, as the driver reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptEnded {
    pub attempt: u32,
    pub result: ExitResult,
    pub by: EndedBy,
}

/// What ended an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndedBy {
    /// The task exited on its own: the restart policy decides what is next.
    Exit,
    /// The kill path: the task is done.
    Kill,
    /// A user restart's kill: the task goes on to its next attempt.
    Restart,
}

impl From<Doom> for EndedBy {
    fn from(doom: Doom) -> Self {
        match doom {
            Doom::Kill => EndedBy::Kill,
            Doom::Restart => EndedBy::Restart,
        }
    }
}

/// An attempt whose setup or start failed, written at once, before the
/// restart policy decides on it (an in-place update is taken first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedStart {
    pub attempt: u32,
    pub message: String,
    pub recoverable: bool,
}

/// An attempt its runner set out to end, told to die or to restart, once
/// its executor doomed it (or did not answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoomedAttempt {
    pub attempt: u32,
    pub by: Doom,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub task: String,
    pub state: TaskState,
    /// The attempt whose prestart hooks all completed, if any. A restored
    /// agent may only start an attempt whose prestart it completed itself.
    pub prestart_done: Option<u32>,
    /// The last attempt committed at the start gate. Written *before* the
    /// executor is launched, so a restored agent knows an executor may exist.
    pub committed: Option<u32>,
    /// The last attempt whose executor launch returned (started or failed).
    /// `committed > launched` means an agent died mid-launch: an executor
    /// may be running that no handle points to yet.
    pub launched: Option<u32>,
    /// How to reach the executor of the running attempt.
    pub handle: Option<ReattachInfo>,
    /// The last attempt whose end the driver reported, written at once,
    /// before the exited hooks: a restored agent never takes a finished
    /// attempt for a running one (and never starts a completed task again).
    #[serde(default)]
    pub ended: Option<AttemptEnded>,
    /// The last attempt its runner set out to end: a restored agent that
    /// finds it lost (its executor dead, and with it the executor's own
    /// record of the doom) takes the loss for that kill's or restart's end.
    #[serde(default)]
    pub doomed: Option<DoomedAttempt>,
    /// A failed start the restart policy has not decided on yet: a
    /// restored agent decides it, rather than set the task up again,
    /// uncounted. Cleared with the decision's write.
    #[serde(default)]
    pub start_failed: Option<FailedStart>,
    /// The last attempt a user restart found already over (its own exit
    /// came first, or its executor was gone): the restart is still owed,
    /// and cuts short the restart delay that follows, in a restored agent
    /// too.
    #[serde(default)]
    pub restart_owed: Option<u32>,
    pub restarts: u32,
    /// The restart window the task's policy is in (see
    /// [`crate::restart::RestartWindow`]).
    #[serde(default)]
    pub restart_window: Option<RestartWindow>,
    /// When the restart delay under way ends, on the engine's clock: an
    /// agent killed inside it leaves the rest for the next one to wait.
    #[serde(default)]
    pub restart_due: Option<Duration>,
    /// The wait chosen for that restart delay: the most a restored agent
    /// waits of it, whatever the clock now says of `restart_due`.
    #[serde(default)]
    pub restart_wait: Option<Duration>,
    /// The restart window as it was before the restart under way was
    /// granted: a kill in its delay, in this agent or a restored one, puts
    /// it back, for that restart never came.
    #[serde(default)]
    pub restart_window_before: Option<RestartWindow>,
    pub events: Vec<TaskEvent>,
    /// How many events the task ever had: the next one's `seq`.
    #[serde(default)]
    pub events_added: u64,
    /// The last attempt whose end (Killed or Terminated) an event reported,
    /// kept apart from the events, of which the record holds only the most
    /// recent.
    #[serde(default)]
    pub end_reported_for: Option<u32>,
}

/// How many events a task record keeps, as Nomad caps them: the most
/// recent. (The alloc's event stream still carries every one.)
pub const MAX_TASK_EVENTS: usize = 10;

impl TaskRecord {
    /// Drops all but the [`MAX_TASK_EVENTS`] most recent events.
    pub fn keep_recent_events(&mut self) {
        let excess = self.events.len().saturating_sub(MAX_TASK_EVENTS);
        self.events.drain(..excess);
    }

    /// Whether the record already reports `attempt`'s end (its Terminated
    /// or Killed event): a runner that comes after the one that reported it
    /// (a restored agent's, a panicked runner's cleanup) does not end it
    /// again. A record an older agent wrote has no `end_reported_for`; its
    /// recent events tell.
    pub fn end_reported(&self, attempt: u32) -> bool {
        self.end_reported_for.is_some_and(|last| last >= attempt)
            || (self.events.iter()).any(|e| e.attempt == attempt && e.kind.ends_attempt())
    }

    /// What is left at `now` of the restart delay under way, if one is:
    /// never more than the wait chosen for it (a due further ahead was
    /// persisted before the wall clock was set back: it is read as now);
    /// a record without its wait (an older version's) waits to its due.
    pub fn rest_of_restart_delay(&self, now: Duration) -> Option<Duration> {
        let left = self.restart_due?.saturating_sub(now);
        Some(self.restart_wait.map_or(left, |wait| left.min(wait)))
    }

    /// How far past `now` its restart window may begin: to the end of the
    /// restart delay under way when the window begins then (a delay-mode
    /// policy that used up its attempts waits out its interval, its next
    /// window beginning when that wait ends); else not at all, a window
    /// persisted ahead of now (the wall clock set back) beginning now.
    pub fn window_ahead(&self, now: Duration) -> Duration {
        let begins_as_delay_ends = self
            .restart_window
            .map(|w| w.start)
            .is_some_and(|start| Some(start) == self.restart_due);
        match self.rest_of_restart_delay(now) {
            Some(left) if begins_as_delay_ends => left,
            _ => Duration::ZERO,
        }
    }

    /// Why `attempt` was doomed, if its runner set out to end it.
    pub fn doomed_by(&self, attempt: u32) -> Option<Doom> {
        (self.doomed).filter(|d| d.attempt == attempt).map(|d| d.by)
    }

    pub fn new(task: &str) -> Self {
        TaskRecord {
            task: task.to_string(),
            state: TaskState::Pending,
            prestart_done: None,
            committed: None,
            launched: None,
            handle: None,
            ended: None,
            doomed: None,
            start_failed: None,
            restart_owed: None,
            restarts: 0,
            restart_window: None,
            restart_due: None,
            restart_wait: None,
            restart_window_before: None,
            events: Vec::new(),
            events_added: 0,
            end_reported_for: None,
        }
    }

    /// Adds the task's next event, numbered.
    pub fn add_event(&mut self, event: TaskEvent) {
        if event.kind.ends_attempt() {
            self.end_reported_for = self.end_reported_for.max(Some(event.attempt));
        }
        self.events.push(TaskEvent {
            seq: self.events_added,
            ..event
        });
        self.events_added += 1;
    }
}

/// One record of a table, by key: decoded, or why it could not be.
pub type Entry<T> = (String, Result<T, StateError>);

pub struct StateDb {
    store: Box<dyn Store>,
}

impl StateDb {
    pub fn open(path: &Path) -> Result<Self, StateError> {
        Ok(StateDb {
            store: Box::new(RedbStore::open(path)?),
        })
    }

    /// A copy of the database at `path`, taken by reading the file: the
    /// database is never locked, so an agent that starts meanwhile still
    /// opens it (redb lets one process hold a database at a time). For a
    /// reader while no agent runs; what is written to the copy is lost.
    pub fn copy_of(path: &Path) -> Result<Self, StateError> {
        Ok(StateDb {
            store: Box::new(RedbStore::copy_of(path)?),
        })
    }

    /// State kept in memory: nothing survives the engine, and a write costs
    /// no database commit. For runs that restore nothing and do not
    /// explore the database's own crashes (the fake driver's wide search).
    pub fn in_memory() -> Self {
        StateDb {
            store: Box::new(MemoryStore::default()),
        }
    }

    pub fn put_alloc(&self, rec: &AllocRecord) -> Result<(), StateError> {
        self.put(Table::Allocs, &rec.alloc_id, rec)
    }

    /// Stores bytes as an alloc's record as they are: for testing what a
    /// restore does with a record it cannot decode.
    #[doc(hidden)]
    pub fn put_raw_alloc(&self, alloc_id: &str, bytes: &[u8]) -> Result<(), StateError> {
        self.store.insert(Table::Allocs, alloc_id, bytes)
    }

    pub fn put_task(&self, alloc_id: &str, rec: &TaskRecord) -> Result<(), StateError> {
        self.put(Table::Tasks, &task_key(alloc_id, &rec.task), rec)
    }

    pub fn allocs(&self) -> Result<Vec<AllocRecord>, StateError> {
        self.scan(Table::Allocs, "")
    }

    /// Every alloc record, each decoded on its own: one undecodable record
    /// is that entry's error (with its key), not every other alloc's.
    pub fn alloc_entries(&self) -> Result<Vec<Entry<AllocRecord>>, StateError> {
        self.scan_entries(Table::Allocs, "")
    }

    pub fn alloc(&self, alloc_id: &str) -> Result<Option<AllocRecord>, StateError> {
        let value = self.store.get(Table::Allocs, alloc_id)?;
        value.map(|v| decode(alloc_id, &v)).transpose()
    }

    /// Removes an allocation's record and its tasks', in one step.
    pub fn remove_alloc(&self, alloc_id: &str) -> Result<(), StateError> {
        let tasks = task_key(alloc_id, "");
        self.store.remove(&[
            (Table::Tasks, Removal::Prefix(&tasks)),
            (Table::Allocs, Removal::Key(alloc_id)),
        ])
    }

    pub fn tasks(&self, alloc_id: &str) -> Result<Vec<TaskRecord>, StateError> {
        self.scan(Table::Tasks, &task_key(alloc_id, ""))
    }

    fn put<T: Serialize>(&self, table: Table, key: &str, value: &T) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(value).expect("state records serialize");
        self.store.insert(table, key, &bytes)
    }

    fn scan<T: DeserializeOwned>(&self, table: Table, prefix: &str) -> Result<Vec<T>, StateError> {
        self.scan_entries(table, prefix)?
            .into_iter()
            .map(|(_, value)| value)
            .collect()
    }

    fn scan_entries<T: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &str,
    ) -> Result<Vec<Entry<T>>, StateError> {
        Ok((self.store.scan(table, prefix)?.into_iter())
            .map(|(key, bytes)| {
                let value = decode(&key, &bytes);
                (key, value)
            })
            .collect())
    }
}

/// Every task record written to a [`StateDb::recording`], in order.
#[cfg(test)]
pub(crate) struct TaskWrites(store::Writes);

#[cfg(test)]
impl TaskWrites {
    pub(crate) fn records(&self) -> Vec<TaskRecord> {
        (self.0.lock().unwrap().iter())
            .filter(|(table, _, _)| *table == Table::Tasks)
            .map(|(_, key, bytes)| decode(key, bytes).expect("a task record"))
            .collect()
    }
}

#[cfg(test)]
impl StateDb {
    /// State in memory that also keeps each write: a test reads what an
    /// agent killed between any two of them would have left.
    pub(crate) fn recording() -> (Self, TaskWrites) {
        let store = store::RecordingStore::default();
        let writes = TaskWrites(store.writes.clone());
        let state = StateDb {
            store: Box::new(store),
        };
        (state, writes)
    }
}

fn task_key(alloc_id: &str, task: &str) -> String {
    format!("{alloc_id}/{task}")
}

fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, StateError> {
    serde_json::from_slice(bytes).map_err(|source| StateError::Decode {
        key: key.to_string(),
        source,
    })
}
