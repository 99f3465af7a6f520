//! What an in-place update must never be: lost, taken half-way, or undone.
//! The harness's updates carry the job version twice, in an `env` entry and
//! in a `meta` entry (which a task sees as `NOMAD_META_<key>`, as Nomad
//! documents it); the oracle reads both from the spec the task's executor
//! holds while the task's first exec is held ([`StartedVersion::of_pid`](crate::history::StartedVersion::of_pid)):
//! the environment the task is really exec'd with, not the engine's
//! account of it.

use crate::history::{Event, ExecRecord, TaskShape, JOB_VERSION_ENV, JOB_VERSION_META};
use crate::identity::SPEC_FD;
use crate::invariant::{Invariant, Violation};
use crate::timeline::tree_roots;
use std::time::Duration;
use taskgate_faults::points::{
    AR_TASK_RUNNERS_UPDATED, AR_UPDATE_RECEIVED, HARNESS_UPDATE_DELIVERED, TR_START_CONDITION_MET,
};
use taskgate_faults::{scoped, Action, Detail};

/// The kill timeout of a task at job `version`, from its first version's:
/// each of the harness's updates halves it, so a running attempt killed
/// with a later version's grace is killed too soon, and shows.
pub fn kill_timeout_of(first: Duration, version: u64) -> Duration {
    u32::try_from(version)
        .ok()
        .and_then(|v| 2u32.checked_pow(v))
        .map_or(Duration::ZERO, |halvings| first / halvings)
}

/// [`Invariant::UpdatesWhole`]: each attempt's environment holds one version in both
/// entries, and its kill timeout is that version's; a task's attempts
/// never go back to an older version; and an
/// attempt whose runner had been given a version before it met its start
/// condition (the update handler passed `ar.task_runners_updated` for it)
/// starts with that version or a newer one, unless one of the task's
/// update hooks was made to fail meanwhile (the runner then keeps its old
/// definition until its next attempt, by contract). A tree whose first
/// exec's version the gate could not read is judged only when its first
/// process evidently lived past that exec (see `outlived_its_exec`): it
/// then cannot be shown to start with one whole version, and breaks it.
pub fn check_updates_whole(history: &[Event], tasks: &[TaskShape]) -> Vec<Violation> {
    let given = given_versions(history);
    let mut violations = Vec::new();
    for shape in tasks {
        let task = shape.name.as_str();
        let violation = |detail: String| Invariant::UpdatesWhole.violation(Some(task), detail);
        let mut previous = 0;
        for root in tree_roots(history, task) {
            let Event::Exec(exec) = &history[root] else {
                continue;
            };
            let Some(started) = &exec.started_version else {
                if let Some(later) = outlived_its_exec(history, task, root, exec) {
                    violations.push(violation(format!(
                        "pid {} (#{root}) lived on past its first exec (#{later}), yet the gate read no job version from the spec on its fd {SPEC_FD}: its attempt cannot be shown to start with one whole version",
                        exec.pid
                    )));
                }
                continue;
            };
            let Some(version) = started.whole() else {
                violations.push(violation(format!(
                    "pid {} started half-way through an update: env {JOB_VERSION_ENV}={:?}, meta {JOB_VERSION_META}={:?}",
                    exec.pid, started.env, started.meta
                )));
                continue;
            };
            let owed = kill_timeout_of(shape.kill_timeout, version);
            if let Some(started) = started
                .kill_timeout
                .filter(|t| t.as_millis() != owed.as_millis())
            {
                violations.push(violation(format!(
                    "pid {} started with job version {version}, and version {version}'s kill timeout is {owed:?}, not its {started:?}",
                    exec.pid
                )));
            }
            if version < previous {
                violations.push(violation(format!(
                    "pid {} started with job version {version} after an attempt with {previous}",
                    exec.pid
                )));
                continue;
            }
            previous = version;
            let met = scoped(Some(task), TR_START_CONDITION_MET);
            let Some(start) = (0..root).rev().find(|&i| history[i].is_hit(&met)) else {
                continue;
            };
            let owed = given
                .iter()
                .take_while(|(at, _)| *at < start)
                .map(|(_, v)| *v)
                .max();
            // The runner takes an update right after its start condition.
            let hook_failed = (start..root).any(|i| update_hook_faulted(&history[i], task));
            if let Some(owed) = owed.filter(|owed| version < *owed && !hook_failed) {
                violations.push(violation(format!(
                    "pid {} started with job version {version}; its runner had been given {owed} before it met its start condition",
                    exec.pid
                )));
            }
        }
    }
    violations
}

/// Where a later exec of `task`'s, before its next launch, shows that the
/// first process of the tree rooted at `root` (`exec`) lived past its
/// first exec: the process exec'd again, or sat in the cgroup beside the
/// exec'ing one. Without that, a version the gate could not read is no
/// breach: the gate reads it while the kernel holds the exec, and a
/// process killed meanwhile (the kernel's wait for the answer is
/// killable: a stop's signal, the harness's kill) leaves nothing to read
/// and ran nothing, of any version. A root that found its cgroup shared
/// may be another tree's exec: [`Invariant::OneLiveTree`]'s to judge.
fn outlived_its_exec(
    history: &[Event],
    task: &str,
    root: usize,
    exec: &ExecRecord,
) -> Option<usize> {
    if !exec.cgroup_peers.is_empty() {
        return None;
    }
    let beside_or_again = |e: &Event| match e {
        Event::Exec(r) if e.is_task_exec_of(task) => {
            r.pid == exec.pid || r.cgroup_peers.contains(&exec.pid)
        }
        _ => false,
    };
    (history[root + 1..].iter())
        .take_while(|e| e.executor_exec_of(task).is_none())
        .position(beside_or_again)
        .map(|n| root + 1 + n)
}

/// The job version the harness delivered at `event`, if it delivered one
/// there (recorded just before it is sent).
pub(crate) fn delivered_version(event: &Event) -> Option<u64> {
    match event {
        Event::FaultHit(hit) if hit.point.scope().is_none() => {
            match (hit.point.point.as_str(), hit.detail) {
                (HARNESS_UPDATE_DELIVERED, Some(Detail::JobVersion { version })) => Some(version),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Where the update handler told the runners of each delivered version:
/// deliveries and receipts pair up in order (one update handler, one
/// channel) within one agent's life.
fn given_versions(history: &[Event]) -> Vec<(usize, u64)> {
    let mut delivered: std::collections::VecDeque<Option<u64>> = Default::default();
    let mut handling = None;
    let mut given = Vec::new();
    for (i, event) in history.iter().enumerate() {
        if let Some(version) = delivered_version(event) {
            delivered.push_back(Some(version));
            continue;
        }
        match event {
            Event::AgentRestarted { .. } => {
                delivered.clear();
                handling = None;
            }
            Event::StopDelivered { .. } => delivered.push_back(None),
            Event::FaultHit(hit) => match (hit.point.scope(), hit.point.point.as_str()) {
                (None, AR_UPDATE_RECEIVED) => handling = delivered.pop_front().flatten(),
                (None, AR_TASK_RUNNERS_UPDATED) => {
                    if let Some(version) = handling.take() {
                        given.push((i, version));
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }
    given
}

/// A fault that made one of `task`'s update hooks fail.
fn update_hook_faulted(event: &Event, task: &str) -> bool {
    matches!(event, Event::FaultHit(h) if h.point.scope() == Some(task)
        && h.point.point.starts_with("hook.update.")
        && matches!(h.action, Some(Action::Error | Action::Panic)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{ExecRecord, StartedVersion, TaskRole};
    use crate::identity::ExecIdentity;
    use rstest::rstest;
    use taskgate_faults::Hit;

    fn hit(name: &str, action: Option<Action>, detail: Option<Detail>) -> Event {
        Event::FaultHit(Hit {
            seq: 0,
            point: name.parse().unwrap(),
            action,
            detail,
            at_us: 0,
        })
    }

    /// web's runner meets its start condition and its attempt is exec'd
    /// with `env` and `meta` as its two version entries.
    fn attempt(env: Option<&str>, meta: Option<&str>) -> Vec<Event> {
        [vec![met()], launch(env, meta)].concat()
    }

    fn met() -> Event {
        hit("web:tr.start_condition_met", None, None)
    }

    /// web's attempt exec'd with `env` and `meta` as its version entries.
    fn launch(env: Option<&str>, meta: Option<&str>) -> Vec<Event> {
        launch_read(Some(StartedVersion {
            env: env.map(str::to_string),
            meta: meta.map(str::to_string),
            kill_timeout: None,
        }))
    }

    /// web's attempt launched, its tree's first exec (pid 7) read
    /// `started` (`None`: the gate could not read its version).
    fn launch_read(started: Option<StartedVersion>) -> Vec<Event> {
        vec![executor(), tree_exec(7, &[], started)]
    }

    /// web's executor exec'd: a launch.
    fn executor() -> Event {
        let executor = ExecIdentity::Executor {
            alloc_id: "a".into(),
            task: "web".into(),
        };
        Event::Exec(ExecRecord::allowed(0, executor))
    }

    /// An exec in web's cgroup by `pid`, beside `peers`, that read `started`.
    fn tree_exec(pid: i32, peers: &[i32], started: Option<StartedVersion>) -> Event {
        let tree = ExecIdentity::Task {
            alloc_id: "a".into(),
            task: "web".into(),
        };
        Event::Exec(ExecRecord {
            pid,
            cgroup_peers: peers.to_vec(),
            started_version: started,
            ..ExecRecord::allowed(0, tree)
        })
    }

    /// The harness delivers `version` and the update handler tells the runners.
    fn given(version: u64) -> Vec<Event> {
        vec![
            hit(
                "harness.update_delivered",
                None,
                Some(Detail::JobVersion { version }),
            ),
            hit("ar.update_received", None, None),
            hit("ar.task_runners_updated", None, None),
        ]
    }

    /// A stop, then version 1, delivered; only the stop handled yet.
    fn stop_then_update() -> Vec<Event> {
        vec![
            Event::StopDelivered { seq: 0 },
            hit(
                "harness.update_delivered",
                None,
                Some(Detail::JobVersion { version: 1 }),
            ),
            hit("ar.update_received", None, None),
            hit("ar.task_runners_updated", None, None),
        ]
    }

    /// The next delivered update handled.
    fn handled() -> Vec<Event> {
        vec![
            hit("ar.update_received", None, None),
            hit("ar.task_runners_updated", None, None),
        ]
    }

    fn failed_update_hook() -> Vec<Event> {
        vec![hit(
            "web:hook.update.before.task_env",
            Some(Action::Error),
            None,
        )]
    }

    fn violations(parts: &[Vec<Event>]) -> usize {
        let history: Vec<Event> = parts.concat();
        let web = TaskShape::new("web", TaskRole::Main { leader: false }, 3);
        check_updates_whole(&history, &[web]).len()
    }

    #[rstest]
    #[case::no_update(vec![attempt(None, None), attempt(None, None)], 0)]
    #[case::taken_next_attempt(vec![attempt(None, None), given(1), attempt(Some("1"), Some("1"))], 0)]
    #[case::given_after_the_start_condition(vec![vec![met()], given(1), launch(None, None)], 0)]
    #[case::lost(vec![attempt(None, None), given(1), attempt(None, None)], 1)]
    #[case::half_way(vec![given(1), attempt(Some("1"), None)], 1)]
    #[case::half_way_other_side(vec![given(1), attempt(Some("1"), Some("2"))], 1)]
    #[case::went_back(vec![given(2), attempt(Some("2"), Some("2")), attempt(Some("1"), Some("1"))], 1)]
    #[case::deferred_by_a_failed_hook(
        vec![given(1), vec![met()], failed_update_hook(), launch(None, None)], 0
    )]
    #[case::a_failed_hook_excuses_one_attempt_only(
        vec![given(1), vec![met()], failed_update_hook(), launch(None, None), attempt(None, None)], 1
    )]
    #[case::taken_after_a_failed_hook(
        vec![given(1), vec![met()], failed_update_hook(), launch(None, None), attempt(Some("1"), Some("1"))], 0
    )]
    #[case::a_stop_first_pairs_in_order(
        vec![stop_then_update(), attempt(None, None), handled(), attempt(Some("1"), Some("1"))], 0
    )]
    #[case::a_stop_first_then_lost(vec![stop_then_update(), handled(), attempt(None, None)], 1)]
    #[case::lost_with_the_agent(
        vec![vec![hit("harness.update_delivered", None, Some(Detail::JobVersion { version: 1 }))],
             vec![Event::AgentRestarted { stop: false }], handled(),
             attempt(None, None)], 0
    )]
    // A version the gate could not read breaks it once the tree's first
    // process shows it lived past that exec, before the next launch.
    #[case::unread_and_a_child_beside_it(
        vec![vec![met()], launch_read(None), vec![tree_exec(8, &[7], None)]], 1
    )]
    #[case::unread_killed_in_its_exec(vec![vec![met()], launch_read(None)], 0)]
    #[case::unread_then_the_next_attempt(
        vec![vec![met()], launch_read(None), attempt(None, None)], 0
    )]
    #[case::unread_beside_another_tree(
        vec![vec![met(), executor(), tree_exec(7, &[5], None), tree_exec(7, &[5], None)]], 0
    )]
    fn updates_are_whole(#[case] parts: Vec<Vec<Event>>, #[case] expected: usize) {
        assert_eq!(violations(&parts), expected);
    }

    /// The gate could not read the version web's tree was exec'd with,
    /// yet its first process lived past that exec (it exec'd again): the
    /// attempt cannot be shown to start with one whole version.
    #[test]
    fn an_unread_version_of_a_tree_that_ran_on() {
        let parts = [
            vec![met()],
            launch_read(None),
            vec![tree_exec(7, &[], None)],
        ];
        assert_eq!(violations(&parts), 1, "pid 7 ran on with no version read");
    }

    /// web's first version kills with 400 ms: version 1's spec must say 200.
    #[rstest]
    #[case::its_versions(Some("1"), 200, 0)]
    #[case::an_older_versions(Some("1"), 400, 1)]
    #[case::the_first_versions(None, 400, 0)]
    fn the_kill_timeout_is_the_started_versions(
        #[case] version: Option<&str>,
        #[case] kill_timeout_ms: u64,
        #[case] expected: usize,
    ) {
        let mut attempt = launch(version, version);
        if let Event::Exec(exec) = &mut attempt[1] {
            exec.started_version.as_mut().unwrap().kill_timeout =
                Some(Duration::from_millis(kill_timeout_ms));
        }
        let web = TaskShape {
            kill_timeout: Duration::from_millis(400),
            ..TaskShape::new("web", TaskRole::Main { leader: false }, 0)
        };
        let history = [vec![met()], attempt].concat();
        assert_eq!(check_updates_whole(&history, &[web]).len(), expected);
    }
}
