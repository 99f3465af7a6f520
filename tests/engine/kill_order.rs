//! Leader-first kill.

use super::*;

// ---------------------------------------------------------------------------
// 3. Leader-first kill

/// On stop the leader is killed first, and only once it is dead do the
/// other tasks get their Killing event.
#[test]
#[serial]
fn stop_kills_the_leader_first_and_the_others_only_after_it_is_dead() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let job = job(
        "leader-first",
        vec![service("a"), leader(service("lead")), service("b")],
    );
    // Hold the leader's runner once its kill completed, before it is recorded dead.
    park(Some("lead"), points::TR_MAIN_EXITED);
    let alloc = bench.submit(&job);
    let alloc_id = alloc.alloc_id.clone();
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    // Events stream out after the record is persisted: once all three
    // Started events arrived, the state db shows all three running.
    bench.wait_events(
        &mut events,
        &[
            ("a", EventKind::Started),
            ("lead", EventKind::Started),
            ("b", EventKind::Started),
        ],
    );
    control.stop();
    wait_parked(Some("lead"), points::TR_MAIN_EXITED);
    // The leader's kill is done (its Killed event was emitted before this
    // point), but it is not dead yet: nobody else may have been told to die.
    let held = faults().history();
    assert!(
        passed_at(&held, "lead:hook.exited.before.executor_shutdown").is_some(),
        "{:#?}",
        names(&held)
    );
    for t in ["a", "b"] {
        assert!(
            !held
                .iter()
                .any(|h| h.point.scope() == Some(t) && h.point.point.starts_with("hook.exited.")),
            "{t} was stopped while the leader was still alive: {:#?}",
            names(&held)
        );
        let rec = task(&bench.tasks_in_db(&alloc_id), t).clone();
        assert_eq!(
            count(&rec, EventKind::Killing),
            0,
            "{t} got Killing while the leader was alive: {:?}",
            kinds(&rec)
        );
        assert_eq!(rec.state, TaskState::Running { attempt: 1 }, "{t}");
    }
    faults().release(Some("lead"), points::TR_MAIN_EXITED);
    let summary = bench.wait_for(waiter);
    let hits = faults().history();
    assert_all_fired();

    let lead = task(&summary.tasks, "lead");
    assert_killed(lead);
    let lead_killed = lead
        .events
        .iter()
        .find(|e| e.kind == EventKind::Killed)
        .unwrap();
    for t in ["a", "b"] {
        let rec = task(&summary.tasks, t);
        assert_killed(rec);
        assert_before(
            &hits,
            "lead:tr.main_exited",
            &format!("{t}:hook.exited.before.executor_shutdown"),
        );
        assert_before(&hits, "lead:tr.main_exited", &format!("{t}:tr.main_exited"));
        let killing = rec
            .events
            .iter()
            .find(|e| e.kind == EventKind::Killing)
            .unwrap();
        assert!(
            lead_killed.time_ms <= killing.time_ms,
            "{lead:#?}\n{rec:#?}"
        );
    }
    assert_eq!(summary.status.client, ClientStatus::Complete);
    bench.finish(&[alloc_id]);
}
