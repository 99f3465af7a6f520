//! The registry: parks, nth hits, interventions, awaits, the shared log.

use super::*;
use crate::PointName;
use std::sync::{Mutex as StdMutex, MutexGuard as StdGuard};

/// The registry is process-wide: these tests take turns.
fn serial() -> StdGuard<'static, ()> {
    static TURN: StdMutex<()> = StdMutex::new(());
    let guard = TURN.lock().unwrap_or_else(|p| p.into_inner());
    reset();
    guard
}

const T: Duration = Duration::from_secs(10);

#[test]
fn a_park_holds_until_released_and_records_arrival_and_pass() {
    let _turn = serial();
    configure(Some("web"), "p", Action::Park);
    let worker = std::thread::spawn(|| reach(Some("web"), "p"));
    wait_any(&[Await::Parked("web:p".into())], T).unwrap();
    assert_eq!(history().len(), 1, "only the arrival so far");
    reach(None, "meanwhile");
    release(Some("web"), "p");
    assert_eq!(worker.join().unwrap(), None);
    let names: Vec<_> = history()
        .into_iter()
        .map(|h| (h.name(), h.action))
        .collect();
    assert_eq!(
        names,
        [
            ("web:p".to_string(), Some(Action::Park)),
            ("meanwhile".to_string(), None),
            ("web:p".to_string(), None)
        ]
    );
    assert!(unfired().is_empty());
}

#[test]
fn error_returns_the_injected_message_and_unconfigured_points_pass() {
    let _turn = serial();
    configure(None, "e", Action::Error);
    assert!(reach(None, "e").unwrap().contains("fault injected at e"));
    assert_eq!(reach(None, "other"), None);
}

#[test]
fn a_configured_point_never_reached_is_reported_unfired() {
    let _turn = serial();
    configure(Some("db"), "never", Action::Delay(1));
    assert_eq!(unfired(), ["db:never".to_string()]);
}

#[test]
fn reset_wakes_a_parked_thread() {
    let _turn = serial();
    configure(None, "stuck", Action::Park);
    let worker = std::thread::spawn(|| reach(None, "stuck"));
    wait_any(&[Await::Parked("stuck".into())], T).unwrap();
    reset();
    worker.join().unwrap();
}

#[test]
fn wait_any_times_out_instead_of_hanging() {
    let _turn = serial();
    let err = wait_any(
        &[Await::Passed("nothing".into())],
        Duration::from_millis(20),
    )
    .unwrap_err();
    assert!(err.to_string().contains("nothing"));
}

#[test]
fn progress_restarts_the_idle_window() {
    let _turn = serial();
    let idle = Duration::from_secs(2);
    let worker = std::thread::spawn(|| {
        // A slow worker: hits far inside the idle window, spanning more
        // than the window in all, then the awaited one. (The sleep is
        // the simulated slowness, not synchronisation.)
        for i in 0..12 {
            std::thread::sleep(Duration::from_millis(250));
            reach(None, &format!("step{i}"));
        }
        reach(None, "done");
    });
    wait_any(&[Await::Passed("done".into())], idle).unwrap();
    worker.join().unwrap();
}

#[test]
fn release_all_lets_parks_go_and_keeps_the_history() {
    let _turn = serial();
    configure(None, "held", Action::Park);
    reach(None, "before");
    let worker = std::thread::spawn(|| reach(None, "held"));
    wait_any(&[Await::Parked("held".into())], T).unwrap();
    release_all();
    worker.join().unwrap();
    let names: Vec<_> = history().into_iter().map(|h| h.name()).collect();
    assert_eq!(names, ["before", "held", "held"]);
}

#[test]
fn a_fault_applies_on_its_nth_hit_only() {
    let _turn = serial();
    configure_fault(&"web:p@3=error".parse().unwrap());
    assert_eq!(reach(Some("web"), "p"), None);
    assert_eq!(
        unfired(),
        ["web:p".to_string()],
        "not yet fired: 1 of 3 hits"
    );
    assert_eq!(reach(Some("web"), "p"), None);
    assert!(reach(Some("web"), "p").is_some(), "the third hit fails");
    assert_eq!(reach(Some("web"), "p"), None, "and only the third");
    assert!(unfired().is_empty());
    let actions: Vec<_> = history().into_iter().map(|h| h.action).collect();
    assert_eq!(actions, [None, None, Some(Action::Error), None]);
}

#[test]
fn an_intervention_runs_the_installed_handler_before_the_pass() {
    let _turn = serial();
    let seen = std::sync::Arc::new(StdMutex::new(Vec::new()));
    let log = seen.clone();
    set_intervention_handler(move |scope, what| {
        log.lock()
            .unwrap()
            .push((scope.map(str::to_string), what, history().len()));
    });
    configure(
        Some("web"),
        "p",
        Action::Intervene(Intervention::KillExecutor),
    );
    assert_eq!(reach(Some("web"), "p"), None);
    assert_eq!(
        *seen.lock().unwrap(),
        [(Some("web".to_string()), Intervention::KillExecutor, 0)],
        "acted on before the hit was recorded"
    );
    assert_eq!(
        history()[0].action,
        Some(Action::Intervene(Intervention::KillExecutor))
    );
}

#[test]
fn several_faults_on_one_point_apply_in_order_on_their_hits() {
    let _turn = serial();
    set_intervention_handler(|_, _| {});
    for fault in ["web:p=sigstop-executor", "web:p=error", "web:p@2=delay(1)"] {
        configure_fault(&fault.parse().unwrap());
    }
    assert!(reach(Some("web"), "p").is_some(), "the first hit fails");
    assert_eq!(reach(Some("web"), "p"), None, "the second only sleeps");
    let actions: Vec<_> = history().into_iter().filter_map(|h| h.action).collect();
    assert_eq!(
        actions,
        [
            Action::Intervene(Intervention::StopExecutor),
            Action::Error,
            Action::Delay(1)
        ]
    );
    assert!(unfired().is_empty());
}

#[test]
fn an_await_holds_until_the_shared_log_shows_the_hit() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    log_to(Some(&dir.path().join("faults.jsonl"))).unwrap();
    configure_fault(&"a:held=await(b:go@2)".parse().unwrap());
    let worker = std::thread::spawn(|| reach(Some("a"), "held"));
    wait_any(&[Await::Passed("a:held".into())], T).unwrap();
    reach(Some("b"), "go");
    assert!(!worker.is_finished(), "one hit of b:go is not two");
    reach(Some("b"), "go");
    assert_eq!(worker.join().unwrap(), None);
    log_to(None).unwrap();
    let names: Vec<_> = history().into_iter().map(|h| h.name()).collect();
    assert_eq!(
        names,
        ["a:held", "b:go", "b:go", "a:held"],
        "arrival, then the pass after b's second hit"
    );
}

#[test]
fn env_spec_round_trips_and_the_log_survives_a_torn_line() {
    let _turn = serial();
    let faults = [
        "web:tr.before_prestart@2=kill".parse::<Fault>().unwrap(),
        "ar.kill_started=delay(5)".parse().unwrap(),
    ];
    assert_eq!(faults[0].nth, 2);
    assert_eq!(faults[1].point, PointName::new(None, "ar.kill_started"));
    let spec = env_spec(&faults);
    assert_eq!(
        spec,
        "web:tr.before_prestart@2=kill;ar.kill_started=delay(5)"
    );
    for action in [
        Action::Park,
        Action::Delay(7),
        Action::Error,
        Action::Panic,
        Action::KillAgent,
    ]
    .into_iter()
    .chain(Intervention::ALL.map(Action::Intervene))
    {
        assert_eq!(action.to_string().parse::<Action>(), Ok(action));
    }
    assert!("explode".parse::<Action>().is_err());
    for bad in [
        "p@0=kill",
        "p@x=kill",
        "p",
        ":p=kill",
        "a:b:c=kill",
        "p=explode",
    ] {
        assert!(bad.parse::<Fault>().is_err(), "{bad}");
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("faults.jsonl");
    let hit = Hit {
        seq: 1,
        point: PointName::new(Some("web"), "a"),
        action: None,
        detail: Some(Detail::Exit {
            code: Some(1),
            signal: None,
        }),
        at_us: 7,
    };
    std::fs::write(
        &log,
        format!("{}\n{{\"seq\":2,\"na", serde_json::to_string(&hit).unwrap()),
    )
    .unwrap();
    assert_eq!(read_log(&log).unwrap(), [hit]);
    assert!(read_log(&dir.path().join("absent")).unwrap().is_empty());
}

#[test]
fn a_garbled_line_is_an_error_not_a_lost_hit() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("faults.jsonl");
    std::fs::write(&log, "{\"seq\":1,\"na\n{\"seq\":2}\n").unwrap();
    let err = read_log(&log).unwrap_err();
    assert!(err.to_string().contains("fault log line 1"), "{err}");
}

/// Processes append to one log through their own open files: every line
/// must come out whole, whatever the interleaving.
#[test]
fn writers_appending_at_once_lose_no_hit() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("faults.jsonl");
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap();
                for seq in 0..2000 {
                    let hit = Hit {
                        seq,
                        point: PointName::new(Some(&format!("w{w}")), "ex.task_exited"),
                        action: None,
                        detail: None,
                        at_us: 0,
                    };
                    append_line(&mut file, &hit).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(read_log(&log).unwrap().len(), 8000);
}
