//! User restarts (Nomad's `alloc restart`) against the fake driver: the
//! kill order, the lifecycle order back, and what is refused.

mod support;

use support::*;
use taskgate_engine::alloc::DesiredStatus;
use taskgate_engine::fake_driver::Exit;
use taskgate_engine::jobspec::{Job, LifecycleHook};
use taskgate_engine::task_state::EventKind;
use taskgate_engine::{AllocControl, ClientStatus, Engine, RestartRefused, RestartScope};
use taskgate_faults::{points, Await};

/// Every lifecycle at once: a prestart task that completes, a prestart
/// sidecar, a leader and a second main task, a poststart sidecar, and a
/// poststop task; each (but `init`) runs until stopped.
fn lifecycle_job() -> Job {
    let mut leader = task("leader", None, false);
    leader.leader = true;
    job(vec![
        task("init", Some(LifecycleHook::Prestart), false),
        task("proxy", Some(LifecycleHook::Prestart), true),
        leader,
        task("worker", None, false),
        task("logship", Some(LifecycleHook::Poststart), true),
        task("cleanup", Some(LifecycleHook::Poststop), false),
    ])
}

/// Runs [`lifecycle_job`] until its five first starts, then restarts
/// `scope` and reads the events until `restarted` more tasks started.
/// Returns the alloc's control, its waiter, and the tasks started after
/// the restart, in the order the driver started them.
fn restart_lifecycle_job(
    rt: &tokio::runtime::Runtime,
    home: &Home,
    engine: &Engine,
    scope: RestartScope,
    restarted: usize,
) -> (AllocControl, taskgate_engine::AllocWaiter, Vec<String>) {
    home.driver.script("init", [Exit::Code(0), Exit::Code(0)]);
    home.driver.script("cleanup", [Exit::Code(0)]);
    let alloc = submit(rt, engine, &lifecycle_job());
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    started_events(rt, &mut events, 5);
    let before = starts_in_order(&home.driver).len();
    rt.block_on(control.restart(scope))
        .expect("restart refused");
    started_events(rt, &mut events, restarted);
    // The driver's order, not the events': a task's Started event streams
    // once its poststart hooks ran, and by then the coordinator may have
    // seen it running and started the next stage, whose event can come
    // first (a test running beside others on a busy machine saw it).
    let again = starts_in_order(&home.driver).split_off(before);
    (control, waiter, again)
}

/// Where `task` is in `order` (panics if it is not there).
fn index_of(order: &[String], task: &str) -> usize {
    (order.iter().position(|t| t == task)).unwrap_or_else(|| panic!("{task} not in {order:?}"))
}

/// Nomad's `alloc restart` (#19403): the running tasks go down in the kill
/// order (leader, other main tasks, sidecars), each wave dead before the
/// next is told; they come back in lifecycle order; the completed prestart
/// task is not run again, and nothing counts against the restart policy
/// (every task here allows no restart at all).
#[test]
fn restarting_the_running_tasks_follows_the_lifecycle_and_keeps_the_completed_prestart() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let (control, waiter, again) =
        restart_lifecycle_job(&rt, &home, &engine, RestartScope::Running, 4);
    let stops = stopped(&home.driver);
    assert_eq!(stops[..2], ["leader", "worker"], "{stops:?}");
    let mut sidecars = stops[2..].to_vec();
    sidecars.sort();
    assert_eq!(sidecars, ["logship", "proxy"]);
    let history = home.faults.history();
    let at = |task: &str, point: &str| {
        (history.iter().position(|h| h.is(Some(task), point)))
            .unwrap_or_else(|| panic!("{task}:{point} never reached"))
    };
    assert!(at("leader", points::EX_TASK_EXITED) < at("worker", points::TR_RESTART_SIGNALED));
    assert!(at("worker", points::EX_TASK_EXITED) < at("proxy", points::TR_RESTART_SIGNALED));
    assert_eq!(again[0], "proxy", "{again:?}");
    assert_eq!(again[3], "logship", "{again:?}");
    assert_eq!(home.driver.starts("init"), 1);
    control.stop();
    let summary = rt.block_on(async { tokio::time::timeout(idle(), waiter.wait()).await });
    let summary = summary.expect("alloc hung");
    assert_eq!(summary.status.client, ClientStatus::Complete);
    for task in &summary.tasks {
        assert_eq!(
            task.restarts, 0,
            "{}: a user restart was counted",
            task.task
        );
    }
    assert_eq!(home.driver.starts("cleanup"), 1);
}

/// Restarting all tasks runs the completed prestart task again, and the
/// main tasks wait for it as on the first start.
#[test]
fn restarting_all_tasks_runs_the_prestart_task_again_before_the_main_tasks() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let (control, waiter, again) = restart_lifecycle_job(&rt, &home, &engine, RestartScope::All, 5);
    assert_eq!(home.driver.starts("init"), 2);
    for main in ["leader", "worker"] {
        assert!(
            index_of(&again, "init") < index_of(&again, main),
            "{again:?}"
        );
        assert!(
            index_of(&again, "proxy") < index_of(&again, main),
            "{again:?}"
        );
        assert!(
            index_of(&again, main) < index_of(&again, "logship"),
            "{again:?}"
        );
    }
    control.stop();
    let summary = rt.block_on(async { tokio::time::timeout(idle(), waiter.wait()).await });
    assert_eq!(
        summary.expect("alloc hung").status.client,
        ClientStatus::Complete
    );
}

/// Restarting all tasks lets the completed prestart task run again only
/// once every running task is down: its revive is written then, so an agent
/// killed mid-restart leaves either no revived task or every running one
/// down. (Revived in the main tasks' wave, it was written while `worker`
/// still ran: the next agent ran `init` again beside `worker`'s old
/// attempt, which the restart never took down.)
#[test]
fn restarting_all_tasks_revives_a_completed_task_once_the_running_ones_are_down() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let (control, waiter, _) = restart_lifecycle_job(&rt, &home, &engine, RestartScope::All, 5);
    let history = home.faults.history();
    let revived = (history.iter())
        .position(|h| h.is(Some("init"), points::TR_RESTART_SIGNALED))
        .expect("init was revived");
    let running = ["leader", "worker", "proxy", "logship"];
    let downs: Vec<usize> = (history.iter().enumerate())
        .filter(|(_, h)| {
            running
                .iter()
                .any(|t| h.is(Some(t), points::EX_TASK_EXITED))
        })
        .map(|(at, _)| at)
        .collect();
    assert_eq!(downs.len(), running.len(), "each went down once");
    let last_down = downs.iter().max().copied().unwrap_or_default();
    assert!(
        revived > last_down,
        "init revived at #{revived}, before the last running task was down (#{last_down})"
    );
    control.stop();
    rt.block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
}

/// One task restarts alone; the others run on untouched.
#[test]
fn restarting_one_task_leaves_the_others_running() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let (control, waiter, again) =
        restart_lifecycle_job(&rt, &home, &engine, RestartScope::Task("worker".into()), 1);
    assert_eq!(again, ["worker"]);
    assert_eq!(stopped(&home.driver), ["worker"]);
    control.stop();
    rt.block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
}

/// What cannot be restarted is refused, with why, and changes nothing.
/// The poststop task runs until the test ends it, so the restart asked
/// after the stop finds the alloc stopping, never already finished.
#[test]
fn a_restart_that_cannot_apply_is_refused() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("init", [Exit::Code(0)]);
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &lifecycle_job());
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    started_events(&rt, &mut events, 5);
    let restart = |scope| rt.block_on(control.restart(scope));
    let task = |name: &str| RestartScope::Task(name.into());
    assert_eq!(
        restart(task("nope")),
        Err(RestartRefused::NoSuchTask("nope".into()))
    );
    assert_eq!(
        restart(task("cleanup")),
        Err(RestartRefused::PoststopTask("cleanup".into()))
    );
    assert_eq!(
        restart(task("init")),
        Err(RestartRefused::TaskNotRunning("init".into()))
    );
    assert!(home.driver.stops().is_empty());
    control.stop();
    assert_eq!(
        restart(RestartScope::Running),
        Err(RestartRefused::AllocTerminal)
    );
    let cleanup = started_events(&rt, &mut events, 1);
    assert_eq!(cleanup[0].task, "cleanup");
    home.driver.exit("cleanup", 0);
    rt.block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(
        restart(RestartScope::All),
        Err(RestartRefused::AllocFinished)
    );
    assert_eq!(home.driver.starts("leader"), 1);
}

/// With every task between attempts (here in an hour-long restart delay),
/// a restart of the running tasks has nothing to restart: refused, and
/// the delay goes on; a restart of all tasks cuts it short.
#[test]
fn a_restart_with_nothing_running_is_refused() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1)]);
    let mut web = task("web", None, false);
    web.restart.attempts = 1;
    web.restart.delay = std::time::Duration::from_secs(3600);
    let engine = home.engine();
    let alloc = submit(&rt, &engine, &job(vec![web]));
    home.wait_for(Await::Passed(taskgate_faults::scoped(
        Some("web"),
        points::TR_RESTART_DELAY,
    )));
    let control = alloc.control();
    assert_eq!(
        rt.block_on(control.restart(RestartScope::Running)),
        Err(RestartRefused::NothingRunning)
    );
    assert_eq!(home.driver.starts("web"), 1);
    assert_eq!(rt.block_on(control.restart(RestartScope::All)), Ok(()));
    let (mut events, waiter) = alloc.into_parts();
    while started_events(&rt, &mut events, 1)[0].attempt < 2 {}
    control.stop();
    let summary = rt
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// Runs [`lifecycle_job`] to its five first starts, then restarts all its
/// tasks and holds the restart once its targets are down. Returns the
/// alloc's control, its waiter, and the restart's answer to come.
fn restart_held_with_targets_down(
    rt: &tokio::runtime::Runtime,
    home: &Home,
    engine: &Engine,
) -> (
    AllocControl,
    taskgate_engine::AllocWaiter,
    tokio::task::JoinHandle<Result<(), RestartRefused>>,
) {
    home.driver.script("init", [Exit::Code(0), Exit::Code(0)]);
    home.driver.script("cleanup", [Exit::Code(0)]);
    home.faults
        .configure_fault(&"ar.restart_targets_down=park".parse().unwrap());
    let alloc = submit(rt, engine, &lifecycle_job());
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    started_events(rt, &mut events, 5);
    let restarted = rt.spawn(control.restart(RestartScope::All));
    home.wait_for(Await::Parked(points::AR_RESTART_TARGETS_DOWN.into()));
    (control, waiter, restarted)
}

/// Waits for an alloc a stop sent during its restart ended: the restart is
/// answered that the stop came meanwhile, and the alloc ends stopped.
fn ended_by_the_stop(
    rt: &tokio::runtime::Runtime,
    waiter: taskgate_engine::AllocWaiter,
    restarted: tokio::task::JoinHandle<Result<(), RestartRefused>>,
) -> taskgate_engine::AllocSummary {
    let summary = rt.block_on(async { tokio::time::timeout(idle(), waiter.wait()).await });
    let summary = summary.expect("alloc hung");
    assert_eq!(
        rt.block_on(restarted).unwrap(),
        Err(RestartRefused::StoppedMeanwhile)
    );
    assert_eq!(summary.status.desired, DesiredStatus::Stop);
    summary
}

/// A stop sent while a restart takes its targets down lets nothing start
/// again: once the user was told "stop sent", no task is launched, though
/// the stop's own command waits behind the restart's in the queue.
#[test]
fn a_stop_sent_during_a_restart_lets_nothing_start_again() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let (control, waiter, restarted) = restart_held_with_targets_down(&rt, &home, &engine);
    let starts_before = starts_in_order(&home.driver).len();
    control.stop();
    // The stop's command is held where it is taken from the queue: the
    // restart must not have let starts through by then.
    home.faults.configure(
        None,
        points::AR_UPDATE_RECEIVED,
        taskgate_faults::Action::Park,
    );
    home.faults.release(None, points::AR_RESTART_TARGETS_DOWN);
    home.wait_for(Await::Parked(points::AR_UPDATE_RECEIVED.into()));
    let released_first = (home.faults.history())
        .iter()
        .any(|h| h.is(None, points::AR_RESTART_RELEASED));
    home.faults.release(None, points::AR_UPDATE_RECEIVED);
    ended_by_the_stop(&rt, waiter, restarted);
    let again = starts_in_order(&home.driver).split_off(starts_before);
    assert!(
        !released_first && again.iter().all(|t| t == "cleanup"),
        "started after the stop was sent: {again:?} (starts let through before the stop: \
         {released_first})"
    );
}

/// A stop sent while a restart takes its targets down outlives its agent:
/// an agent that exits with the stop's command still queued behind the
/// restart's (acknowledged, not yet applied) leaves a record the next
/// agent stops, starting nothing but the poststop task.
#[test]
fn a_stop_sent_during_a_restart_outlives_its_agent() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let (control, waiter, restarted) = restart_held_with_targets_down(&rt, &home, &engine);
    control.stop();
    // What the agent leaves on disk if it dies now: its state database
    // (restored in a home of its own, whose driver has none of the first
    // one's tasks: each is found lost, and a running alloc would start it).
    let next = Home::new();
    next.driver.script("cleanup", [Exit::Code(0)]);
    std::fs::create_dir_all(next.data_dir().path()).unwrap();
    std::fs::copy(home.data_dir().state_db(), next.data_dir().state_db()).unwrap();
    let second = runtime();
    let next_engine = next.engine();
    let (mut events, next_waiter) = restore_one(&next_engine, &second).into_parts();
    let first_start = async {
        while let Some(event) = events.recv().await {
            if event.kind == EventKind::Started && event.task != "cleanup" {
                return event.task;
            }
        }
        std::future::pending().await
    };
    let ended = second
        .block_on(async {
            tokio::time::timeout(idle(), async {
                tokio::select! {
                    summary = next_waiter.wait() => Ok(summary),
                    task = first_start => Err(task),
                }
            })
            .await
        })
        .expect("the restored alloc hung");
    // The first agent, let go, ends the same way.
    home.faults.release(None, points::AR_RESTART_TARGETS_DOWN);
    ended_by_the_stop(&rt, waiter, restarted);
    let summary = ended.unwrap_or_else(|task| panic!("{task} started after the stop"));
    assert_eq!(summary.status.desired, DesiredStatus::Stop);
    assert!(
        starts_in_order(&next.driver).iter().all(|t| t == "cleanup"),
        "{:?}",
        next.driver.calls()
    );
}

/// A stop sent while a restart is under way is applied once it is done,
/// and the alloc ends stopped: nothing is started after the stop made it
/// terminal, and nothing of it runs on.
#[test]
fn a_restart_racing_a_stop_ends_stopped() {
    let rt = runtime();
    let home = Home::new();
    let engine = home.engine();
    let (control, waiter, restarted) = restart_held_with_targets_down(&rt, &home, &engine);
    control.stop();
    home.faults.release(None, points::AR_RESTART_TARGETS_DOWN);
    let summary = ended_by_the_stop(&rt, waiter, restarted);
    assert!(summary.tasks.iter().all(|t| t.state.is_dead()));
    let history = home.faults.history();
    let terminal = (history
        .iter()
        .position(|h| h.is(None, points::AR_ALLOC_TERMINAL)))
    .expect("the stop made the alloc terminal");
    // A commit is late when its task's start decision came after the stop
    // shut the gate. The commit's own record may trail the gate's (it is
    // taken under the gate lock, recorded after), so it cannot be the judge.
    let late = (terminal..history.len())
        .filter(|&i| history[i].point.point == points::TR_START_COMMITTED)
        .filter(|&i| history[i].point.scope() != Some("cleanup"))
        .filter(|&i| {
            let task = history[i].point.scope();
            history[..i]
                .iter()
                .rposition(|h| {
                    h.point.point == points::TR_BEFORE_DRIVER_START && h.point.scope() == task
                })
                .is_some_and(|decision| decision > terminal)
        })
        .count();
    assert_eq!(late, 0, "started after the stop: {history:?}");
    assert_eq!(home.driver.starts("cleanup"), 1);
}
