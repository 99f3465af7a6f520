//! Lifecycle order, poststop, a leader's exit, and the task dirs.

use super::*;
use std::os::unix::process::CommandExt;

// ---------------------------------------------------------------------------
// 2. Lifecycle order

/// A prestart (non-sidecar) task runs to a successful exit before the main
/// task's start condition opens: the main task fails unless the prestart
/// task's file is already in /alloc.
#[test]
#[serial]
fn prestart_task_completes_before_the_main_task_starts() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let init = lifecycle(
        as_root(script_task("init", "echo ready > /alloc/ready")),
        LifecycleHook::Prestart,
        false,
    );
    let web = script_task("web", "test \"$(cat /alloc/ready)\" = ready");
    // Hold the main task right at its start condition to look at the world then.
    park(Some("web"), points::TR_START_CONDITION_MET);
    let alloc = bench.submit(&job("prestart", vec![init, web]));
    let alloc_id = alloc.alloc_id.clone();
    wait_parked(Some("web"), points::TR_START_CONDITION_MET);
    let at_start = faults().history();
    assert!(
        passed_at(&at_start, "init:tr.main_exited").is_some(),
        "web's start opened before init finished: {:#?}",
        names(&at_start)
    );
    let ready = bench.alloc_dir(&alloc_id).join("alloc/ready");
    assert_eq!(
        std::fs::read_to_string(&ready).expect("init's file").trim(),
        "ready"
    );
    faults().release(Some("web"), points::TR_START_CONDITION_MET);
    let summary = bench.wait(alloc);
    let hits = faults().history();
    assert_all_fired();

    assert_before(&hits, "init:tr.main_exited", "web:tr.start_condition_met");
    let (init, web) = (task(&summary.tasks, "init"), task(&summary.tasks, "web"));
    assert_exited_ok(init);
    assert_exited_ok(web);
    let terminated = init
        .events
        .iter()
        .find(|e| e.kind == EventKind::Terminated)
        .expect("init terminated");
    let started = web
        .events
        .iter()
        .find(|e| e.kind == EventKind::Started)
        .expect("web started");
    assert!(terminated.time_ms <= started.time_ms, "{init:#?}\n{web:#?}");
    assert_eq!(summary.status.client, ClientStatus::Complete);
    bench.finish(&[alloc_id]);
}

/// A prestart task that fails for good keeps the main task from ever
/// starting: the main task is killed before its start condition, never
/// exec'd, and the alloc fails.
#[test]
#[serial]
fn failed_prestart_task_keeps_the_main_task_from_starting() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let init = lifecycle(
        script_task("init", "exit 3"),
        LifecycleHook::Prestart,
        false,
    );
    let alloc = bench.submit(&job("prestart-fails", vec![init, service("web")]));
    let alloc_id = alloc.alloc_id.clone();
    let summary = bench.wait(alloc);
    let hits = faults().history();

    let (init, web) = (task(&summary.tasks, "init"), task(&summary.tasks, "web"));
    assert!(
        matches!(outcome(init), Outcome::Exited { failed: true, .. }),
        "{init:#?}"
    );
    assert!(
        matches!(outcome(web), Outcome::NeverStarted { .. }),
        "{web:#?}"
    );
    assert_eq!(count(web, EventKind::Started), 0, "{web:#?}");
    assert_eq!(
        passes(&hits, "web:tr.start_condition_met"),
        0,
        "{:#?}",
        names(&hits)
    );
    assert!(
        !bench.alloc_dir(&alloc_id).join("web").exists(),
        "web's prestart ran"
    );
    assert_eq!(summary.status.client, ClientStatus::Failed);
    bench.finish(&[alloc_id]);
}

/// A prestart sidecar must be running (exec'd) before the main task starts,
/// and it is killed once the main task is done.
#[test]
#[serial]
fn prestart_sidecar_runs_before_the_main_task_starts() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let side = lifecycle(service("side"), LifecycleHook::Prestart, true);
    let web = script_task("web", "echo web done");
    park(Some("web"), points::TR_START_CONDITION_MET);
    let alloc = bench.submit(&job("prestart-sidecar", vec![side, web]));
    let alloc_id = alloc.alloc_id.clone();
    wait_parked(Some("web"), points::TR_START_CONDITION_MET);
    let at_start = faults().history();
    assert!(
        passed_at(&at_start, "side:tr.after_driver_start").is_some(),
        "web's start opened before the prestart sidecar was started: {:#?}",
        names(&at_start)
    );
    assert_eq!(
        passes(&at_start, "side:tr.main_exited"),
        0,
        "the prestart sidecar is already gone: {:#?}",
        names(&at_start)
    );
    faults().release(Some("web"), points::TR_START_CONDITION_MET);
    let summary = bench.wait(alloc);
    let hits = faults().history();
    assert_all_fired();

    assert_before(
        &hits,
        "side:tr.after_driver_start",
        "web:tr.start_condition_met",
    );
    // Killed only after the main task was done (MainTasksDone).
    assert_before(&hits, "web:tr.main_exited", "side:tr.main_exited");
    let (side, web) = (task(&summary.tasks, "side"), task(&summary.tasks, "web"));
    assert_exited_ok(web);
    assert_killed(side);
    assert_eq!(count(side, EventKind::Started), 1);
    assert_eq!(summary.status.client, ClientStatus::Complete);
    bench.finish(&[alloc_id]);
}

// ---------------------------------------------------------------------------
// 5, 6. Poststop, leader exit

/// A poststop task still runs after the alloc was stopped, once the other
/// tasks are dead.
#[test]
#[serial]
fn poststop_task_runs_after_a_stop() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let cleanup = lifecycle(
        as_root(script_task("cleanup", "echo cleaned > /alloc/poststop-ran")),
        LifecycleHook::Poststop,
        false,
    );
    let alloc = bench.submit(&job("poststop", vec![leader(service("leader")), cleanup]));
    let alloc_id = alloc.alloc_id.clone();
    wait_passed(Some("leader"), points::TR_AFTER_DRIVER_START);
    alloc.stop();
    let summary = bench.wait(alloc);
    let hits = faults().history();

    assert_before(
        &hits,
        points::AR_ALLOC_STATE_SET,
        "cleanup:tr.start_condition_met",
    );
    assert_before(
        &hits,
        "leader:tr.main_exited",
        "cleanup:tr.start_condition_met",
    );
    let cleanup = task(&summary.tasks, "cleanup");
    assert_eq!(count(cleanup, EventKind::Started), 1, "{cleanup:#?}");
    assert_eq!(count(cleanup, EventKind::Terminated), 1, "{cleanup:#?}");
    assert_exited_ok(cleanup);
    let file = bench.alloc_dir(&alloc_id).join("alloc/poststop-ran");
    assert_eq!(
        std::fs::read_to_string(&file)
            .expect("poststop's file")
            .trim(),
        "cleaned"
    );
    assert_killed(task(&summary.tasks, "leader"));
    assert_eq!(summary.status.client, ClientStatus::Complete);
    bench.finish(&[alloc_id]);
}

/// When the leader exits on its own, the alloc runner kills the (running)
/// poststart sidecar, and the alloc completes without any stop.
#[test]
#[serial]
fn leader_exit_kills_the_sidecar() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let lead = leader(script_task("leader", "echo leader done"));
    let sidecar = lifecycle(service("sidecar"), LifecycleHook::Poststart, true);
    // Hold the leader right after its process exited (before it is dead)
    // until the sidecar has been started, so the sidecar really is killed
    // rather than never started.
    let held = hook_point("exited", Edge::Before, "executor_shutdown");
    park(Some("leader"), &held);
    let alloc = bench.submit(&job("leader-exit", vec![lead, sidecar]));
    let alloc_id = alloc.alloc_id.clone();
    wait_parked(Some("leader"), &held);
    wait_passed(Some("sidecar"), points::TR_AFTER_DRIVER_START);
    faults().release(Some("leader"), &held);
    let summary = bench.wait(alloc);
    let hits = faults().history();
    assert_all_fired();

    assert!(
        arrived_at(&hits, points::AR_UPDATE_RECEIVED).is_none(),
        "nobody sent an update"
    );
    assert_before(
        &hits,
        "leader:tr.main_exited",
        "sidecar:hook.exited.before.executor_shutdown",
    );
    let leader = task(&summary.tasks, "leader");
    assert_exited_ok(leader);
    assert_eq!(count(leader, EventKind::Killing), 0);
    let sidecar = task(&summary.tasks, "sidecar");
    assert_eq!(count(sidecar, EventKind::Started), 1);
    assert_killed(sidecar);
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert_eq!(summary.status.desired, DesiredStatus::Run);
    bench.finish(&[alloc_id]);
}

/// The task's own dirs belong to the user it runs as (here the default,
/// nobody), as in Nomad: an unprivileged task can write all three.
#[test]
#[serial]
fn an_unprivileged_task_writes_its_own_dirs() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let writer = script_task(
        "writer",
        "for d in /local /tmp /secrets; do echo hi > $d/f || exit 1; done; id -u",
    );
    assert_eq!(writer.user, None, "runs as the engine's default user");
    let alloc = bench.submit(&job("dirs", vec![writer]));
    let alloc_id = alloc.alloc_id.clone();
    let summary = bench.wait(alloc);
    let rec = task(&summary.tasks, "writer");
    assert_exited_ok(rec);
    let out = std::fs::read_to_string(
        bench
            .alloc_dir(&alloc_id)
            .join("alloc/logs/writer.stdout.0"),
    )
    .unwrap();
    assert_eq!(out.trim(), "65534", "ran as nobody");
    bench.finish(&[alloc_id]);
}

/// A root task can make device nodes and set-uid files in its `/alloc`,
/// which is a directory of the host's disk: no other host user reaches
/// them there. Proved with a node of the null device, opened for writing
/// (never written) as nobody from the host.
#[test]
#[serial]
fn a_node_a_root_task_made_is_out_of_other_users_reach() {
    require_root();
    let _faults = Faults::reset();
    let bench = Bench::new();
    let planter = as_root(script_task(
        "planter",
        "mknod /alloc/planted c 1 3 && chmod 666 /alloc/planted",
    ));
    let alloc = bench.submit(&job("planted", vec![planter]));
    let alloc_id = alloc.alloc_id.clone();
    let summary = bench.wait(alloc);
    assert_exited_ok(task(&summary.tasks, "planter"));
    let planted = bench.alloc_dir(&alloc_id).join("alloc/planted");
    assert!(planted.symlink_metadata().is_ok(), "the task made no node");
    let opened = Command::new("/bin/sh")
        .args(["-c", "exec 3>>\"$1\"", "sh"])
        .arg(&planted)
        .uid(65534)
        .gid(65534)
        .stderr(Stdio::null())
        .status()
        .expect("sh as nobody");
    let reached = opened.success();
    bench.finish(&[alloc_id]);
    assert!(!reached, "nobody opened {} for writing", planted.display());
}
