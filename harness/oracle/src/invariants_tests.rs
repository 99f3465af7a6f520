//! The exec and terminal invariants over recorded histories, holding and broken.

use super::*;
use std::path::PathBuf;

/// Builds histories; sequence numbers are only labels here.
#[derive(Default)]
struct H(Vec<Event>);

impl H {
    fn hit(mut self, name: &str) -> Self {
        let seq = self.0.len() as u64;
        self.0.push(Event::FaultHit(Hit {
            detail: None,
            seq,
            point: name.parse().unwrap(),
            action: None,
            at_us: 0,
        }));
        self
    }
    fn exec(mut self, identity: ExecIdentity, verdict: Answer) -> Self {
        let seq = self.0.len() as u64;
        let reason = if verdict == Answer::Deny {
            "missing alloc/logs".into()
        } else {
            String::new()
        };
        self.0.push(Event::Exec(ExecRecord {
            seq,
            pid: 100 + seq as i32,
            exe: PathBuf::from("/marked/bin/busybox"),
            identity,
            verdict,
            reason,
            judged: true,
            cgroup_peers: Vec::new(),
            started_version: None,
            executor_peers: Vec::new(),
        }));
        self
    }
    fn executor(self, task: &str) -> Self {
        self.exec(
            ExecIdentity::Executor {
                alloc_id: "a1".into(),
                task: task.into(),
            },
            Answer::Allow,
        )
    }
    fn task_exec(self, task: &str) -> Self {
        self.exec(
            ExecIdentity::Task {
                alloc_id: "a1".into(),
                task: task.into(),
            },
            Answer::Allow,
        )
    }
    fn stop(mut self) -> Self {
        self.0.push(Event::StopDelivered { seq: 1 });
        self
    }
    fn task_event(mut self, task: &str, kind: TaskEventKind, attempt: u32) -> Self {
        self.0.push(Event::TaskEvent {
            task: task.into(),
            kind,
            attempt,
            failed: false,
        });
        self
    }
}

fn tasks(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn shapes(names: &[&str]) -> Vec<TaskShape> {
    names
        .iter()
        .map(|name| TaskShape::new(name, TaskRole::Main { leader: false }, 0))
        .collect()
}

fn observed_cfg() -> InvariantConfig {
    InvariantConfig {
        observed_terminal: Some("tr.observed_terminal".into()),
        ..Default::default()
    }
}

fn invariants(v: &[Violation]) -> Vec<(&'static str, Option<&str>)> {
    v.iter().map(|v| (v.invariant, v.task.as_deref())).collect()
}

#[test]
fn layout_denial_of_a_task_exec_is_a_violation() {
    let web = ExecIdentity::Executor {
        alloc_id: "a1".into(),
        task: "web".into(),
    };
    let h = H::default()
        .exec(web.clone(), Answer::Deny)
        .exec(ExecIdentity::Unknown, Answer::Deny);
    let v = check_layout_before_exec(&h.0);
    assert_eq!(invariants(&v), [(LAYOUT_BEFORE_EXEC, Some("web"))]);
    assert!(
        v[0].detail.contains("missing alloc/logs"),
        "{}",
        v[0].detail
    );

    let db = ExecIdentity::Task {
        alloc_id: "a1".into(),
        task: "db".into(),
    };
    let h = H::default().exec(db, Answer::Deny);
    assert_eq!(
        invariants(&check_layout_before_exec(&h.0)),
        [(LAYOUT_BEFORE_EXEC, Some("db"))]
    );

    let h = H::default().exec(web, Answer::Allow);
    assert_eq!(check_layout_before_exec(&h.0), []);
}

#[test]
fn start_decided_after_alloc_terminal_is_a_violation() {
    // The Nomad bug: the stop lands between the check and the driver start.
    let h = H::default()
        .hit("web:tr.start_condition_met")
        .stop()
        .hit("ar.update_received")
        .hit("ar.alloc_terminal")
        .hit("ar.alloc_state_set")
        .hit("web:tr.before_driver_start")
        .executor("web")
        .hit("ar.update_applied");
    let v = check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &InvariantConfig::default());
    assert_eq!(invariants(&v), [(NO_EXEC_AFTER_TERMINAL, Some("web"))]);
    assert_eq!(
        invariants(&check(&h.0, &shapes(&["web"]))),
        [(NO_EXEC_AFTER_TERMINAL, Some("web"))]
    );
}

/// An in-place update delivered before the stop is handled first: its
/// state change is not the stop's.
#[test]
fn an_updates_state_change_before_the_stops_is_not_terminal() {
    let h = H::default()
        .stop()
        .hit("ar.alloc_state_set")
        .hit("web:tr.before_driver_start")
        .executor("web")
        .hit("ar.alloc_terminal")
        .hit("ar.alloc_state_set");
    let cfg = InvariantConfig::default();
    assert_eq!(
        check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &cfg),
        []
    );
}

#[test]
fn start_decided_before_alloc_terminal_is_fine() {
    let h = H::default()
        .hit("ar.alloc_state_set") // an earlier, non-stop update: not terminal
        .hit("web:tr.before_driver_start")
        .stop()
        .hit("ar.alloc_terminal")
        .hit("ar.alloc_state_set")
        .hit("db:tr.before_driver_start") // another task's decision
        .executor("web");
    let cfg = InvariantConfig::default();
    assert_eq!(
        check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &cfg),
        []
    );
    // The other task did decide after terminal, and its exec is flagged.
    let h = h.executor("db");
    let v = check_no_exec_after_terminal(&h.0, &tasks(&["web", "db"]), &cfg);
    assert_eq!(invariants(&v), [(NO_EXEC_AFTER_TERMINAL, Some("db"))]);
}

#[test]
fn exec_after_observed_terminal_is_a_violation() {
    let h = H::default()
        .hit("web:tr.before_driver_start")
        .hit("web:tr.observed_terminal")
        .executor("web");
    let v = check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &observed_cfg());
    assert_eq!(invariants(&v), [(NO_EXEC_AFTER_TERMINAL, Some("web"))]);
    // Without the point configured the same history passes this check.
    let without = InvariantConfig {
        observed_terminal: None,
        ..Default::default()
    };
    assert_eq!(
        check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &without),
        []
    );
    // A task process that no executor ever started, exec'ing after the observation.
    let h = H::default()
        .hit("web:tr.observed_terminal")
        .task_exec("web");
    let v = check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &observed_cfg());
    assert_eq!(invariants(&v), [(NO_EXEC_AFTER_TERMINAL, Some("web"))]);
}

#[test]
fn running_task_exec_while_being_killed_is_fine() {
    let h = H::default()
        .hit("web:tr.before_driver_start")
        .executor("web")
        .task_exec("web")
        .hit("web:tr.observed_terminal")
        .task_exec("web")
        .hit("db:tr.observed_terminal")
        .task_exec("db2");
    assert_eq!(
        check_no_exec_after_terminal(&h.0, &tasks(&["web", "db"]), &observed_cfg()),
        []
    );
}

#[test]
fn second_exec_in_one_attempt_is_a_violation() {
    let h = H::default()
        .hit("web:tr.before_driver_start")
        .executor("web")
        .executor("web");
    let v = check_one_exec_per_attempt(&h.0, &tasks(&["web"]), &InvariantConfig::default());
    assert_eq!(invariants(&v), [(ONE_EXEC_PER_ATTEMPT, Some("web"))]);
    assert!(v[0].detail.contains("attempt 1"), "{}", v[0].detail);
}

#[test]
fn exec_without_start_decision_is_a_violation() {
    let h = H::default()
        .executor("web")
        .hit("web:tr.before_driver_start");
    let v = check_one_exec_per_attempt(&h.0, &tasks(&["web"]), &InvariantConfig::default());
    assert_eq!(invariants(&v), [(ONE_EXEC_PER_ATTEMPT, Some("web"))]);
}

#[test]
fn one_exec_per_attempt_is_fine() {
    let h = H::default()
        .hit("web:tr.before_driver_start")
        .executor("web")
        .task_exec("web")
        .task_exec("web")
        .hit("web:tr.before_driver_start")
        .executor("web")
        .hit("db:tr.before_driver_start")
        .executor("db");
    let cfg = InvariantConfig::default();
    assert_eq!(
        check_one_exec_per_attempt(&h.0, &tasks(&["web", "db"]), &cfg),
        []
    );
    // A decision of another task does not open an attempt for this one.
    let h = H::default()
        .hit("db:tr.before_driver_start")
        .executor("web");
    assert_eq!(
        check_one_exec_per_attempt(&h.0, &tasks(&["web", "db"]), &cfg).len(),
        1
    );
}

#[test]
fn started_task_that_never_ends_is_a_violation() {
    let h = H::default()
        .task_event("web", TaskEventKind::Started, 1)
        .task_event("db", TaskEventKind::Killed, 1);
    assert_eq!(
        invariants(&check_started_tasks_end(&h.0)),
        [(STARTED_TASKS_END, Some("web"))]
    );
    // The restart's Started needs its own end.
    let h = H::default()
        .task_event("web", TaskEventKind::Started, 1)
        .task_event("web", TaskEventKind::Terminated, 1)
        .task_event("web", TaskEventKind::Started, 2);
    let v = check_started_tasks_end(&h.0);
    assert_eq!(invariants(&v), [(STARTED_TASKS_END, Some("web"))]);
    assert!(v[0].detail.contains("attempt 2"), "{}", v[0].detail);
}

#[test]
fn started_tasks_that_end_are_fine() {
    let h = H::default()
        .task_event("web", TaskEventKind::Started, 1)
        .task_event("db", TaskEventKind::Started, 1)
        .task_event("web", TaskEventKind::Terminated, 1)
        .task_event("web", TaskEventKind::Started, 2)
        .task_event("web", TaskEventKind::Killing, 2)
        .task_event("web", TaskEventKind::Killed, 2)
        .task_event("db", TaskEventKind::Terminated, 1);
    assert_eq!(check_started_tasks_end(&h.0), []);
}

#[test]
fn clean_history_passes_everything() {
    let h = H::default()
        .hit("web:tr.before_driver_start")
        .executor("web")
        .task_event("web", TaskEventKind::Started, 1)
        .stop()
        .hit("ar.alloc_terminal")
        .hit("ar.alloc_state_set")
        .hit("web:tr.observed_terminal")
        .task_exec("web")
        .hit("ar.update_applied")
        .task_event("web", TaskEventKind::Killed, 1);
    let mut h = h.0;
    h.push(Event::TaskExited {
        task: "web".into(),
        exit: TaskExit::Signal(15),
    });
    assert_eq!(check_with(&h, &shapes(&["web"]), &observed_cfg()), []);
}

#[test]
fn history_round_trips_through_json() {
    let mut h = H::default()
        .hit("web:tr.before_driver_start")
        .executor("web")
        .stop()
        .task_event("web", TaskEventKind::Started, 1);
    h.0.push(Event::AgentRestarted { stop: true });
    let json = serde_json::to_string(&h.0).unwrap();
    assert_eq!(serde_json::from_str::<Vec<Event>>(&json).unwrap(), h.0);
}
