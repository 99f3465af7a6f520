//! The process-wide fault configuration and history (failpoints builds only).

use crate::{scoped, Action, Hit, INJECTED};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    /// Bumped by `reset`, so threads parked under an old configuration wake up.
    generation: u64,
    seq: u64,
    history: Vec<Hit>,
    configured: BTreeMap<String, Action>,
    /// Points with a thread parked at them right now (name -> count).
    parked: BTreeMap<String, usize>,
    /// Points released; a park at a released point falls through.
    released: BTreeSet<String>,
    /// Where hits are also appended, for a harness watching this process.
    log: Option<std::fs::File>,
}

struct Registry {
    state: Mutex<State>,
    changed: Condvar,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry {
        state: Mutex::new(State::default()),
        changed: Condvar::new(),
    })
}

fn lock() -> MutexGuard<'static, State> {
    // A panic injected at a point must not poison the fault layer itself.
    registry().state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records that `point` was reached and applies its configured action.
/// Returns the injected message when the action is [`Action::Error`].
pub fn reach(scope: Option<&str>, point: &str) -> Option<String> {
    let name = scoped(scope, point);
    let action = lock().configured.get(&name).cloned();
    // A hit marks the moment a thread *passes* the point: after a park is
    // released or a delay slept, so the history orders it after whatever the
    // test let happen meanwhile. Panics and kills never pass, so they record
    // first; a park records its arrival too (with the action), because what
    // the point names (e.g. "alloc state set") already happened then.
    let passes = !matches!(action, Some(Action::Panic | Action::KillAgent));
    if !passes || action == Some(Action::Park) {
        record(&name, &action);
    }
    let injected = action.as_ref().and_then(|_| {
        let run = || fail::eval(&name, |msg| msg.unwrap_or_else(|| injected_message(&name)));
        // A parked or sleeping point must not starve a tokio worker of its other tasks.
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(run)
            }
            _ => run(),
        }
    });
    if passes {
        // The pass of a park was recorded as its arrival already, with the action.
        let passed = if action == Some(Action::Park) {
            None
        } else {
            action
        };
        record(&name, &passed);
    }
    injected
}

fn record(name: &str, action: &Option<Action>) {
    let mut st = lock();
    st.seq += 1;
    let hit = Hit {
        seq: st.seq,
        name: name.to_string(),
        action: action.clone(),
    };
    if let Some(log) = &mut st.log {
        // Line-buffered and written before the action, so a harness reading
        // the log of a process killed at this very point still sees the hit.
        let line = serde_json::to_string(&hit).expect("hits serialize");
        let _ = writeln!(log, "{line}");
    }
    st.history.push(hit);
    registry().changed.notify_all();
}

/// Names the environment variables a harness uses to configure a child
/// process (an agent it will SIGKILL): `TASKGATE_FAULTS` holds
/// `name=action` pairs separated by `;` (name as `scope:point` or `point`),
/// `TASKGATE_FAULT_LOG` a file every hit is appended to as a JSON line.
pub const FAULTS_ENV: &str = "TASKGATE_FAULTS";
pub const FAULT_LOG_ENV: &str = "TASKGATE_FAULT_LOG";

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

/// Applies the configuration the harness put in this process's environment.
pub fn configure_from_env() -> Result<(), EnvConfigError> {
    if let Ok(path) = std::env::var(FAULT_LOG_ENV) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| EnvConfigError::Log { path, source })?;
        lock().log = Some(file);
    }
    let Ok(spec) = std::env::var(FAULTS_ENV) else {
        return Ok(());
    };
    for entry in spec.split(';').filter(|e| !e.trim().is_empty()) {
        let (name, action) = entry
            .trim()
            .rsplit_once('=')
            .ok_or_else(|| EnvConfigError::Entry(entry.to_string()))?;
        let action: Action = action.parse().map_err(EnvConfigError::Action)?;
        let (scope, point) = match name.split_once(':') {
            Some((scope, point)) => (Some(scope), point),
            None => (None, name),
        };
        configure(scope, point, action);
    }
    Ok(())
}

/// Renders a configuration for [`configure_from_env`] in a child process.
pub fn env_spec<'a>(faults: impl IntoIterator<Item = (&'a str, &'a Action)>) -> String {
    faults
        .into_iter()
        .map(|(name, action)| format!("{name}={action}"))
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
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// Configures `action` at `point` (optionally only for one task's scope).
pub fn configure(scope: Option<&str>, point: &str, action: Action) {
    let name = scoped(scope, point);
    let actions = match &action {
        Action::Park => {
            let park_name = name.clone();
            fail::cfg_callback(name.clone(), move || park(&park_name)).expect("callback cfg");
            None
        }
        Action::KillAgent => {
            fail::cfg_callback(name.clone(), || {
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            })
            .expect("callback cfg");
            None
        }
        Action::Delay(ms) => Some(format!("sleep({ms})")),
        Action::Error => Some(format!("return({})", injected_message(&name))),
        Action::Panic => Some(format!("panic({})", injected_message(&name))),
    };
    if let Some(actions) = actions {
        fail::cfg(name.clone(), &actions).expect("valid fail action");
    }
    let mut st = lock();
    st.released.remove(&name);
    st.configured.insert(name, action);
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

fn park(name: &str) {
    let reg = registry();
    let mut st = lock();
    if st.released.contains(name) {
        return;
    }
    let generation = st.generation;
    *st.parked.entry(name.to_string()).or_default() += 1;
    reg.changed.notify_all();
    while !st.released.contains(name) && st.generation == generation {
        st = reg.changed.wait(st).unwrap_or_else(|p| p.into_inner());
    }
    if let Some(n) = st.parked.get_mut(name) {
        *n -= 1;
    }
    reg.changed.notify_all();
}

/// Lets every thread parked at the point continue, and any later arrival pass.
pub fn release(scope: Option<&str>, point: &str) {
    let mut st = lock();
    st.released.insert(scoped(scope, point));
    registry().changed.notify_all();
}

/// Releases every configured park, keeping the configuration and the whole
/// history: what a harness does when a run hung, so that the failure report
/// still shows everything that happened before.
pub fn release_all() {
    let mut st = lock();
    let names: Vec<String> = st.configured.keys().cloned().collect();
    st.released.extend(names);
    registry().changed.notify_all();
}

/// Error of [`wait_any`]: nothing moved for a whole idle window.
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

/// Blocks until any of `conditions` holds and returns the index of the first
/// that does. `idle` is a hang detector, not a deadline: it restarts every
/// time any point is reached, so a slow machine that keeps making progress
/// never times out, and only an engine that stopped moving does.
pub fn wait_any(conditions: &[Await], idle: Duration) -> Result<usize, WaitTimeout> {
    let holds = |st: &State, c: &Await| match c {
        Await::Parked(name) => st.parked.get(name).copied().unwrap_or(0) > 0,
        Await::Passed(name) => st.history.iter().any(|h| &h.name == name),
    };
    let mut found = None;
    wait_until(idle, &format!("any of {conditions:?}"), |st| {
        found = conditions.iter().position(|c| holds(st, c));
        found.is_some()
    })?;
    Ok(found.expect("condition held"))
}

/// Waits for `cond`, giving up only after `idle` passed with no new hit.
fn wait_until(
    idle: Duration,
    what: &str,
    mut cond: impl FnMut(&State) -> bool,
) -> Result<(), WaitTimeout> {
    let mut st = lock();
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
        st = registry()
            .changed
            .wait_timeout(st, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    Ok(())
}

/// How many points have been reached since the last [`reset`]: a progress
/// counter for hang detectors elsewhere in the harness.
pub fn progress() -> u64 {
    lock().seq
}

/// Every point reached since the last [`reset`], in order.
pub fn history() -> Vec<Hit> {
    lock().history.clone()
}

/// Configured points that were never reached: a test that configured a fault
/// which never fired proved nothing and must fail.
pub fn unfired() -> Vec<String> {
    let st = lock();
    st.configured
        .keys()
        .filter(|name| !st.history.iter().any(|h| &h.name == *name))
        .cloned()
        .collect()
}

/// Removes every configuration (releasing parked threads) and clears the history.
pub fn reset() {
    let names: Vec<String> = {
        let mut st = lock();
        let names = st.configured.keys().cloned().collect::<Vec<_>>();
        st.released.extend(names.iter().cloned());
        registry().changed.notify_all();
        names
    };
    for name in &names {
        fail::remove(name);
    }
    let mut st = lock();
    let generation = st.generation + 1;
    let log = st.log.take();
    *st = State {
        generation,
        log,
        ..State::default()
    };
    registry().changed.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Mutex as StdMutex, MutexGuard as StdGuard};

    /// The registry is process-wide: these tests take turns.
    fn serial() -> StdGuard<'static, ()> {
        static TURN: StdMutex<()> = StdMutex::new(());
        let guard = TURN.lock().unwrap_or_else(|p| p.into_inner());
        reset();
        guard
    }

    const T: Duration = Duration::from_secs(10);

    #[test]
    fn a_park_holds_until_released_and_records_arrival_and_pass() {
        let _turn = serial();
        configure(Some("web"), "p", Action::Park);
        let worker = std::thread::spawn(|| reach(Some("web"), "p"));
        wait_any(&[Await::Parked("web:p".into())], T).unwrap();
        assert_eq!(history().len(), 1, "only the arrival so far");
        reach(None, "meanwhile");
        release(Some("web"), "p");
        assert_eq!(worker.join().unwrap(), None);
        let names: Vec<_> = history().into_iter().map(|h| (h.name, h.action)).collect();
        assert_eq!(
            names,
            [
                ("web:p".to_string(), Some(Action::Park)),
                ("meanwhile".to_string(), None),
                ("web:p".to_string(), None)
            ]
        );
        assert!(unfired().is_empty());
    }

    #[test]
    fn error_returns_the_injected_message_and_unconfigured_points_pass() {
        let _turn = serial();
        configure(None, "e", Action::Error);
        assert!(reach(None, "e").unwrap().contains("fault injected at e"));
        assert_eq!(reach(None, "other"), None);
    }

    #[test]
    fn a_configured_point_never_reached_is_reported_unfired() {
        let _turn = serial();
        configure(Some("db"), "never", Action::Delay(1));
        assert_eq!(unfired(), ["db:never".to_string()]);
    }

    #[test]
    fn reset_wakes_a_parked_thread() {
        let _turn = serial();
        configure(None, "stuck", Action::Park);
        let worker = std::thread::spawn(|| reach(None, "stuck"));
        wait_any(&[Await::Parked("stuck".into())], T).unwrap();
        reset();
        worker.join().unwrap();
    }

    #[test]
    fn wait_any_times_out_instead_of_hanging() {
        let _turn = serial();
        let err = wait_any(
            &[Await::Passed("nothing".into())],
            Duration::from_millis(20),
        )
        .unwrap_err();
        assert!(err.to_string().contains("nothing"));
    }

    #[test]
    fn progress_restarts_the_idle_window() {
        let _turn = serial();
        let idle = Duration::from_secs(2);
        let worker = std::thread::spawn(|| {
            // A slow worker: hits far inside the idle window, spanning more
            // than the window in all, then the awaited one. (The sleep is
            // the simulated slowness, not synchronisation.)
            for i in 0..12 {
                std::thread::sleep(Duration::from_millis(250));
                reach(None, &format!("step{i}"));
            }
            reach(None, "done");
        });
        wait_any(&[Await::Passed("done".into())], idle).unwrap();
        worker.join().unwrap();
    }

    #[test]
    fn release_all_lets_parks_go_and_keeps_the_history() {
        let _turn = serial();
        configure(None, "held", Action::Park);
        reach(None, "before");
        let worker = std::thread::spawn(|| reach(None, "held"));
        wait_any(&[Await::Parked("held".into())], T).unwrap();
        release_all();
        worker.join().unwrap();
        let names: Vec<_> = history().into_iter().map(|h| h.name).collect();
        assert_eq!(names, ["before", "held", "held"]);
    }

    #[test]
    fn env_spec_round_trips_and_the_log_survives_a_torn_line() {
        let _turn = serial();
        let spec = env_spec([
            ("web:tr.before_prestart", &Action::KillAgent),
            ("ar.kill_started", &Action::Delay(5)),
        ]);
        assert_eq!(spec, "web:tr.before_prestart=kill;ar.kill_started=delay(5)");
        for action in [
            Action::Park,
            Action::Delay(7),
            Action::Error,
            Action::Panic,
            Action::KillAgent,
        ] {
            assert_eq!(action.to_string().parse::<Action>(), Ok(action));
        }
        assert!("explode".parse::<Action>().is_err());
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("faults.jsonl");
        let hit = Hit {
            seq: 1,
            name: "a".into(),
            action: None,
        };
        std::fs::write(
            &log,
            format!("{}\n{{\"seq\":2,\"na", serde_json::to_string(&hit).unwrap()),
        )
        .unwrap();
        assert_eq!(read_log(&log).unwrap(), [hit]);
        assert!(read_log(&dir.path().join("absent")).unwrap().is_empty());
    }
}
