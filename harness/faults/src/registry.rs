//! The process-wide fault configuration and history (failpoints builds only).

use crate::{scoped, Action, Hit};
use std::collections::{BTreeMap, BTreeSet};
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
    let action = {
        let mut st = lock();
        st.seq += 1;
        let action = st.configured.get(&name).cloned();
        let hit = Hit { seq: st.seq, name: name.clone(), action: action.clone() };
        st.history.push(hit);
        registry().changed.notify_all();
        action
    };
    if action.is_none() {
        return None;
    }
    let run = || fail::eval(&name, |msg| msg.unwrap_or_else(|| format!("fault injected at {name}")));
    // A parked or sleeping point must not starve a tokio worker of its other tasks.
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(run)
        }
        _ => run(),
    }
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
        Action::Error => Some(format!("return(fault injected at {name})")),
        Action::Panic => Some(format!("panic(fault injected at {name})")),
    };
    if let Some(actions) = actions {
        fail::cfg(name.clone(), &actions).expect("valid fail action");
    }
    let mut st = lock();
    st.released.remove(&name);
    st.configured.insert(name, action);
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

/// Error of [`wait_until`]: the awaited condition did not come true in time.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {0:?} waiting for {1}")]
pub struct WaitTimeout(pub Duration, pub String);

/// Blocks until a thread is parked at the point. The timeout is a safety net
/// against a hung engine, not a synchronisation device.
pub fn wait_parked(scope: Option<&str>, point: &str, timeout: Duration) -> Result<(), WaitTimeout> {
    let name = scoped(scope, point);
    wait_until(timeout, &format!("a thread parked at {name}"), |st| {
        st.parked.get(&name).copied().unwrap_or(0) > 0
    })
}

/// Blocks until the point has been reached at least once.
pub fn wait_reached(scope: Option<&str>, point: &str, timeout: Duration) -> Result<(), WaitTimeout> {
    let name = scoped(scope, point);
    wait_until(timeout, &format!("{name} to be reached"), |st| {
        st.history.iter().any(|h| h.name == name)
    })
}

fn wait_until(
    timeout: Duration,
    what: &str,
    cond: impl Fn(&State) -> bool,
) -> Result<(), WaitTimeout> {
    let deadline = Instant::now() + timeout;
    let mut st = lock();
    while !cond(&st) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WaitTimeout(timeout, what.to_string()));
        }
        st = registry().changed.wait_timeout(st, left).unwrap_or_else(|p| p.into_inner()).0;
    }
    Ok(())
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
    *st = State { generation, ..State::default() };
    registry().changed.notify_all();
}

