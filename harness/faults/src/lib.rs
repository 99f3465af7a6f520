//! Fault points: named boundaries in the engine and executor where a test can
//! force an order of events (park until released), slow things down, make a
//! step fail, panic, or kill the whole agent.
//!
//! Compiled in only with the `failpoints` feature: a release build carries
//! no fault points at all (the macros expand to nothing, and [`Faults`] is
//! an empty type). Several faults may sit on one point, each on its own hit
//! (`@N`), applied in the order they were configured (an await, then a
//! kill). Every point reached goes into the run's history (and, when set, a
//! log file shared with child processes), so a test can assert that each
//! fault it configured really fired and an oracle can reason over the order
//! of events across the agent and its executors.
//!
//! Each run owns its registry, a [`Faults`] handle passed to everything that
//! reaches its points: runs in one process never see each other's faults,
//! parks or hits.

pub mod patience;
pub mod points;
#[cfg(feature = "failpoints")]
mod registry;
pub mod rng;
pub mod schedule;
pub mod seeded;
#[cfg(feature = "failpoints")]
pub use registry::*;

/// Runs a wait outside the runtime's scheduling: a parked or sleeping point
/// (or a harness, or an agent's lookup, waiting on another thread) must not
/// starve a tokio worker of its other tasks.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// A build without fault points has no registry: the handle a run passes
/// down is empty, and the macros never read it.
#[cfg(not(feature = "failpoints"))]
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults;

/// Names the environment variables a harness uses to configure a child
/// process (an agent it will SIGKILL, an executor): `TASKGATE_FAULTS` holds
/// `name=action` pairs separated by `;` (name as `scope:point` or `point`),
/// `TASKGATE_FAULT_LOG` a file every hit is appended to as a JSON line.
/// Defined in every build: a launcher sets or clears them whether or not it
/// was built with fault points.
pub const FAULTS_ENV: &str = "TASKGATE_FAULTS";
pub const FAULT_LOG_ENV: &str = "TASKGATE_FAULT_LOG";

use serde::{Deserialize, Serialize};

/// What happens when a configured point is reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Block the reaching thread until the run releases the point
    /// (`Faults::release`).
    Park,
    /// Sleep this many milliseconds, then continue.
    Delay(u64),
    /// Make the step at this point fail with an injected error.
    Error,
    /// Panic the reaching thread.
    Panic,
    /// SIGKILL the whole process (the agent), as a crash would.
    KillAgent,
    /// Act on the point's task from outside the engine, through the handler
    /// the run installed with `Faults::set_intervention_handler`.
    Intervene(Intervention),
    /// Hold here until the shared fault log shows `point` reached `nth`
    /// times, by any process: a park another process releases just by
    /// getting somewhere (an executor held until a restored agent acts).
    AwaitHit { point: PointName, nth: u32 },
}

/// What a harness does to a task's processes behind the engine's back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Intervention {
    /// SIGKILL the task's executor, as an OOM kill or a crash would.
    KillExecutor,
    /// SIGKILL every process in the task's cgroup (its whole tree).
    KillTaskTree,
    /// SIGSTOP the task's executor: it stays alive but answers nothing.
    StopExecutor,
    /// SIGCONT the task's executor.
    ContinueExecutor,
    /// Deliver the alloc's stop update.
    StopAlloc,
    /// Deliver the alloc's next job version, an in-place update.
    UpdateAlloc,
    /// Restart the alloc's running tasks, as a user would.
    RestartAlloc,
    /// Restart all of the alloc's tasks, the completed ones too.
    RestartAllTasks,
}

impl Intervention {
    pub const ALL: [Intervention; 8] = [
        Intervention::KillExecutor,
        Intervention::KillTaskTree,
        Intervention::StopExecutor,
        Intervention::ContinueExecutor,
        Intervention::StopAlloc,
        Intervention::UpdateAlloc,
        Intervention::RestartAlloc,
        Intervention::RestartAllTasks,
    ];

    /// Sent to the alloc (an update, a restart), not done to a task's
    /// processes: allowed at any point, alloc-wide ones too.
    pub fn is_sent_to_alloc(self) -> bool {
        matches!(
            self,
            Intervention::StopAlloc
                | Intervention::UpdateAlloc
                | Intervention::RestartAlloc
                | Intervention::RestartAllTasks
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Intervention::KillExecutor => "kill-executor",
            Intervention::KillTaskTree => "kill-task-tree",
            Intervention::StopExecutor => "sigstop-executor",
            Intervention::ContinueExecutor => "sigcont-executor",
            Intervention::StopAlloc => "stop-alloc",
            Intervention::UpdateAlloc => "update-alloc",
            Intervention::RestartAlloc => "restart-alloc",
            Intervention::RestartAllTasks => "restart-all-tasks",
        }
    }
}

impl std::str::FromStr for Action {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "park" => Ok(Action::Park),
            "error" => Ok(Action::Error),
            "panic" => Ok(Action::Panic),
            "kill" => Ok(Action::KillAgent),
            _ if s.starts_with("await(") && s.ends_with(')') => {
                let inner = &s["await(".len()..s.len() - 1];
                let (point, nth) = split_nth(inner)?;
                Ok(Action::AwaitHit {
                    point: point.parse()?,
                    nth,
                })
            }
            _ if Intervention::ALL.iter().any(|i| i.as_str() == s) => Ok(Action::Intervene(
                *Intervention::ALL
                    .iter()
                    .find(|i| i.as_str() == s)
                    .expect("checked"),
            )),
            _ => match s.strip_prefix("delay(").and_then(|r| r.strip_suffix(")")) {
                Some(ms) => ms
                    .parse()
                    .map(Action::Delay)
                    .map_err(|_| format!("bad delay in fault action {s:?}")),
                None => Err(format!(
                    "unknown fault action {s:?} (expected park, delay(MS), error, panic, kill, {}, await(POINT@N))",
                    Intervention::ALL.map(Intervention::as_str).join(", ")
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
            Action::Intervene(i) => f.write_str(i.as_str()),
            Action::AwaitHit { point, nth } => write!(f, "await({point}@{nth})"),
        }
    }
}

/// One point passed, in the order its run passed them. A parked
/// point shows twice: its arrival (with `action: Some(Park)`) and its pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hit {
    pub seq: u64,
    pub point: PointName,
    /// The action that was applied, if the point was configured.
    pub action: Option<Action>,
    /// What a record-only point reports about the moment it marks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Detail>,
    /// When it was recorded, in microseconds of the host's monotonic clock,
    /// which every process on the host reads alike: the oracle measures
    /// the timers a run kept (restart delays, kill grace) between the hits
    /// of the agents and the executors.
    #[serde(default)]
    pub at_us: u64,
}

impl Hit {
    /// The point's full name, `scope:point` for per-task points.
    pub fn name(&self) -> String {
        self.point.to_string()
    }

    /// Whether this is `point` reached by `task` (or, for `None`, alloc-wide).
    pub fn is(&self, task: Option<&str>, point: &str) -> bool {
        self.point.scope() == task && self.point.point == point
    }
}

/// Facts a process records at a point for the harness's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Detail {
    /// An executor's task exited with this code, or was killed by this signal.
    Exit {
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// The harness delivered this job version as an in-place update.
    JobVersion { version: u64 },
    /// A user restart was accepted; `all_tasks` brings back the completed
    /// tasks too.
    Restart { all_tasks: bool },
    /// A task's runner decided a restart by its policy, to begin after
    /// this wait (nanoseconds: the jitter is drawn in them).
    RestartWait { wait_ns: u64 },
    /// An await went on without what it awaited: the run made no progress
    /// for a whole patience window. The fault proved nothing.
    AwaitGaveUp,
    /// An intervention on a task's processes found none to act on (no
    /// executor to kill, say). The fault proved nothing.
    NothingToActOn,
}

/// Builds the full name of a point reached within a scope (a task name).
pub fn scoped(scope: Option<&str>, point: &str) -> String {
    match scope {
        Some(s) => format!("{s}:{point}"),
        None => point.to_string(),
    }
}

/// A point as configured: the task it is scoped to, if any, and the point.
/// Written `scope:point` (task names cannot hold `:`), or bare `point`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PointName {
    pub scope: Option<String>,
    pub point: String,
}

impl PointName {
    pub fn new(scope: Option<&str>, point: &str) -> PointName {
        PointName {
            scope: scope.map(str::to_string),
            point: point.to_string(),
        }
    }

    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    /// Whether `name` (written as [`scoped`] writes it) names this point,
    /// without building the name: waits ask it of every hit, every time
    /// one comes.
    pub fn is_named(&self, name: &str) -> bool {
        match self.scope() {
            Some(scope) => {
                name.strip_prefix(scope).and_then(|p| p.strip_prefix(':')) == Some(&self.point)
            }
            None => name == self.point,
        }
    }
}

impl std::fmt::Display for PointName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(scope) = self.scope() {
            write!(f, "{scope}:")?;
        }
        f.write_str(&self.point)
    }
}

impl std::str::FromStr for PointName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (scope, point) = match s.split_once(':') {
            Some((scope, point)) => (Some(scope), point),
            None => (None, s),
        };
        if point.is_empty() || scope.is_some_and(str::is_empty) || point.contains(':') {
            return Err(format!(
                "bad point name {s:?} (expected `task:point` or `point`)"
            ));
        }
        Ok(PointName::new(scope, point))
    }
}

/// Splits `name@N` (N a hit number from 1; `name` alone is hit 1).
fn split_nth(name: &str) -> Result<(&str, u32), String> {
    match name.rsplit_once('@') {
        Some((point, n)) => n
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .map(|n| (point, n))
            .ok_or_else(|| format!("@{n} is not a hit number from 1")),
        None => Ok((name, 1)),
    }
}

/// A configured fault: `action` on the `nth` time (1-based) `point` is reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub point: PointName,
    pub action: Action,
    pub nth: u32,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.point)?;
        if self.nth != 1 {
            write!(f, "@{}", self.nth)?;
        }
        write!(f, "={}", self.action)
    }
}

impl std::str::FromStr for Fault {
    type Err = String;
    /// `point[@N]=action`, as [`Fault`]'s `Display` writes it.
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, action) = s
            .rsplit_once('=')
            .ok_or_else(|| format!("fault {s:?} is not point[@N]=action"))?;
        let (point, nth) = split_nth(name).map_err(|e| format!("fault {s:?}: {e}"))?;
        Ok(Fault {
            point: point.trim().parse()?,
            action: action.trim().parse()?,
            nth,
        })
    }
}

/// Marks a fault point of the run `$faults` (a [`Faults`]).
/// `fault_point!(faults, point)` or `fault_point!(faults, point, scope)`
/// only records and applies park/delay/panic/kill; the form with a fourth
/// argument, a closure from the injected message to the enclosing
/// function's return value, also honours `Action::Error` by returning early.
#[cfg(feature = "failpoints")]
#[macro_export]
macro_rules! fault_point {
    ($faults:expr, $point:expr) => {{
        let _ = $crate::Faults::reach(&$faults, None, $point);
    }};
    ($faults:expr, $point:expr, $scope:expr) => {{
        let _ = $crate::Faults::reach(&$faults, Some($scope), $point);
    }};
    ($faults:expr, $point:expr, $scope:expr, $on_error:expr) => {{
        if let Some(msg) = $crate::Faults::reach(&$faults, Some($scope), $point) {
            return $on_error(msg);
        }
    }};
}

/// Without fault points, nothing: the arguments are type-checked in a
/// branch never taken, so none is evaluated (not even a point name built
/// with `format!`).
#[cfg(not(feature = "failpoints"))]
#[macro_export]
macro_rules! fault_point {
    ($faults:expr, $point:expr) => {{
        if false {
            let _ = (&$faults, &$point);
        }
    }};
    ($faults:expr, $point:expr, $scope:expr) => {{
        if false {
            let _ = (&$faults, &$point, &$scope);
        }
    }};
    ($faults:expr, $point:expr, $scope:expr, $on_error:expr) => {{
        if false {
            let _ = (&$faults, &$point, &$scope);
        }
    }};
}

/// Records a record-only point (no action applies) of the run `$faults`:
/// alloc-wide, for a task, or with what it knows.
#[cfg(feature = "failpoints")]
#[macro_export]
macro_rules! record_point {
    ($faults:expr, alloc $point:expr, $detail:expr) => {{
        $crate::Faults::record_detail(&$faults, None, $point, $detail);
    }};
    ($faults:expr, $point:expr) => {{
        $crate::Faults::record_only(&$faults, None, $point);
    }};
    ($faults:expr, $point:expr, $scope:expr, $detail:expr) => {{
        $crate::Faults::record_detail(&$faults, Some($scope), $point, $detail);
    }};
    ($faults:expr, $point:expr, $scope:expr) => {{
        $crate::Faults::record_only(&$faults, Some($scope), $point);
    }};
}

#[cfg(not(feature = "failpoints"))]
#[macro_export]
macro_rules! record_point {
    ($faults:expr, alloc $point:expr, $detail:expr) => {{
        if false {
            let _ = (&$faults, &$point, &$detail);
        }
    }};
    ($faults:expr, $point:expr) => {{
        if false {
            let _ = (&$faults, &$point);
        }
    }};
    ($faults:expr, $point:expr, $scope:expr, $detail:expr) => {{
        if false {
            let _ = (&$faults, &$point, &$scope, &$detail);
        }
    }};
    ($faults:expr, $point:expr, $scope:expr) => {{
        if false {
            let _ = (&$faults, &$point, &$scope);
        }
    }};
}

/// The start of every injected error's and panic's message.
pub const INJECTED: &str = "fault injected at";

/// Whether this build carries fault points.
pub const ENABLED: bool = cfg!(feature = "failpoints");

#[cfg(test)]
mod tests {
    use super::*;

    /// A build without fault points pays nothing for them: the handle is
    /// empty and the macros evaluate none of their arguments.
    #[cfg(not(feature = "failpoints"))]
    #[test]
    fn without_fault_points_the_macros_evaluate_nothing() {
        fn every_form(faults: Faults, touched: &std::cell::Cell<u32>) -> Result<(), String> {
            let touch = |name: &'static str| {
                touched.set(touched.get() + 1);
                name
            };
            let detail = || Detail::JobVersion {
                version: u64::from(touch("detail").len() as u32),
            };
            fault_point!(faults, touch("p"));
            fault_point!(faults, touch("p"), touch("web"));
            fault_point!(faults, touch("p"), touch("web"), |msg: String| Err(msg));
            record_point!(faults, touch("p"));
            record_point!(faults, touch("p"), touch("web"));
            record_point!(faults, touch("p"), touch("web"), detail());
            record_point!(faults, alloc touch("p"), detail());
            Ok(())
        }
        assert_eq!(std::mem::size_of::<Faults>(), 0);
        let touched = std::cell::Cell::new(0);
        assert_eq!(every_form(Faults, &touched), Ok(()));
        assert_eq!(touched.get(), 0, "an argument was evaluated");
    }

    /// A point's name, as written and as matched, for scoped and alloc-wide
    /// points alike.
    #[test]
    fn a_point_is_named_as_it_is_written() {
        for (scope, point) in [(Some("web"), "tr.killing"), (None, "ar.started")] {
            let name = PointName::new(scope, point);
            assert_eq!(name.to_string(), scoped(scope, point));
            assert!(name.is_named(&scoped(scope, point)));
        }
        let web = PointName::new(Some("web"), "tr.killing");
        for other in [
            "tr.killing",
            "web:",
            "webtr.killing",
            "we:tr.killing",
            "web:tr.killin",
        ] {
            assert!(!web.is_named(other), "{other}");
        }
        assert!(!PointName::new(None, "tr.killing").is_named("web:tr.killing"));
    }

    /// With fault points, the same forms reach the run's own registry.
    #[cfg(feature = "failpoints")]
    #[test]
    fn with_fault_points_the_macros_reach_the_runs_registry() {
        fn every_form(faults: &Faults) -> Result<(), String> {
            fault_point!(faults, "a");
            fault_point!(faults, "b", "web");
            record_point!(faults, "c");
            record_point!(faults, "d", "web");
            record_point!(faults, "e", "web", Detail::JobVersion { version: 1 });
            record_point!(faults, alloc "f", Detail::JobVersion { version: 2 });
            fault_point!(faults, "g", "web", |msg: String| Err(msg));
            Ok(())
        }
        let (faults, other) = (Faults::new(), Faults::new());
        faults.configure(Some("web"), "g", Action::Error);
        assert!(every_form(&faults).unwrap_err().starts_with(INJECTED));
        let names: Vec<_> = faults.history().iter().map(Hit::name).collect();
        assert_eq!(names, ["a", "web:b", "c", "web:d", "web:e", "f", "web:g"]);
        assert!(other.history().is_empty(), "another run saw nothing");
    }
}
