//! One run's fault configuration and history (failpoints builds only): a
//! [`Faults`] handle each run makes and passes down to everything that
//! reaches its points, so runs in one process never see each other's.

use crate::{
    blocking, scoped, Action, Detail, Fault, Hit, Intervention, PointName, FAULTS_ENV,
    FAULT_LOG_ENV, INJECTED,
};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod follow;

#[derive(Default)]
struct State {
    /// Bumped by `reset`, so threads parked under an old configuration wake up.
    generation: u64,
    seq: u64,
    history: Vec<Hit>,
    /// Point name -> its faults: (action, the 1-based hit it applies on),
    /// applied in this order when that hit comes.
    configured: BTreeMap<String, Vec<(Action, u32)>>,
    /// How many times each configured point was reached.
    reached: BTreeMap<String, u32>,
    /// Points with a thread parked at them right now (name -> count).
    parked: BTreeMap<String, usize>,
    /// Points released; a park at a released point falls through.
    released: BTreeSet<String>,
    /// Where hits are also appended, for a harness watching this run.
    log: Option<(std::fs::File, std::path::PathBuf)>,
    /// What [`Action::Intervene`] does in this run.
    intervention: Option<Arc<InterventionHandler>>,
    /// Actions under way that record their pass once done (an
    /// intervention, an await, a delay): a run's history is complete only
    /// once there are none (see [`Faults::settle`]).
    acting: usize,
}

/// Acts on a task's processes (or sends an update to its alloc), and says
/// whether it found anything to act on.
type InterventionHandler = dyn Fn(Option<&str>, Intervention) -> bool + Send + Sync;

/// Counts an action that records its pass once done as under way, until
/// dropped (see [`Faults::settle`]).
struct Acting<'a> {
    faults: Option<&'a Faults>,
}

impl<'a> Acting<'a> {
    fn new(faults: &'a Faults, action: &Action) -> Acting<'a> {
        let counted = matches!(
            action,
            Action::Intervene(_) | Action::AwaitHit { .. } | Action::Delay(_)
        );
        if counted {
            faults.lock().acting += 1;
        }
        Acting {
            faults: counted.then_some(faults),
        }
    }
}

impl Drop for Acting<'_> {
    fn drop(&mut self) {
        if let Some(faults) = self.faults {
            faults.lock().acting -= 1;
            faults.notify();
        }
    }
}

#[derive(Default)]
struct Registry {
    state: Mutex<State>,
    changed: Condvar,
}

/// One run's fault points: what is configured at them, what was reached
/// in what order, which threads are parked. A run makes its own and hands
/// it to the engine it drives (`EngineConfig::faults`), which passes it to
/// every point it reaches (`fault_point!(faults, ...)`): an explicit handle,
/// not a thread-local, so it follows the engine into every task, blocking
/// thread and runtime it uses, and two runs in one process stay apart.
/// Cheap to clone: clones share one registry.
#[derive(Clone, Default)]
pub struct Faults {
    registry: Arc<Registry>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not locked: a Debug print may come from a thread holding the lock.
        f.debug_struct("Faults").finish_non_exhaustive()
    }
}

impl Faults {
    /// A registry with nothing configured and nothing reached.
    pub fn new() -> Faults {
        Faults::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic injected at a point must not poison the fault layer itself.
        (self.registry.state.lock()).unwrap_or_else(|p| p.into_inner())
    }

    fn notify(&self) {
        self.registry.changed.notify_all();
    }

    /// Records that `point` was reached and applies the actions configured
    /// for this hit, in the order they were configured. Returns the injected
    /// message when one of them is [`Action::Error`].
    pub fn reach(&self, scope: Option<&str>, point: &str) -> Option<String> {
        let at = PointName::new(scope, point);
        let name = at.to_string();
        let actions: Vec<Action> = {
            let mut st = self.lock();
            match st.configured.get(&name).cloned() {
                Some(faults) => {
                    let count = st.reached.entry(name.clone()).or_default();
                    *count += 1;
                    let count = *count;
                    faults
                        .into_iter()
                        .filter(|(_, nth)| *nth == count)
                        .map(|(action, _)| action)
                        .collect()
                }
                None => Vec::new(),
            }
        };
        if actions.is_empty() {
            self.record(&at, &None);
            return None;
        }
        let mut injected = None;
        for action in actions {
            let _acting = Acting::new(self, &action);
            injected = injected.or(self.apply(&at, &name, action));
        }
        injected
    }

    /// Waits until no action is under way, so that a run's history is read
    /// only once each of its hits is recorded (an intervention records its
    /// pass after it acted, and the run may end meanwhile). False if one
    /// was still under way after the harness's idle window: it hung.
    pub fn settle(&self) -> bool {
        let deadline = Instant::now() + crate::patience::step();
        let mut st = self.lock();
        while st.acting > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = (self.registry.changed.wait_timeout(st, left))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Applies one action at the point `name`, recording it in the history.
    ///
    /// A hit marks the moment a thread *passes* the point: after a park is
    /// released or a delay slept, so the history orders it after whatever the
    /// test let happen meanwhile. Panics and kills never pass, so they record
    /// first; a park (or an await) records its arrival too, with the action,
    /// because what the point names (e.g. "alloc state set") already happened.
    fn apply(&self, at: &PointName, name: &str, action: Action) -> Option<String> {
        let some = Some(action.clone());
        match action {
            Action::Park => {
                self.record(at, &some);
                blocking(|| self.park(name));
                self.record(at, &None);
                None
            }
            Action::AwaitHit { point, nth } => {
                self.record(at, &some);
                // A pass that gave up carries the action, so it names its fault.
                if blocking(|| self.await_hit(&point.to_string(), nth)) {
                    self.record(at, &None);
                } else {
                    self.append(at, &some, Some(Detail::AwaitGaveUp));
                }
                None
            }
            Action::Delay(ms) => {
                blocking(|| std::thread::sleep(Duration::from_millis(ms)));
                self.record(at, &some);
                None
            }
            Action::Intervene(what) if what.is_sent_to_alloc() => {
                // Recorded first: what it sends can reach a fault that kills
                // this process (an agent SIGKILLed at the update it was
                // sent) before a later record, and the fault would read as
                // never fired. Its delivery is a point of its own.
                self.record(at, &some);
                // Delivered, or the handler failed loudly.
                let _ = self.intervene(at.scope(), what);
                None
            }
            Action::Intervene(what) => {
                // Done before the pass is recorded, so the history shows the
                // point passed only once the task's processes were acted on;
                // an intervention that found none proved nothing, and says so.
                let acted = self.intervene(at.scope(), what);
                self.append(at, &some, (!acted).then_some(Detail::NothingToActOn));
                None
            }
            Action::Error => {
                self.record(at, &some);
                Some(injected_message(name))
            }
            Action::Panic => {
                self.record(at, &some);
                panic!("{}", injected_message(name))
            }
            Action::KillAgent => {
                self.record(at, &some);
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
                unreachable!("SIGKILL cannot be caught")
            }
        }
    }

    /// Records a record-only point: no action applies.
    pub fn record_only(&self, scope: Option<&str>, point: &str) {
        self.append(&PointName::new(scope, point), &None, None);
    }

    /// Records a record-only point with a detail (see [`Detail`]).
    pub fn record_detail(&self, scope: Option<&str>, point: &str, detail: Detail) {
        self.append(&PointName::new(scope, point), &None, Some(detail));
    }

    /// Sends every later hit of this registry to `path` too (appended, one
    /// JSON line each), as [`FAULT_LOG_ENV`] does for a child: one file then
    /// holds the hits of the engine and of every executor it starts, in one
    /// order.
    pub fn log_to(&self, path: Option<&std::path::Path>) -> std::io::Result<()> {
        let file = match path {
            Some(path) => Some((open_log(path)?, path.to_path_buf())),
            None => None,
        };
        self.lock().log = file;
        Ok(())
    }

    fn record(&self, at: &PointName, action: &Option<Action>) {
        self.append(at, action, None)
    }

    fn append(&self, at: &PointName, action: &Option<Action>, detail: Option<Detail>) {
        let mut st = self.lock();
        st.seq += 1;
        let hit = Hit {
            seq: st.seq,
            point: at.clone(),
            action: action.clone(),
            detail,
            at_us: monotonic_us(),
        };
        if let Some((log, _)) = &mut st.log {
            // Written before the action, so a harness reading the log of a
            // process killed at this very point still sees the hit.
            let _ = append_line(log, &hit);
        }
        st.history.push(hit);
        self.notify();
    }

    /// The configuration a harness put in this process's environment, for
    /// a process that is one run (an agent it will SIGKILL, an executor).
    pub fn from_env() -> Result<Faults, EnvConfigError> {
        let faults = Faults::new();
        if let Ok(path) = std::env::var(FAULT_LOG_ENV) {
            let file = open_log(path.as_ref()).map_err(|source| EnvConfigError::Log {
                path: path.clone(),
                source,
            })?;
            faults.lock().log = Some((file, path.into()));
        }
        let Ok(spec) = std::env::var(FAULTS_ENV) else {
            return Ok(faults);
        };
        for entry in spec.split(';').filter(|e| !e.trim().is_empty()) {
            let fault: Fault = entry.trim().parse().map_err(EnvConfigError::Entry)?;
            faults.configure_fault(&fault);
        }
        Ok(faults)
    }

    /// Blocks until the fault log holds `nth` hits of `name`, and says
    /// whether it does. The log grows as any process sharing it moves on,
    /// so a wait that saw no growth for a whole patience window is hung: it
    /// gives up (and its pass records that, which fails the run).
    fn await_hit(&self, name: &str, nth: u32) -> bool {
        let Some(path) = self.lock().log.as_ref().map(|(_, p)| p.clone()) else {
            panic!("await({name}) configured, but this run logs no hits to wait on");
        };
        let broken = |e: std::io::Error| -> ! {
            panic!(
                "await({name}): following the fault log {}: {e}",
                path.display()
            )
        };
        let mut log = follow::LogFollower::open(&path).unwrap_or_else(|e| broken(e));
        let idle = crate::patience::step();
        let mut seen = 0;
        loop {
            let hits = log.new_hits().unwrap_or_else(|e| broken(e));
            seen += hits.iter().filter(|h| h.point.is_named(name)).count();
            if seen >= nth as usize {
                return true;
            }
            if !log.wait(idle).unwrap_or_else(|e| broken(e)) {
                return false;
            }
        }
    }

    /// Installs what [`Action::Intervene`] does in this run: the harness (or
    /// an agent acting for it) knows how to find a task's processes; the
    /// fault layer does not. [`Faults::reset`] removes it.
    pub fn set_intervention_handler(
        &self,
        handler: impl Fn(Option<&str>, Intervention) -> bool + Send + Sync + 'static,
    ) {
        self.lock().intervention = Some(Arc::new(handler));
    }

    fn intervene(&self, scope: Option<&str>, what: Intervention) -> bool {
        // Called unlocked: the handler may deliver an update that reaches
        // points of this registry.
        let handler = self.lock().intervention.clone();
        match handler {
            Some(handler) => handler(scope, what),
            // A configured fault that cannot act must not pass for one that did.
            None => {
                panic!("{what:?} configured at {scope:?}, but no intervention handler is installed")
            }
        }
    }

    /// Configures one fault (see [`Fault`]): its action on its `nth` hit only.
    pub fn configure_fault(&self, fault: &Fault) {
        self.configure_nth(
            fault.point.scope(),
            &fault.point.point,
            fault.action.clone(),
            fault.nth,
        );
    }

    /// Configures `action` at `point` (optionally only for one task's scope).
    pub fn configure(&self, scope: Option<&str>, point: &str, action: Action) {
        self.configure_nth(scope, point, action, 1)
    }

    fn configure_nth(&self, scope: Option<&str>, point: &str, action: Action, nth: u32) {
        let name = scoped(scope, point);
        let mut st = self.lock();
        st.released.remove(&name);
        st.reached.remove(&name);
        st.configured
            .entry(name)
            .or_default()
            .push((action, nth.max(1)));
    }

    fn park(&self, name: &str) {
        let mut st = self.lock();
        if st.released.contains(name) {
            return;
        }
        let generation = st.generation;
        *st.parked.entry(name.to_string()).or_default() += 1;
        self.notify();
        while !st.released.contains(name) && st.generation == generation {
            st = (self.registry.changed.wait(st)).unwrap_or_else(|p| p.into_inner());
        }
        if let Some(n) = st.parked.get_mut(name) {
            *n -= 1;
        }
        self.notify();
    }

    /// Lets every thread parked at the point continue, and any later arrival pass.
    pub fn release(&self, scope: Option<&str>, point: &str) {
        self.lock().released.insert(scoped(scope, point));
        self.notify();
    }

    /// Releases every configured park, keeping the configuration and the whole
    /// history: what a harness does when a run hung, so that the failure report
    /// still shows everything that happened before.
    pub fn release_all(&self) {
        let mut st = self.lock();
        let names: Vec<String> = st.configured.keys().cloned().collect();
        st.released.extend(names);
        self.notify();
    }

    /// Blocks until any of `conditions` holds and returns the index of the first
    /// that does. `idle` is a hang detector, not a deadline: it restarts every
    /// time any point is reached, so a slow machine that keeps making progress
    /// never times out, and only an engine that stopped moving does.
    pub fn wait_any(&self, conditions: &[Await], idle: Duration) -> Result<usize, WaitTimeout> {
        let holds = |st: &State, c: &Await| match c {
            Await::Parked(name) => st.parked.get(name).copied().unwrap_or(0) > 0,
            Await::Passed(name) => st.history.iter().any(|h| h.point.is_named(name)),
        };
        let mut found = None;
        self.wait_until(idle, &format!("any of {conditions:?}"), |st| {
            found = conditions.iter().position(|c| holds(st, c));
            found.is_some()
        })?;
        Ok(found.expect("condition held"))
    }

    /// Waits for `cond`, giving up only after `idle` passed with no new hit.
    fn wait_until(
        &self,
        idle: Duration,
        what: &str,
        mut cond: impl FnMut(&State) -> bool,
    ) -> Result<(), WaitTimeout> {
        let mut st = self.lock();
        let mut seen = st.seq;
        let mut deadline = Instant::now() + idle;
        while !cond(&st) {
            if st.seq != seen {
                seen = st.seq;
                deadline = Instant::now() + idle;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WaitTimeout {
                    idle,
                    hits: st.history.len(),
                    what: what.to_string(),
                });
            }
            st = (self.registry.changed.wait_timeout(st, left))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }

    /// How many points have been reached since the last [`Faults::reset`]:
    /// a progress counter for hang detectors elsewhere in the harness.
    pub fn progress(&self) -> u64 {
        self.lock().seq
    }

    /// Every point reached since the last [`Faults::reset`], in order.
    pub fn history(&self) -> Vec<Hit> {
        self.lock().history.clone()
    }

    /// Configured points that were never reached (as often as their fault's
    /// hit number): a test that configured a fault which never fired proved
    /// nothing and must fail.
    pub fn unfired(&self) -> Vec<String> {
        let st = self.lock();
        st.configured
            .iter()
            .filter(|(name, faults)| {
                let reached = st.reached.get(*name).copied().unwrap_or(0);
                faults.iter().any(|(_, nth)| reached < *nth)
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Removes every configuration (releasing parked threads), the
    /// intervention handler (which may hold what holds this registry) and
    /// the history; the log stays.
    pub fn reset(&self) {
        let mut st = self.lock();
        let generation = st.generation + 1;
        let log = st.log.take();
        // An action still under way ends (and is counted) as before.
        let acting = st.acting;
        *st = State {
            generation,
            log,
            acting,
            ..State::default()
        };
        self.notify();
    }
}

fn open_log(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// The host's monotonic clock (`CLOCK_MONOTONIC`), in microseconds: one
/// clock for every process appending to a shared log.
pub fn monotonic_us() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) } != 0 {
        return 0;
    }
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(now.tv_nsec).unwrap_or(0) / 1_000
}

#[derive(Debug, thiserror::Error)]
pub enum EnvConfigError {
    #[error("{FAULTS_ENV}: entry {0:?} is not name=action")]
    Entry(String),
    #[error("{FAULTS_ENV}: {0}")]
    Action(String),
    #[error("{FAULT_LOG_ENV} {path}: {source}")]
    Log {
        path: String,
        source: std::io::Error,
    },
}

/// Renders a configuration for [`Faults::from_env`] in a child process.
pub fn env_spec<'a>(faults: impl IntoIterator<Item = &'a Fault>) -> String {
    faults
        .into_iter()
        .map(Fault::to_string)
        .collect::<Vec<_>>()
        .join(";")
}

/// Reads a fault log written by a child process configured with
/// [`FAULT_LOG_ENV`]. A torn last line (the writer was killed mid-write) is ignored.
pub fn read_log(path: &std::path::Path) -> std::io::Result<Vec<Hit>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    parse_log(&text)
}

/// One hit, one line, in one write: lines of processes appending at once
/// never interleave (`writeln!` wrote a line and its newline apart, and a
/// hit was lost now and then).
fn append_line(log: &mut std::fs::File, hit: &Hit) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(hit).expect("hits serialize");
    line.push(b'\n');
    log.write_all(&line)
}

/// Every complete line is a hit; a last line without its newline is one
/// being written right now, and is left for the next read.
fn parse_log(text: &str) -> std::io::Result<Vec<Hit>> {
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete
        .lines()
        .enumerate()
        .map(|(n, line)| {
            serde_json::from_str(line).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("fault log line {}: {e}: {line:?}", n + 1),
                )
            })
        })
        .collect()
}

/// What an injected error or panic says: `fault injected at <point>`.
pub fn injected_message(point: &str) -> String {
    format!("{INJECTED} {point}")
}

/// Keeps injected panics out of the output: they are the scenario's doing,
/// expected, and recorded in its history and report; a 60-frame backtrace of
/// each would bury the verdicts of a release log. Every other panic still
/// goes to the previous hook, backtrace and all.
pub fn quiet_injected_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if !message.starts_with(INJECTED) {
            previous(info);
        }
    }));
}

/// Error of [`Faults::wait_any`]: nothing moved for a whole idle window.
#[derive(Debug, thiserror::Error)]
#[error("no progress for {idle:?} (after {hits} fault hits) while waiting for {what}")]
pub struct WaitTimeout {
    pub idle: Duration,
    pub hits: usize,
    pub what: String,
}

/// Something a test can wait for.
#[derive(Debug, Clone)]
pub enum Await {
    /// A thread is parked at this (full) point name right now.
    Parked(String),
    /// A thread has passed this (full) point name at least once.
    Passed(String),
}

#[cfg(test)]
mod tests;
