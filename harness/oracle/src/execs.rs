//! The execs of a run against its start decisions: every exec finds its
//! layout, none follows the alloc becoming terminal, one per start attempt,
//! and every started task ends. Judged over the merged history in causal
//! order: fault points reached, execs answered by the gate, stop updates
//! delivered and task events.

use crate::history::{Answer, Event, ExecRecord, TaskEventKind};
use crate::identity::ExecIdentity;
use crate::invariant::{Invariant, Violation};
use crate::judge::DENY_TERMINAL;
use std::collections::BTreeMap;
use taskgate_faults::{points, scoped};

/// The fault points the exec checks anchor on, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvariantConfig {
    /// Per-task point (reached as `<task>:<point>`) passed once per start
    /// attempt, after the last "should I shut down?" check and before the driver starts the task.
    pub start_decision: String,
    /// Alloc-runner point where the alloc became terminal (a stop applied,
    /// or a runner restored terminal): its first hit is when.
    pub alloc_terminal: String,
    /// Per-task point where the task runner has seen the alloc terminal and
    /// will not start the task again; `None` skips that half of
    /// [`Invariant::NoExecAfterTerminal`].
    pub observed_terminal: Option<String>,
}

impl Default for InvariantConfig {
    fn default() -> Self {
        InvariantConfig {
            start_decision: points::TR_BEFORE_DRIVER_START.to_string(),
            alloc_terminal: points::AR_ALLOC_TERMINAL.to_string(),
            observed_terminal: Some(points::TR_OBSERVED_TERMINAL.to_string()),
        }
    }
}

fn describe(r: &ExecRecord) -> String {
    format!(
        "exec #{} of {} by pid {} ({:?})",
        r.seq,
        r.exe.display(),
        r.pid,
        r.identity
    )
}

/// [`Invariant::LayoutBeforeExec`]: the judge checked the layout at every exec of a task's process: a
/// denial (other than for a start after terminal, which
/// [`Invariant::NoExecAfterTerminal`] reports) means
/// the layout was missing or the judge itself failed.
pub fn check_layout_before_exec(history: &[Event]) -> Vec<Violation> {
    history
        .iter()
        .filter_map(|e| match e {
            Event::Exec(r) if r.verdict == Answer::Deny && !r.reason.starts_with(DENY_TERMINAL) => {
                let task = r.identity.task()?;
                Some(
                    Invariant::LayoutBeforeExec
                        .violation(Some(task), format!("{} denied: {}", describe(r), r.reason)),
                )
            }
            _ => None,
        })
        .collect()
}

/// [`Invariant::NoExecAfterTerminal`]: no task is started once its runner has seen the alloc terminal: an
/// executor exec must not follow the task's observed-terminal point, nor
/// follow a start decision taken after the alloc became terminal (the Nomad
/// bug: the stop landed between the check and the start). A process of an
/// already running task may still exec while being killed; a task-identity
/// exec is flagged only if no executor exec of the task preceded the observation.
pub fn check_no_exec_after_terminal(
    history: &[Event],
    tasks: &[String],
    config: &InvariantConfig,
) -> Vec<Violation> {
    // Recorded only when the start gate shuts: by a stop applied, or as a
    // runner restored terminal starts, before any stop to its agent.
    let terminal = history
        .iter()
        .position(|e| e.is_hit(&config.alloc_terminal));
    let mut out = Vec::new();
    for task in tasks {
        let decision = scoped(Some(task), &config.start_decision);
        let observed = config
            .observed_terminal
            .as_deref()
            .map(|p| scoped(Some(task), p));
        let (mut last_decision, mut observed_at, mut started) = (None, None, false);
        for (i, e) in history.iter().enumerate() {
            if e.is_hit(&decision) {
                last_decision = Some(i);
            } else if observed_at.is_none() && observed.as_deref().is_some_and(|o| e.is_hit(o)) {
                observed_at = Some(i);
            } else if let Some(r) = e.executor_exec_of(task) {
                if let Some(o) = observed_at {
                    out.push(Invariant::NoExecAfterTerminal.violation(
                        Some(task),
                        format!(
                            "{} at #{i} after the runner observed the alloc terminal at #{o}",
                            describe(r)
                        ),
                    ));
                } else if let (Some(d), Some(t)) = (last_decision, terminal) {
                    if d > t {
                        out.push(Invariant::NoExecAfterTerminal.violation(
                            Some(task),
                            format!("{} at #{i}: its start decision at #{d} came after the alloc became terminal at #{t}", describe(r)),
                        ));
                    }
                }
                started = true;
            } else if let (Event::Exec(r), Some(o), false) = (e, observed_at, started) {
                if matches!(&r.identity, ExecIdentity::Task { task: t, .. } if t == task) {
                    out.push(Invariant::NoExecAfterTerminal.violation(
                        Some(task),
                        format!("{} at #{i}, never started by an executor, after the runner observed the alloc terminal at #{o}", describe(r)),
                    ));
                }
            }
        }
    }
    out
}

/// [`Invariant::OneExecPerAttempt`]: each start attempt (one start-decision hit) execs the task at most
/// once, and never without a start decision.
pub fn check_one_exec_per_attempt(
    history: &[Event],
    tasks: &[String],
    config: &InvariantConfig,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for task in tasks {
        let decision = scoped(Some(task), &config.start_decision);
        let (mut attempt, mut execs_this_attempt) = (0u32, 0u32);
        for (i, e) in history.iter().enumerate() {
            if e.is_hit(&decision) {
                attempt += 1;
                execs_this_attempt = 0;
            } else if let Some(r) = e.executor_exec_of(task) {
                execs_this_attempt += 1;
                if attempt == 0 {
                    out.push(Invariant::OneExecPerAttempt.violation(
                        Some(task),
                        format!(
                            "{} at #{i} without any start decision ({decision})",
                            describe(r)
                        ),
                    ));
                } else if execs_this_attempt > 1 {
                    out.push(Invariant::OneExecPerAttempt.violation(
                        Some(task),
                        format!(
                            "{} at #{i} is exec number {execs_this_attempt} of attempt {attempt}",
                            describe(r)
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// [`Invariant::StartedTasksEnd`]: every "Started" task event is followed by a "Terminated" or "Killed"
/// event of the same task and attempt, and no attempt ends twice.
pub fn check_started_tasks_end(history: &[Event]) -> Vec<Violation> {
    let mut out = check_started_tasks_eventually_end(history);
    out.extend(check_attempts_end_once(history));
    out
}

fn check_started_tasks_eventually_end(history: &[Event]) -> Vec<Violation> {
    // The attempt's own end: a later attempt's does not end this one.
    let ends = |task: &str, started: u32, from: usize| {
        history[from..].iter().any(|e| {
            matches!(e, Event::TaskEvent { task: t, kind, attempt, .. }
                if t == task && *attempt == started
                    && matches!(kind, TaskEventKind::Terminated | TaskEventKind::Killed))
        })
    };
    history
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::TaskEvent {
                task,
                kind,
                attempt,
                ..
            } if *kind == TaskEventKind::Started && !ends(task, *attempt, i + 1) => {
                Some(Invariant::StartedTasksEnd.violation(
                    Some(task),
                    format!("started at #{i} (attempt {attempt}) but never terminated or killed"),
                ))
            }
            _ => None,
        })
        .collect()
}

/// An attempt's life in the task's events runs from its start ("Started",
/// or "Restored" by a restored agent) to the restart decision
/// ("Restarting", "NotRestarting") or the next start; at most one
/// "Terminated" or "Killed" ends it. (A "Killed" after the decision is the
/// task's, killed while it waited to restart.)
fn check_attempts_end_once(history: &[Event]) -> Vec<Violation> {
    use TaskEventKind::*;
    // Per task: where its open attempt's life began, and its first end.
    let mut open: BTreeMap<&str, (usize, Option<usize>)> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, e) in history.iter().enumerate() {
        let Event::TaskEvent {
            task,
            kind,
            attempt,
            ..
        } = e
        else {
            continue;
        };
        match kind {
            Started | Restored => {
                open.insert(task, (i, None));
            }
            Restarting | NotRestarting => {
                open.remove(task.as_str());
            }
            Terminated | Killed => match open.get_mut(task.as_str()) {
                Some((_, first @ None)) => *first = Some(i),
                Some((began, Some(first))) => out.push(Invariant::StartedTasksEnd.violation(
                    Some(task),
                    format!(
                        "attempt {attempt}, started at #{began}, ended twice: at #{first} and #{i}"
                    ),
                )),
                None => {}
            },
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! The exec and terminal invariants over recorded histories, holding and broken.

    use super::*;
    use taskgate_faults::Hit;

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
                verdict,
                reason,
                ..ExecRecord::allowed(seq, identity)
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
                message: String::new(),
            });
            self
        }
    }

    fn tasks(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn observed_cfg() -> InvariantConfig {
        InvariantConfig {
            observed_terminal: Some("tr.observed_terminal".into()),
            ..Default::default()
        }
    }

    fn invariants(v: &[Violation]) -> Vec<(Invariant, Option<&str>)> {
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
        assert_eq!(invariants(&v), [(Invariant::LayoutBeforeExec, Some("web"))]);
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
            [(Invariant::LayoutBeforeExec, Some("db"))]
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
        assert_eq!(
            invariants(&v),
            [(Invariant::NoExecAfterTerminal, Some("web"))]
        );
        // The whole judgement finds this one only: `check`'s tests.
    }

    /// An alloc restored terminal (its record stopping, or finished) has
    /// its start gate shut as the restored runner starts, before the
    /// harness delivers any stop to the new agent: a start decided after
    /// that is the same bug.
    #[test]
    fn a_start_decided_after_a_restored_terminal_is_a_violation() {
        let mut h = H::default()
            .hit("ar.alloc_terminal")
            .hit("web:tr.before_driver_start")
            .executor("web")
            .stop();
        h.0.insert(0, Event::AgentRestarted { stop: true });
        let v = check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &InvariantConfig::default());
        assert_eq!(
            invariants(&v),
            [(Invariant::NoExecAfterTerminal, Some("web"))]
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
        assert_eq!(
            invariants(&v),
            [(Invariant::NoExecAfterTerminal, Some("db"))]
        );
    }

    #[test]
    fn exec_after_observed_terminal_is_a_violation() {
        let h = H::default()
            .hit("web:tr.before_driver_start")
            .hit("web:tr.observed_terminal")
            .executor("web");
        let v = check_no_exec_after_terminal(&h.0, &tasks(&["web"]), &observed_cfg());
        assert_eq!(
            invariants(&v),
            [(Invariant::NoExecAfterTerminal, Some("web"))]
        );
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
        assert_eq!(
            invariants(&v),
            [(Invariant::NoExecAfterTerminal, Some("web"))]
        );
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
        assert_eq!(
            invariants(&v),
            [(Invariant::OneExecPerAttempt, Some("web"))]
        );
        assert!(v[0].detail.contains("attempt 1"), "{}", v[0].detail);
    }

    #[test]
    fn exec_without_start_decision_is_a_violation() {
        let h = H::default()
            .executor("web")
            .hit("web:tr.before_driver_start");
        let v = check_one_exec_per_attempt(&h.0, &tasks(&["web"]), &InvariantConfig::default());
        assert_eq!(
            invariants(&v),
            [(Invariant::OneExecPerAttempt, Some("web"))]
        );
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
            [(Invariant::StartedTasksEnd, Some("web"))]
        );
        // The restart's Started needs its own end.
        let h = H::default()
            .task_event("web", TaskEventKind::Started, 1)
            .task_event("web", TaskEventKind::Terminated, 1)
            .task_event("web", TaskEventKind::Started, 2);
        let v = check_started_tasks_end(&h.0);
        assert_eq!(invariants(&v), [(Invariant::StartedTasksEnd, Some("web"))]);
        assert!(v[0].detail.contains("attempt 2"), "{}", v[0].detail);
    }

    /// An attempt ends with its own end: a later attempt's "Killed" does
    /// not end an earlier one that never ended.
    #[test]
    fn an_attempt_is_ended_only_by_its_own_end() {
        let h = H::default()
            .task_event("web", TaskEventKind::Started, 1)
            .task_event("web", TaskEventKind::Started, 2)
            .task_event("web", TaskEventKind::Killed, 2);
        let v = check_started_tasks_end(&h.0);
        assert_eq!(invariants(&v), [(Invariant::StartedTasksEnd, Some("web"))]);
        assert!(v[0].detail.contains("attempt 1"), "{}", v[0].detail);
    }

    /// A runner's panic cleanup added a second Killed to an attempt its
    /// kill path had recorded killed.
    #[test]
    fn an_attempt_that_ends_twice_is_a_violation() {
        let h = H::default()
            .task_event("web", TaskEventKind::Started, 1)
            .task_event("web", TaskEventKind::Killing, 1)
            .task_event("web", TaskEventKind::Killed, 1)
            .task_event("web", TaskEventKind::Killed, 1)
            .task_event("web", TaskEventKind::NotRestarting, 1);
        let v = check_started_tasks_end(&h.0);
        assert_eq!(invariants(&v), [(Invariant::StartedTasksEnd, Some("web"))]);
        assert!(
            v[0].detail.contains("ended twice: at #2 and #3"),
            "{}",
            v[0].detail
        );
        // A restored agent's attempt too.
        let h = H::default()
            .task_event("web", TaskEventKind::Restored, 2)
            .task_event("web", TaskEventKind::Terminated, 2)
            .task_event("web", TaskEventKind::Killed, 2);
        assert_eq!(
            invariants(&check_started_tasks_end(&h.0)),
            [(Invariant::StartedTasksEnd, Some("web"))]
        );
    }

    /// A task killed while it waits to restart ends after its attempt did;
    /// a lost attempt's kill is its one end; each task's attempts are its own.
    #[test]
    fn an_attempt_and_then_its_task_may_end() {
        let h = H::default()
            .task_event("web", TaskEventKind::Started, 1)
            .task_event("db", TaskEventKind::Started, 1)
            .task_event("web", TaskEventKind::Terminated, 1)
            .task_event("web", TaskEventKind::Restarting, 1)
            .task_event("web", TaskEventKind::Killed, 1)
            .task_event("db", TaskEventKind::Lost, 1)
            .task_event("db", TaskEventKind::Killed, 1)
            .task_event("db", TaskEventKind::Restarting, 1)
            .task_event("db", TaskEventKind::Started, 2)
            .task_event("db", TaskEventKind::Killed, 2);
        assert_eq!(check_started_tasks_end(&h.0), []);
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
}
