//! Restart policies, on the engine's virtual clock.

use super::*;

// ---------------------------------------------------------------------------
// 4. Restart policies

fn failing(attempts: u32, mode: RestartMode, interval: Duration, script: &str) -> Task {
    let mut task = as_root(script_task("web", script));
    task.restart = RestartPolicy {
        attempts,
        interval,
        delay: Duration::from_millis(10),
        mode,
    };
    task
}

/// The lifecycle events that matter for restarts, in order.
fn restart_story(events: &[TaskEvent]) -> Vec<EventKind> {
    use EventKind::*;
    events
        .iter()
        .map(|e| e.kind)
        .filter(|k| matches!(k, Started | Terminated | Restarting | NotRestarting))
        .collect()
}

/// Fail mode: `attempts` restarts, then Not Restarting and a failed alloc.
#[rstest]
#[case::no_restarts(0)]
#[case::two_restarts(2)]
#[serial]
fn fail_mode_restarts_exactly_attempts_times_then_fails(#[case] attempts: u32) {
    use EventKind::*;
    require_root();
    let _faults = Faults::reset();
    // On virtual time the 60s window cannot run out between two failures,
    // however slow the machine: exactly `attempts` restarts fit in it.
    let bench = Bench::with_clock(Arc::new(VirtualClock::default()));
    let alloc = bench.submit(&job(
        "restarts",
        vec![failing(
            attempts,
            RestartMode::Fail,
            Duration::from_secs(60),
            "exit 1",
        )],
    ));
    let alloc_id = alloc.alloc_id.clone();
    let (summary, events) = bench.wait_streamed(alloc);
    let hits = faults().history();

    let web = task(&summary.tasks, "web");
    let mut expected = Vec::new();
    for i in 0..=attempts {
        expected.extend([Started, Terminated]);
        expected.push(if i < attempts {
            Restarting
        } else {
            NotRestarting
        });
    }
    assert_eq!(restart_story(&events), expected, "{events:#?}");
    assert_eq!(web.restarts, attempts);
    assert_eq!(
        passes(&hits, "web:tr.before_driver_start") as u32,
        attempts + 1,
        "one launch per attempt"
    );
    // Every attempt ran its own prestart.
    assert_eq!(
        passes(&hits, "web:hook.prestart.before.task_dir") as u32,
        attempts + 1
    );
    let last = web.events.last().unwrap();
    assert_eq!(last.kind, NotRestarting);
    assert!(
        last.message.contains("Exceeded allowed attempts"),
        "{last:?}"
    );
    let attempt_numbers: Vec<u32> = events
        .iter()
        .filter(|e| e.kind == Started)
        .map(|e| e.attempt)
        .collect();
    assert_eq!(attempt_numbers, (1..=attempts + 1).collect::<Vec<_>>());
    match outcome(web) {
        Outcome::Exited {
            result,
            failed: true,
        } => assert_eq!(result.exit_code, Some(1)),
        other => panic!("expected a failed exit, got {other:?}"),
    }
    assert_eq!(summary.status.client, ClientStatus::Failed);
    bench.finish(&[alloc_id]);
}

/// Delay mode: once the attempts of the interval are used up, the next
/// restart waits out the rest of the interval instead of failing. The task
/// fails twice and then succeeds (a counter in /alloc), so the alloc ends on
/// its own. Restart windows run on the engine's virtual clock, which moves
/// only by the engine's own restart delays: the verdict cannot depend on how
/// long the real task took, so the waits are exact.
#[test]
#[serial]
fn delay_mode_waits_out_the_interval_instead_of_failing() {
    use EventKind::*;
    require_root();
    let _faults = Faults::reset();
    let clock = Arc::new(VirtualClock::default());
    let bench = Bench::with_clock(clock.clone());
    let interval = Duration::from_secs(2);
    let script =
        "n=$(cat /alloc/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /alloc/n; [ $n -ge 3 ]";
    let alloc = bench.submit(&job(
        "delay",
        vec![failing(1, RestartMode::Delay, interval, script)],
    ));
    let alloc_id = alloc.alloc_id.clone();
    let (summary, events) = bench.wait_streamed(alloc);

    let web = task(&summary.tasks, "web");
    assert_eq!(
        restart_story(&events),
        vec![
            Started,
            Terminated,
            Restarting,
            Started,
            Terminated,
            Restarting,
            Started,
            Terminated,
            NotRestarting
        ],
        "{web:#?}"
    );
    let restarting: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == Restarting)
        .map(|e| e.message.as_str())
        .collect();
    // The first failure uses the interval's one attempt after the 10ms
    // delay and the jitter the engine's seed draws for this task (up to a
    // quarter more); the second, that far into the window, waits out
    // exactly the rest of it, with no jitter.
    let first = Jitter::new(bench.home.config().restart_seed, &alloc_id, "web")
        .delay(Duration::from_millis(10), 0);
    assert!(first >= Duration::from_millis(10) && first < Duration::from_micros(12_500));
    assert_eq!(
        restarting,
        [
            format!("task exited unsuccessfully; restart 1 of 1; restarting in {first:?}"),
            format!(
                "task exited unsuccessfully; attempts exhausted, waiting out the interval; \
                 restarting in {:?}",
                interval - first
            ),
        ],
        "{web:#?}"
    );
    assert_eq!(
        clock.now(),
        interval,
        "the restarts slept exactly the interval"
    );
    assert!(web
        .events
        .last()
        .unwrap()
        .message
        .contains("completed successfully"));
    assert_eq!(web.restarts, 2);
    assert_exited_ok(web);
    assert_eq!(
        std::fs::read_to_string(bench.alloc_dir(&alloc_id).join("alloc/n"))
            .unwrap()
            .trim(),
        "3"
    );
    assert_eq!(summary.status.client, ClientStatus::Complete);
    bench.finish(&[alloc_id]);
}

/// A stop that lands while a failed task waits out its restart delay ends
/// the task through the kill path, not as a failure: as in Nomad ("task
/// killed between restarts": the task is dead but not failed), the stopped
/// alloc is complete. The long delay is the engine behaviour under test (the
/// stop must cut it short), not synchronisation: the test moves on from the
/// Restarting event.
#[test]
#[serial]
fn stop_during_a_restart_delay_does_not_fail_the_alloc() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let mut web = failing(2, RestartMode::Fail, Duration::from_secs(600), "exit 1");
    web.restart.delay = Duration::from_secs(30);
    let alloc = bench.submit(&job("stop-in-delay", vec![web]));
    let alloc_id = alloc.alloc_id.clone();
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    bench.wait_events(&mut events, &[("web", EventKind::Restarting)]);
    control.stop();
    let summary = bench.wait_for(waiter);

    let web = task(&summary.tasks, "web");
    assert_eq!(
        count(web, EventKind::Started),
        1,
        "restarted despite the stop: {web:#?}"
    );
    assert_eq!(count(web, EventKind::Restarting), 1, "{web:#?}");
    assert!(web.state.is_dead());
    assert!(
        !outcome(web).failed(),
        "a task stopped during its restart delay is recorded as failed: {:?}",
        outcome(web)
    );
    assert_eq!(
        summary.status.client,
        ClientStatus::Complete,
        "a stopped alloc ends failed because its task was waiting to restart"
    );
    bench.finish(&[alloc_id]);
}
