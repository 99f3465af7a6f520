//! Fault points: named boundaries in the engine and executor where a test can
//! force an order of events (park until released), slow things down, make a
//! step fail, panic, or kill the whole agent.
//!
//! The mechanism is the `fail` crate, compiled in only with the `failpoints`
//! feature: a release build carries no fault points at all (the macro expands
//! to nothing). On top of `fail` this crate keeps a history of every point
//! reached, so a test can assert that each fault it configured really fired
//! and an oracle can reason over the order of events.

pub mod patience;
pub mod points;
#[cfg(feature = "failpoints")]
mod registry;
pub mod schedule;
#[cfg(feature = "failpoints")]
pub use registry::*;

use serde::{Deserialize, Serialize};

/// What happens when a configured point is reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Block the reaching thread until [`release`] is called for the point.
    Park,
    /// Sleep this many milliseconds, then continue.
    Delay(u64),
    /// Make the step at this point fail with an injected error.
    Error,
    /// Panic the reaching thread.
    Panic,
    /// SIGKILL the whole process (the agent), as a crash would.
    KillAgent,
}

impl std::str::FromStr for Action {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "park" => Ok(Action::Park),
            "error" => Ok(Action::Error),
            "panic" => Ok(Action::Panic),
            "kill" => Ok(Action::KillAgent),
            _ => match s.strip_prefix("delay(").and_then(|r| r.strip_suffix(")")) {
                Some(ms) => ms
                    .parse()
                    .map(Action::Delay)
                    .map_err(|_| format!("bad delay in fault action {s:?}")),
                None => Err(format!(
                    "unknown fault action {s:?} (expected park, delay(MS), error, panic or kill)"
                )),
            },
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Park => f.write_str("park"),
            Action::Delay(ms) => write!(f, "delay({ms})"),
            Action::Error => f.write_str("error"),
            Action::Panic => f.write_str("panic"),
            Action::KillAgent => f.write_str("kill"),
        }
    }
}

/// One point passed, in the order the whole process passed them. A parked
/// point shows twice: its arrival (with `action: Some(Park)`) and its pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hit {
    pub seq: u64,
    /// The point's full name, `scope:point` for per-task points.
    pub name: String,
    /// The action that was applied, if the point was configured.
    pub action: Option<Action>,
}

/// Builds the full name of a point reached within a scope (a task name).
pub fn scoped(scope: Option<&str>, point: &str) -> String {
    match scope {
        Some(s) => format!("{s}:{point}"),
        None => point.to_string(),
    }
}

/// Marks a fault point. `fault_point!(point)` or `fault_point!(point, scope)`
/// only records and applies park/delay/panic/kill; the form with a third
/// argument, a closure from the injected message to the enclosing function's
/// return value, also honours `Action::Error` by returning early.
#[cfg(feature = "failpoints")]
#[macro_export]
macro_rules! fault_point {
    ($point:expr) => {{
        let _ = $crate::reach(None, $point);
    }};
    ($point:expr, $scope:expr) => {{
        let _ = $crate::reach(Some($scope), $point);
    }};
    ($point:expr, $scope:expr, $on_error:expr) => {{
        if let Some(msg) = $crate::reach(Some($scope), $point) {
            return $on_error(msg);
        }
    }};
}

#[cfg(not(feature = "failpoints"))]
#[macro_export]
macro_rules! fault_point {
    ($point:expr) => {{
        let _ = &$point;
    }};
    ($point:expr, $scope:expr) => {{
        let _ = (&$point, &$scope);
    }};
    ($point:expr, $scope:expr, $on_error:expr) => {{
        let _ = (&$point, &$scope);
    }};
}

/// The start of every injected error's and panic's message.
pub const INJECTED: &str = "fault injected at";

/// Whether this build carries fault points.
pub const ENABLED: bool = cfg!(feature = "failpoints");
