//! The report's seed scenario, forced through fault points.

use super::*;

// ---------------------------------------------------------------------------
// 1. The report

/// The report's interleaving, forced: the sidecar's runner is between its
/// start condition and prestart when the stop lands; the update has told the
/// task runners but not killed anything yet when the sidecar runs prestart.
/// The sidecar must never be exec'd, and its prestart (which would build its
/// task dir) must not have run either.
#[test]
#[serial]
fn report_stop_before_sidecar_prestart_never_execs_the_sidecar() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    park(Some("sidecar"), points::TR_BEFORE_PRESTART);
    park(None, points::AR_TASK_RUNNERS_UPDATED);
    let alloc = bench.submit(&report_alloc());
    let alloc_id = alloc.alloc_id.clone();

    wait_parked(Some("sidecar"), points::TR_BEFORE_PRESTART);
    // The sidecar's start condition opened only because the leader runs.
    assert!(passed_at(&faults().history(), "leader:tr.after_driver_start").is_some());
    alloc.stop();
    wait_parked(None, points::AR_TASK_RUNNERS_UPDATED);
    faults().release(Some("sidecar"), points::TR_BEFORE_PRESTART);
    wait_passed(Some("sidecar"), points::TR_MAIN_EXITED);
    faults().release(None, points::AR_TASK_RUNNERS_UPDATED);
    let summary = bench.wait(alloc);
    let hits = faults().history();
    assert_all_fired();

    // The forced order really happened: the sidecar decided while the update
    // was held between "task runners updated" and the kill.
    let held = arrived_at(&hits, points::AR_TASK_RUNNERS_UPDATED).expect("update parked");
    let sidecar_done = passed_at(&hits, "sidecar:tr.main_exited").expect("sidecar runner exited");
    let update_on = passed_at(&hits, points::AR_TASK_RUNNERS_UPDATED).expect("update released");
    assert!(
        held < sidecar_done && sidecar_done < update_on,
        "{:#?}",
        names(&hits)
    );
    assert_before(
        &hits,
        points::AR_TASK_RUNNERS_UPDATED,
        points::AR_KILL_STARTED,
    );
    assert!(
        passed_at(&hits, "sidecar:tr.observed_terminal").is_some(),
        "{:#?}",
        names(&hits)
    );

    // Never exec'd, never even prepared.
    let sidecar = task(&summary.tasks, "sidecar");
    assert!(
        matches!(outcome(sidecar), Outcome::NeverStarted { .. }),
        "{sidecar:#?}"
    );
    assert_eq!(
        count(sidecar, EventKind::Started),
        0,
        "{:?}",
        kinds(sidecar)
    );
    assert_eq!(
        count(sidecar, EventKind::NotStarted),
        1,
        "{:?}",
        kinds(sidecar)
    );
    assert_eq!(
        (sidecar.prestart_done, sidecar.committed, sidecar.launched),
        (None, None, None),
        "{sidecar:#?}"
    );
    assert!(sidecar.handle.is_none());
    for point in [
        "tr.after_prestart",
        "tr.before_driver_start",
        "tr.after_driver_start",
    ] {
        assert_eq!(
            passes(&hits, &format!("sidecar:{point}")),
            0,
            "sidecar reached {point}: {:#?}",
            names(&hits)
        );
    }
    assert!(
        !hits
            .iter()
            .any(|h| h.point.scope() == Some("sidecar")
                && h.point.point.starts_with("hook.prestart.")),
        "a sidecar prestart hook ran: {:#?}",
        names(&hits)
    );
    let alloc_dir = bench.alloc_dir(&alloc_id);
    assert!(!alloc_dir.join("sidecar/executor.out").exists());
    assert!(
        !alloc_dir.join("sidecar").exists(),
        "the sidecar's task dir exists although its prestart never ran"
    );
    assert!(!alloc_dir.join("alloc/logs/sidecar.stdout.0").exists());

    let leader = task(&summary.tasks, "leader");
    assert_killed(leader);
    assert_eq!(count(leader, EventKind::Started), 1);
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert_eq!(summary.status.desired, DesiredStatus::Stop);
    // What the engine persisted agrees with what it returned.
    assert_eq!(
        bench
            .tasks_in_db(&alloc_id)
            .iter()
            .map(|t| (&t.task, &t.state))
            .collect::<Vec<_>>(),
        summary
            .tasks
            .iter()
            .map(|t| (&t.task, &t.state))
            .collect::<Vec<_>>()
    );
    bench.finish(&[alloc_id]);
}
