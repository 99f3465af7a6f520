//! What one run produced, before judging, and what every runner (in
//! process, agent processes, the fake driver) collects it with. It sits
//! below the runners: they share it, and none imports another.

use crate::history::Records;
use std::collections::BTreeMap;
use taskgate_engine::state::TaskRecord;
use taskgate_engine::task_state::TaskEvent;
use taskgate_engine::{AllocSummary, DesiredStatus};
use taskgate_faults::points;
use taskgate_faults::{Detail, Fault, Hit};
use taskgate_oracle::ExecRecord;

/// The restart jitter seed of every engine the harness runs, real or
/// fake, in process or as an agent: a replay waits exactly as its run did.
pub const RESTART_SEED: u64 = 0x7a5c_6a7e;

/// The harness's own files in a run's data dir, beside the engine's
/// layout (no task writes there): the run's fault log, which the engine
/// and every executor append to; a killed agent's job and its log; the
/// task events its agents followed, one JSON line each.
pub(crate) const FAULT_LOG: &str = "faults.jsonl";
pub(crate) const AGENT_JOB: &str = "job.json";
pub(crate) const AGENT_LOG: &str = "agent.log";
pub(crate) const AGENT_EVENTS: &str = "events.jsonl";

/// What one run produced, before judging.
pub(crate) struct Outcome {
    pub hits: Vec<Hit>,
    pub execs: Vec<(ExecRecord, u64)>,
    pub tasks: Vec<TaskRecord>,
    pub records: Records,
    pub problems: Vec<String>,
}

/// Gives each task record every event its task had, not only the last ten
/// a record keeps, which hid a long run's early attempts from the judge:
/// the events `seen` elsewhere (the alloc's stream; the records as an
/// agent killed mid-run left them) joined with the record's own, by their
/// numbers (`TaskEvent::seq`), the record's copy first. The records hold
/// what a panicked runner added without emitting, and what a killed agent
/// had persisted but not yet sent. Returns a problem for each task whose
/// events no source holds: its history has a hole the judge cannot see
/// into.
pub(crate) fn with_every_event(tasks: &mut [TaskRecord], seen: &[&TaskEvent]) -> Vec<String> {
    let mut problems = Vec::new();
    for task in tasks {
        let mut every: BTreeMap<u64, TaskEvent> =
            (task.events.drain(..)).map(|e| (e.seq, e)).collect();
        for event in seen.iter().filter(|e| e.task == task.task) {
            every.entry(event.seq).or_insert_with(|| (*event).clone());
        }
        let missing = (0..task.events_added).filter(|seq| !every.contains_key(seq));
        let missing: Vec<u64> = missing.collect();
        if !missing.is_empty() {
            problems.push(format!(
                "task {}: its events {missing:?} (of {}) reached neither the event stream nor a record",
                task.task, task.events_added
            ));
        }
        task.events = every.into_values().collect();
    }
    problems
}

/// A case's faults split by the process that reaches their points:
/// (the executors', the engine's).
pub(crate) fn by_process(faults: &[Fault]) -> (Vec<&Fault>, Vec<&Fault>) {
    faults
        .iter()
        .partition(|f| points::in_executor(&f.point.point))
}

/// A configured fault that never fired proved nothing: its hit (the one
/// that carries its action) must be in the log. Nor did an await that gave
/// up (it waits only while the run makes progress): its pass says so; nor
/// an intervention that found no process to act on.
pub(crate) fn unfired(faults: &[Fault], hits: &[Hit]) -> Vec<String> {
    let fired = |f: &Fault| {
        (hits.iter()).any(|h| h.point == f.point && h.action.as_ref() == Some(&f.action))
    };
    let fired_with = |f: &Fault, detail: Detail| {
        (hits.iter()).any(|h| {
            h.point == f.point && h.action.as_ref() == Some(&f.action) && h.detail == Some(detail)
        })
    };
    (faults.iter())
        .filter_map(|f| {
            if !fired(f) {
                Some(format!("configured fault {f} never fired"))
            } else if fired_with(f, Detail::NothingToActOn) {
                Some(format!("configured fault {f} found no process of its task to act on"))
            } else if fired_with(f, Detail::AwaitGaveUp) {
                Some(format!(
                    "configured fault {f} gave up: what it awaited had not come when the run stopped making progress"
                ))
            } else {
                None
            }
        })
        .collect()
}

/// What an in-process run's summary says, for the history.
pub(crate) fn summary_records(summary: Option<&AllocSummary>) -> Records {
    let tasks = summary.map(|s| s.tasks.as_slice()).unwrap_or_default();
    Records {
        restart_counts: restart_counts(tasks),
        status: summary.map(|s| s.status.client),
        desired_stop: summary.map(|s| s.status.desired == DesiredStatus::Stop),
        alloc_id: summary.map(|s| s.alloc_id.clone()),
        ..Records::default()
    }
}

/// Each task's restart count as its record holds it.
pub(crate) fn restart_counts(tasks: &[TaskRecord]) -> Vec<(String, u32)> {
    tasks.iter().map(|t| (t.task.clone(), t.restarts)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use taskgate_engine::task_state::EventKind;

    fn hit(point: &str, action: Option<&str>, detail: Option<Detail>) -> Hit {
        Hit {
            seq: 0,
            point: point.parse().unwrap(),
            action: action.map(|a| a.parse().unwrap()),
            detail,
            at_us: 0,
        }
    }

    /// Events of `task` numbered `seqs`, one kind and time for all: two
    /// of them are alike but for their numbers.
    fn events(task: &str, seqs: &[u64]) -> Vec<TaskEvent> {
        (seqs.iter())
            .map(|seq| TaskEvent {
                time_ms: 1,
                seq: *seq,
                ..TaskEvent::new(task, EventKind::Killed, 1, "")
            })
            .collect()
    }

    /// The stream holds what was emitted (less what a killed agent never
    /// sent), the record its last few, and the task's count of them all.
    #[rstest]
    #[case::the_record_is_the_streams_tail(events("web", &[0, 1, 2, 3]), events("web", &[2, 3]), 4, &[0, 1, 2, 3], &[])]
    #[case::the_record_adds_to_the_stream(events("web", &[0, 1, 2]), events("web", &[1, 2, 3, 4]), 5, &[0, 1, 2, 3, 4], &[])]
    #[case::a_gap_inside_the_record_is_filled(events("web", &[0, 1, 2, 4, 5]), events("web", &[2, 3, 4, 5]), 6, &[0, 1, 2, 3, 4, 5], &[])]
    #[case::a_gap_before_the_record_is_a_hole(events("web", &[0, 2, 3, 4]), events("web", &[3, 4, 5]), 6, &[0, 2, 3, 4, 5], &[1])]
    #[case::alike_events_are_two(events("web", &[0, 1, 2]), events("web", &[2]), 3, &[0, 1, 2], &[])]
    #[case::nothing_was_emitted(vec![], events("web", &[0, 1]), 2, &[0, 1], &[])]
    #[case::another_tasks_events(events("db", &[0, 1]), events("web", &[0]), 1, &[0], &[])]
    fn each_task_gets_every_event_by_number(
        #[case] emitted: Vec<TaskEvent>,
        #[case] recorded: Vec<TaskEvent>,
        #[case] added: u64,
        #[case] every: &[u64],
        #[case] missing: &[u64],
    ) {
        let mut tasks = vec![TaskRecord::new("web")];
        (tasks[0].events, tasks[0].events_added) = (recorded, added);
        let seen: Vec<&TaskEvent> = emitted.iter().collect();
        let problems = with_every_event(&mut tasks, &seen);
        assert_eq!(tasks[0].events, events("web", every));
        assert_eq!(
            problems.len(),
            usize::from(!missing.is_empty()),
            "{problems:?}"
        );
        if let Some(problem) = problems.first() {
            assert!(problem.contains(&format!("{missing:?}")), "{problem}");
        }
    }

    const AWAIT: &str = "await(ar.kill_started@1)";
    const GAVE_UP: Option<Detail> = Some(Detail::AwaitGaveUp);

    #[rstest]
    #[case::awaited(
        vec![hit("web:p", Some(AWAIT), None), hit("ar.kill_started", None, None), hit("web:p", None, None)],
        None
    )]
    #[case::gave_up(
        vec![hit("web:p", Some(AWAIT), None), hit("web:p", Some(AWAIT), GAVE_UP)],
        Some("configured fault web:p=await(ar.kill_started@1) gave up: what it awaited had not come when the run stopped making progress")
    )]
    #[case::killed_while_waiting(vec![hit("web:p", Some(AWAIT), None)], None)]
    #[case::never_reached(
        vec![hit("ar.kill_started", None, None)],
        Some("configured fault web:p=await(ar.kill_started@1) never fired")
    )]
    fn an_await_that_gave_up_never_fired(#[case] hits: Vec<Hit>, #[case] problem: Option<&str>) {
        let fault: Fault = format!("web:p={AWAIT}").parse().unwrap();
        let problems = unfired(&[fault], &hits);
        assert_eq!(problems, Vec::from_iter(problem.map(String::from)));
    }

    #[rstest]
    #[case::acted(None, None)]
    #[case::found_nothing(
        Some(Detail::NothingToActOn),
        Some("configured fault web:p=kill-executor found no process of its task to act on")
    )]
    fn an_intervention_that_found_nothing_to_act_on_proved_nothing(
        #[case] detail: Option<Detail>,
        #[case] problem: Option<&str>,
    ) {
        let fault: Fault = "web:p=kill-executor".parse().unwrap();
        let hits = [hit("web:p", Some("kill-executor"), detail)];
        let problems = unfired(&[fault], &hits);
        assert_eq!(problems, Vec::from_iter(problem.map(String::from)));
    }
}
