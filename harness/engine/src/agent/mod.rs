//! The agent: one engine and every allocation it runs, by id. What
//! `taskgate agent` serves on its control socket, what a foreground
//! `taskgate run` is while it runs, and what the harness's killed agents
//! restore: one place for placing, restoring, stopping, restarting,
//! following and listing allocations.

mod server;

pub use server::{BoundSocket, ControlServer};

use crate::alloc::{AllocStatus, RestartRefused, RestartScope};
use crate::alloc_runner::{AllocControl, AllocHandle};
use crate::control::ControlError;
pub use crate::control::{AllocEntry, StatusReport, UnreadableAlloc};
use crate::engine::{Engine, EngineError, SkippedAlloc};
use crate::job::Job;
use crate::state::{StateDb, StateError};
use crate::task_state::TaskEvent;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use tokio::sync::{broadcast, watch};

/// Events a follower may fall behind by before it is told it missed some.
const FOLLOW_BACKLOG: usize = 4096;

/// One thing counted under way: an allocation from before it is placed
/// until it has finished (what a drain waits for), a request until it is
/// answered (what a closing server waits for). Counted out only by
/// [`Counted::out`]: an allocation whose follower is dropped (its runner
/// gone with the runtime, its tasks left running) has not finished.
struct Counted(Arc<watch::Sender<usize>>);

impl Counted {
    fn new(count: &Arc<watch::Sender<usize>>) -> Counted {
        count.send_modify(|n| *n += 1);
        Counted(count.clone())
    }

    fn out(self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// A [`Counted`] given back when dropped, for what ends as it unwinds: a
/// placement that fails or panics before it is adopted, a request.
struct CountedUntilDropped(Option<Counted>);

impl CountedUntilDropped {
    fn new(count: &Arc<watch::Sender<usize>>) -> CountedUntilDropped {
        CountedUntilDropped(Some(Counted::new(count)))
    }

    /// Kept counted past this guard's end.
    fn keep(mut self) -> Counted {
        self.0.take().expect("kept once")
    }
}

impl Drop for CountedUntilDropped {
    fn drop(&mut self) {
        if let Some(counted) = self.0.take() {
            counted.out();
        }
    }
}

/// An allocation this agent runs.
#[derive(Clone)]
struct Live {
    control: AllocControl,
    events: broadcast::Sender<TaskEvent>,
    finished: watch::Receiver<Option<AllocStatus>>,
}

/// The events of one allocation from the moment of subscribing, and its end.
pub struct Following {
    pub alloc_id: String,
    events: broadcast::Receiver<TaskEvent>,
    finished: watch::Receiver<Option<AllocStatus>>,
    _reader: Reader,
}

/// What a follower gets next.
#[derive(Debug, Clone, PartialEq)]
pub enum Followed {
    Event(TaskEvent),
    /// The follower fell this many events behind and lost them.
    Missed(u64),
    /// Every task is dead: the allocation's final status.
    Finished(AllocStatus),
    /// The agent is going away (its runtime shuts down): no end will come.
    Gone,
}

impl Following {
    /// The next event, or the end once every event before it was given.
    pub async fn next(&mut self) -> Followed {
        loop {
            if let Some(status) = *self.finished.borrow() {
                // Every event was sent before the end was published.
                return match self.events.try_recv() {
                    Ok(event) => Followed::Event(event),
                    Err(broadcast::error::TryRecvError::Lagged(n)) => Followed::Missed(n),
                    Err(_) => Followed::Finished(status),
                };
            }
            // The end's sender goes only after publishing the end, or with
            // the agent's runtime.
            let gone = tokio::select! {
                event = self.events.recv() => match event {
                    Ok(event) => return Followed::Event(event),
                    Err(broadcast::error::RecvError::Lagged(n)) => return Followed::Missed(n),
                    Err(broadcast::error::RecvError::Closed) => self.finished.changed().await.is_err(),
                },
                changed = self.finished.changed() => changed.is_err(),
            };
            if gone && self.finished.borrow().is_none() {
                return Followed::Gone;
            }
        }
    }
}

/// The allocations an agent runs, and how many it is placing.
#[derive(Default)]
struct Allocs {
    live: BTreeMap<String, Live>,
    /// Placements past their drain check and not yet adopted or failed.
    /// The engine records an allocation before the agent adopts it, so a
    /// lookup that finds a record but no live allocation waits for these.
    placing: usize,
    /// How many followers each allocation has (see [`Reader`]).
    followed: BTreeMap<String, usize>,
}

/// Counts its follower in [`Allocs::followed`] while it lives: a follower
/// told of the end reads the record and logs next (a foreground `run`
/// only once a drain it serves has finished every other allocation), so
/// a finished allocation still followed is never collected.
struct Reader {
    agent: Weak<Agent>,
    alloc_id: String,
}

impl Reader {
    fn new(agent: &Arc<Agent>, alloc_id: &str) -> Reader {
        *agent
            .lock()
            .followed
            .entry(alloc_id.to_string())
            .or_default() += 1;
        Reader {
            agent: Arc::downgrade(agent),
            alloc_id: alloc_id.to_string(),
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let Some(agent) = self.agent.upgrade() else {
            return;
        };
        let mut allocs = agent.lock();
        if let Some(count) = allocs.followed.get_mut(&self.alloc_id) {
            *count -= 1;
            if *count == 0 {
                allocs.followed.remove(&self.alloc_id);
            }
        }
    }
}

/// A placement under way, counted in [`Allocs::placing`] from its drain
/// check until its allocation is adopted ([`Placement::settle`]) or the
/// placement fails or panics (its drop). Either way, lookups waiting on
/// placements are woken.
struct Placement<'a> {
    agent: &'a Agent,
    settled: bool,
}

impl Placement<'_> {
    /// Counted out in the same critical section the allocation turns
    /// live in: a lookup never sees it neither placing nor live.
    fn settle(&mut self, allocs: &mut Allocs) {
        allocs.placing -= 1;
        self.settled = true;
    }
}

impl Drop for Placement<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.agent.lock().placing -= 1;
        }
        self.agent.placed.notify_all();
    }
}

pub struct Agent {
    engine: Engine,
    allocs: Mutex<Allocs>,
    /// Woken whenever a placement settles (see [`Placement`]).
    placed: Condvar,
    /// How many allocations are live or being placed: idle at zero.
    count: Arc<watch::Sender<usize>>,
    /// Set by a drain: nothing is placed any more.
    draining: std::sync::atomic::AtomicBool,
}

impl Agent {
    pub fn new(engine: Engine) -> Arc<Agent> {
        Arc::new(Agent {
            engine,
            allocs: Mutex::default(),
            placed: Condvar::new(),
            count: Arc::new(watch::Sender::new(0)),
            draining: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Restores every allocation a previous agent left unfinished, by the
    /// engine's restore rules, and follows each from its first event.
    /// Call within a Tokio runtime.
    pub fn restore(self: &Arc<Self>) -> Result<(Vec<Following>, Vec<SkippedAlloc>), EngineError> {
        let restored = self.engine.restore()?;
        let following = (restored.allocs.into_iter())
            .map(|h| self.adopt(h, self.count_in(), None))
            .collect();
        self.collect_finished("");
        Ok((following, restored.skipped))
    }

    /// Places `job`'s first group (or the named one) and follows it from its
    /// first event; refused once a drain began. Call within a Tokio runtime.
    pub fn submit(
        self: &Arc<Self>,
        job: &Job,
        group: Option<&str>,
    ) -> Result<Following, ControlError> {
        // Counted under the lock a drain is begun with: a drain either
        // refuses this placement or waits for the alloc it makes.
        let (counted, placement) = {
            let mut allocs = self.lock();
            if self.draining() {
                return Err(ControlError::NotPlaced(
                    "the agent is draining: it stops every allocation and exits".into(),
                ));
            }
            allocs.placing += 1;
            let placement = Placement {
                agent: self,
                settled: false,
            };
            (CountedUntilDropped::new(&self.count), placement)
        };
        taskgate_faults::fault_point!(self.engine.faults(), taskgate_faults::points::AGENT_PLACING);
        match self.engine.submit(job, group) {
            Ok(handle) => {
                taskgate_faults::fault_point!(
                    self.engine.faults(),
                    taskgate_faults::points::AGENT_RECORDED
                );
                Ok(self.adopt(handle, counted.keep(), Some(placement)))
            }
            Err(err) => Err(ControlError::NotPlaced(err.to_string())),
        }
    }

    fn count_in(&self) -> Counted {
        Counted::new(&self.count)
    }

    /// Starts forwarding a running alloc's events to its followers; the
    /// first follower subscribes before any event can be sent.
    fn adopt(
        self: &Arc<Self>,
        handle: AllocHandle,
        counted: Counted,
        mut placement: Option<Placement<'_>>,
    ) -> Following {
        let alloc_id = handle.alloc_id.clone();
        let (events, first) = broadcast::channel(FOLLOW_BACKLOG);
        let (done, finished) = watch::channel(None);
        let live = Live {
            control: handle.control(),
            events: events.clone(),
            finished: finished.clone(),
        };
        {
            let mut allocs = self.lock();
            // Placed as a drain began: it is stopped with the others.
            if self.draining() {
                live.control.stop();
            }
            allocs.live.insert(alloc_id.clone(), live);
            if let Some(placement) = &mut placement {
                placement.settle(&mut allocs);
            }
        }
        drop(placement);
        let agent = Arc::downgrade(self);
        let id = alloc_id.clone();
        let (mut stream, waiter) = handle.into_parts();
        tokio::spawn(async move {
            let mut wait = Box::pin(waiter.ended());
            let ended = loop {
                tokio::select! {
                    ended = &mut wait => break ended,
                    Some(event) = stream.recv() => { let _ = events.send(event); }
                }
            };
            while let Ok(event) = stream.try_recv() {
                let _ = events.send(event);
            }
            let summary = match ended {
                Ok(summary) => Some(summary),
                // A bug: the agent can do no more for the allocation, and a
                // drain must not wait for it (a next agent restores it).
                Err(panic) if panic.is_panic() => {
                    tracing::error!(alloc = %id, error = %panic, "the alloc runner panicked");
                    None
                }
                // Dropped with the runtime: the agent is going, and the
                // allocation runs on, still counted.
                Err(_) => return,
            };
            // No longer live before a follower hears of its end: a stop or
            // restart sent on that news is told the alloc finished (the
            // record is terminal by now), never taken as if it still ran.
            // Counted out last, so an agent that exits once none runs (a
            // drain) has told every follower first.
            if let Some(agent) = agent.upgrade() {
                agent.lock().live.remove(&id);
                // Spared: its followers read its record and logs next.
                taskgate_faults::blocking(|| agent.collect_finished(&id));
            }
            match summary {
                Some(summary) => {
                    done.send_replace(Some(summary.status));
                }
                // Its followers are told it is gone.
                None => drop(done),
            }
            counted.out();
        });
        self.following(alloc_id, first, finished)
    }

    /// A follower of `alloc_id`, counted as its reader while it lives (see
    /// [`Reader`]): every follower is made here, so none escapes the count.
    fn following(
        self: &Arc<Self>,
        alloc_id: String,
        events: broadcast::Receiver<TaskEvent>,
        finished: watch::Receiver<Option<AllocStatus>>,
    ) -> Following {
        Following {
            _reader: Reader::new(self, &alloc_id),
            alloc_id,
            events,
            finished,
        }
    }

    /// Removes the finished allocations beyond the engine's keep, sparing
    /// `finishing` (its followers read it next), every one this agent
    /// runs, and every one still followed; a failure is logged, and the
    /// next collection tries again.
    fn collect_finished(&self, finishing: &str) {
        let spared: Vec<String> = {
            let allocs = self.lock();
            (allocs.live.keys().chain(allocs.followed.keys()))
                .cloned()
                .collect()
        };
        let spare: Vec<&str> = std::iter::once(finishing)
            .chain(spared.iter().map(String::as_str))
            .collect();
        match self.engine.collect_finished(&spare) {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!(
                    count = removed.len(),
                    "removed the longest finished allocations"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "removing finished allocations"),
        }
    }

    /// The ids of the allocations this agent runs now.
    pub fn running(&self) -> Vec<String> {
        self.lock().live.keys().cloned().collect()
    }

    /// How many allocations run now.
    pub fn live_count(&self) -> usize {
        *self.count.borrow()
    }

    /// Resolves once no allocation runs.
    pub async fn idle(&self) {
        let mut count = self.count.subscribe();
        let _ = count.wait_for(|n| *n == 0).await;
    }

    /// The control of a running allocation, by id or unique prefix.
    pub fn control(&self, alloc: &str) -> Result<(String, AllocControl), ControlError> {
        let (id, live) = self.find_live(alloc)?;
        Ok((id, live.control))
    }

    /// Sends a stop to a running allocation; returns its id.
    pub fn stop(&self, alloc: &str) -> Result<String, ControlError> {
        let (id, live) = self.find_live(alloc)?;
        live.control.stop();
        Ok(id)
    }

    /// Whether a drain began: the agent places nothing any more.
    pub fn draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A drain: places nothing from now on and stops every running
    /// allocation; returns their ids.
    pub fn drain(&self) -> Vec<String> {
        // Under the lock an allocation is adopted with: none slips past.
        let allocs = self.lock();
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let live = allocs.live.clone();
        for entry in live.values() {
            entry.control.stop();
        }
        live.into_keys().collect()
    }

    /// Nomad's `alloc restart` of a running allocation.
    pub async fn restart(&self, alloc: &str, scope: RestartScope) -> Result<(), ControlError> {
        match self.find_live(alloc) {
            Ok((_, live)) => Ok(live.control.restart(scope).await?),
            Err(ControlError::Finished { .. }) => Err(RestartRefused::AllocFinished.into()),
            Err(other) => Err(other),
        }
    }

    /// Follows an allocation from now on: a running one's events and end,
    /// or a finished one's end at once.
    pub fn follow(self: &Arc<Self>, alloc: &str) -> Result<Following, ControlError> {
        match self.find_live(alloc) {
            Ok((alloc_id, live)) => {
                Ok(self.following(alloc_id, live.events.subscribe(), live.finished))
            }
            Err(ControlError::Finished { alloc_id, status }) => {
                let (_, events) = broadcast::channel(1);
                Ok(self.following(alloc_id, events, watch::channel(Some(status)).1))
            }
            Err(other) => Err(other),
        }
    }

    /// Every allocation in the state database, with its tasks.
    pub fn status(&self) -> Result<StatusReport, StateError> {
        read_entries(self.engine.state())
    }

    /// A running allocation by id, or by a prefix unique among every
    /// allocation recorded (finished ones too, as `status` takes it); one
    /// that has finished is named as such.
    fn find_live(&self, name: &str) -> Result<(String, Live), ControlError> {
        let recorded = (self.engine.state())
            .alloc_entries()
            .map_err(|e| ControlError::State(e.to_string()))?;
        // Every live allocation was recorded before it was placed.
        let id = find_id(recorded.iter().map(|(id, _)| id), name)?;
        taskgate_faults::fault_point!(
            self.engine.faults(),
            taskgate_faults::points::AGENT_RESOLVED
        );
        loop {
            let placing = {
                let allocs = self.lock();
                if let Some(live) = allocs.live.get(&id) {
                    return Ok((id, live.clone()));
                }
                allocs.placing
            };
            // Read again, after the live allocations were looked at: one
            // that ended since the first read was written terminal before
            // it left them, and the first read may predate that.
            let record = (self.engine.state())
                .alloc(&id)
                .map_err(|e| ControlError::State(e.to_string()))?
                .ok_or_else(|| ControlError::NoSuchAlloc(name.to_string()))?;
            if record.client.is_terminal() {
                return Err(ControlError::Finished {
                    alloc_id: record.alloc_id,
                    status: AllocStatus {
                        desired: record.desired,
                        client: record.client,
                    },
                });
            }
            if placing == 0 {
                return Err(ControlError::NotRestored(record.alloc_id));
            }
            // Recorded, not yet adopted: it may be one of the placements
            // under way. Looked up again once one settles.
            taskgate_faults::record_point!(
                self.engine.faults(),
                taskgate_faults::points::AGENT_AWAITING_PLACEMENT
            );
            let allocs = self.lock();
            let _settled = taskgate_faults::blocking(|| {
                (self.placed)
                    .wait_while(allocs, |a| {
                        a.placing == placing && !a.live.contains_key(&id)
                    })
                    .unwrap_or_else(|p| p.into_inner())
            });
        }
    }

    fn lock(&self) -> MutexGuard<'_, Allocs> {
        crate::lock(&self.allocs)
    }
}

/// Every allocation of a state database, with its tasks; one whose
/// records cannot be decoded is named, with why.
pub fn read_entries(state: &StateDb) -> Result<StatusReport, StateError> {
    let mut report = StatusReport::default();
    for (alloc_id, alloc) in state.alloc_entries()? {
        let read = alloc.and_then(|alloc| {
            let tasks = state.tasks(&alloc.alloc_id)?;
            Ok(AllocEntry { alloc, tasks })
        });
        match read {
            Ok(entry) => report.allocs.push(entry),
            Err(err) => report.unreadable.push(UnreadableAlloc {
                alloc_id,
                why: err.to_string(),
            }),
        }
    }
    Ok(report)
}

/// The id `name` is, or else the one it is a unique prefix of, as Nomad
/// allows.
pub fn find_id<'a>(
    ids: impl Iterator<Item = &'a String>,
    name: &str,
) -> Result<String, ControlError> {
    let ids: Vec<&String> = ids.collect();
    if let Some(id) = ids.iter().find(|id| **id == name) {
        return Ok((*id).clone());
    }
    // An empty name is no one's prefix: it must not pick a lone alloc.
    let matches: Vec<String> = (ids.into_iter())
        .filter(|id| !name.is_empty() && id.starts_with(name))
        .cloned()
        .collect();
    match matches.as_slice() {
        [] => Err(ControlError::NoSuchAlloc(name.to_string())),
        [id] => Ok(id.clone()),
        _ => Err(ControlError::AmbiguousAlloc {
            prefix: name.to_string(),
            matches,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alloc_is_named_by_its_id_or_a_unique_prefix() {
        let ids: Vec<String> = ["5f0c", "5f1d", "77"].map(String::from).to_vec();
        assert_eq!(find_id(ids.iter(), "5f0c").unwrap(), "5f0c");
        assert_eq!(find_id(ids.iter(), "7").unwrap(), "77");
        assert_eq!(
            find_id(ids.iter(), "5f"),
            Err(ControlError::AmbiguousAlloc {
                prefix: "5f".into(),
                matches: vec!["5f0c".into(), "5f1d".into()]
            })
        );
        assert_eq!(
            find_id(ids.iter(), ""),
            Err(ControlError::NoSuchAlloc(String::new()))
        );
        assert_eq!(
            find_id(ids.iter(), "9"),
            Err(ControlError::NoSuchAlloc("9".into()))
        );
    }
}
