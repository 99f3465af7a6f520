//! The restart policy across restores, user restarts and intervals,
//! against the fake driver; restart windows on the engine's virtual clock,
//! where the host's would take minutes.

mod support;

use std::sync::Arc;
use std::time::Duration;
use support::*;
use taskgate_engine::clock::{Clock, SystemClock, VirtualClock};
use taskgate_engine::fake_driver::Exit;
use taskgate_engine::jobspec::{Job, JobType, RestartMode, RestartPolicy, Task};
use taskgate_engine::state::StateDb;
use taskgate_engine::task_state::{EventKind, TaskState};
use taskgate_engine::{ClientStatus, RestartScope};
use taskgate_faults::{points, scoped, Await};

const MINUTE: Duration = Duration::from_secs(60);

fn policy(attempts: u32, interval: Duration, delay: Duration) -> RestartPolicy {
    RestartPolicy {
        attempts,
        interval,
        delay,
        mode: RestartMode::Fail,
    }
}

fn web_with(restart: RestartPolicy) -> Task {
    let mut web = task("web", None, false);
    web.restart = restart;
    web
}

/// The last event of `task` in `summary`, kind and message.
fn last_event(summary: &taskgate_engine::AllocSummary, task: &str) -> (EventKind, String) {
    let record = (summary.tasks.iter().find(|t| t.task == task)).expect("task");
    let last = record.events.last().expect("an event");
    (last.kind, last.message.clone())
}

/// Bug 1 (fixed): the executor died with its task while the agent was
/// down and the policy allows no restart; the restored agent finds the
/// attempt lost, and the policy decides: the task fails. (It used to start
/// attempt 2 at once, uncounted.)
#[test]
fn a_lost_attempt_at_restore_is_decided_by_the_policy() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    web_lost_while_agent_down(&home, first, &second, 0);
    let engine = home.engine();
    let alloc = restore_one(&engine, &second);
    let summary = wait(&second, alloc);
    assert_eq!(home.driver.starts("web"), 1);
    assert_eq!(summary.status.client, ClientStatus::Failed);
    let (kind, message) = last_event(&summary, "web");
    assert_eq!(kind, EventKind::NotRestarting, "{message}");
    assert!(
        message.starts_with("Exceeded allowed attempts"),
        "{message}"
    );
}

/// With a restart left, the lost attempt is counted and restarted after
/// the policy's delay (on the virtual clock, exactly it and its jitter).
#[test]
fn a_lost_attempt_at_restore_is_counted() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    let alloc_id = web_lost_while_agent_down(&home, first, &second, 1);
    let state = StateDb::open(&home.data_dir().state_db()).unwrap();
    let mut record = state.alloc(&alloc_id).unwrap().unwrap();
    record.job.groups[0].tasks[0].restart.delay = Duration::from_secs(30);
    state.put_alloc(&record).unwrap();
    drop(state);
    let clock = Arc::new(VirtualClock::default());
    let engine = home.engine_on(clock.clone());
    let alloc = restore_one(&engine, &second);
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    assert_eq!(started_events(&second, &mut events, 1)[0].attempt, 2);
    assert!(clock.now() >= Duration::from_secs(30), "{:?}", clock.now());
    control.stop();
    let summary = second
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(summary.tasks[0].restarts, 1);
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// A service alloc: `other` runs until stopped; `web` exits 0 at once the
/// first time (then runs until stopped), restarted on success with
/// `attempts` left and a half-hour delay.
fn exit_0_job() -> Job {
    let mut web = web_with(policy(2, 60 * MINUTE, 30 * MINUTE));
    web.restart.mode = RestartMode::Fail;
    Job {
        job_type: JobType::Service,
        ..job(vec![task("other", None, false), web])
    }
}

/// Runs `job` (whose `other` runs until stopped), holds `web` right after
/// its driver start, before it sees its own exit, and restarts the
/// running tasks, releasing `web` once the restart asked it: its runner
/// sees the restart and the exit at once. Returns once the restart is done.
fn restart_as_web_exits(
    rt: &tokio::runtime::Runtime,
    home: &Home,
    engine: &taskgate_engine::Engine,
    job: &Job,
) -> (
    taskgate_engine::AllocControl,
    tokio::sync::mpsc::UnboundedReceiver<taskgate_engine::task_state::TaskEvent>,
    taskgate_engine::AllocWaiter,
) {
    let after_start = scoped(Some("web"), points::TR_AFTER_DRIVER_START);
    home.faults
        .configure_fault(&format!("{after_start}=park").parse().unwrap());
    let alloc = submit(rt, engine, job);
    let control = alloc.control();
    let (events, waiter) = alloc.into_parts();
    // other runs, so the restart is accepted.
    home.wait_for(Await::Passed(scoped(
        Some("other"),
        "hook.poststart.after.persist_handle",
    )));
    home.wait_for(Await::Parked(after_start));
    let restarted = rt.spawn(control.restart(RestartScope::Running));
    home.wait_for(Await::Passed(scoped(Some("web"), points::TR_RESTART_ASKED)));
    home.faults
        .release(Some("web"), points::TR_AFTER_DRIVER_START);
    let done = rt.block_on(async { tokio::time::timeout(idle(), restarted).await });
    assert_eq!(done.expect("restart hung").unwrap(), Ok(()));
    (control, events, waiter)
}

/// Bug 2 (fixed): a user restart reaches `web` as it exits 0. The exit
/// came first, so it is the task's own, and its policy restarts it (one
/// restart counted), but the user's restart, still asked, cuts the half
/// hour's delay short: the virtual clock does not move. (The runner waited
/// out the delay first, holding the restart.)
#[test]
fn a_restart_that_meets_an_exit_0_cuts_its_delay_short() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(0)]);
    let clock = Arc::new(VirtualClock::default());
    let engine = home.engine_on(clock.clone());
    let (control, mut events, waiter) = restart_as_web_exits(&rt, &home, &engine, &exit_0_job());
    assert_eq!(clock.now(), Duration::ZERO);
    // The restart brings it back.
    while !started_events(&rt, &mut events, 1)
        .iter()
        .any(|e| e.task == "web" && e.attempt == 2)
    {}
    control.stop();
    let summary = rt
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    let web = summary.tasks.iter().find(|t| t.task == "web").unwrap();
    assert_eq!(web.restarts, 1);
}

/// The other face of bug 2: a user restart that reaches a batch task as it
/// exits 0 finds it complete, and its completion stands: the task is not
/// run again, and the alloc completes once the rest is stopped.
#[test]
fn a_restart_that_meets_a_completion_leaves_it_complete() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(0)]);
    let engine = home.engine();
    let batch = job(vec![task("other", None, false), task("web", None, false)]);
    let (control, _, waiter) = restart_as_web_exits(&rt, &home, &engine, &batch);
    control.stop();
    let summary = rt
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(
        home.driver.starts("web"),
        1,
        "a completed batch task ran again"
    );
    let web = summary.tasks.iter().find(|t| t.task == "web").unwrap();
    assert!(
        matches!(&web.state, TaskState::Dead { outcome } if !outcome.failed()),
        "{:?}",
        web.state
    );
}

/// A stop whose kill reaches a failed task's runner before it decided on
/// the restart leaves no restart decided: no `Restarting` event, none
/// counted, and the task is not run again.
#[test]
fn a_kill_before_the_restart_decision_leaves_no_restart() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1)]);
    let engine = home.engine_on(Arc::new(VirtualClock::default()));
    let exited = scoped(Some("web"), "hook.exited.before.executor_shutdown");
    home.faults
        .configure_fault(&format!("{exited}=park").parse().unwrap());
    let alloc = submit(
        &rt,
        &engine,
        &job(vec![web_with(policy(1, MINUTE, MINUTE))]),
    );
    let control = alloc.control();
    let waiter = alloc.into_parts().1;
    home.wait_for(Await::Parked(exited.clone()));
    control.stop();
    home.wait_for(Await::Passed(scoped(Some("web"), points::TR_KILL_ASKED)));
    home.faults
        .release(Some("web"), "hook.exited.before.executor_shutdown");
    let summary = rt
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    let web = summary.tasks.iter().find(|t| t.task == "web").unwrap();
    let kinds: Vec<EventKind> = web.events.iter().map(|e| e.kind).collect();
    assert!(!kinds.contains(&EventKind::Restarting), "{kinds:?}");
    assert_eq!(web.restarts, 0);
    assert_eq!(home.driver.starts("web"), 1);
}

/// `web` fails at once; restarted (one attempt per `interval`) after 10 s
/// on `clock`; its second attempt runs until the fake ends it.
fn failed_once(
    rt: &tokio::runtime::Runtime,
    home: &Home,
    clock: &Arc<VirtualClock>,
    job: &Job,
) -> String {
    home.driver.script("web", [Exit::Code(1)]);
    let engine = home.engine_on(clock.clone());
    let alloc = submit(rt, &engine, job);
    let alloc_id = alloc.alloc_id.clone();
    let (mut events, _waiter) = alloc.into_parts();
    assert_eq!(started_events(rt, &mut events, 2)[1].attempt, 2);
    // The restart delay and its jitter, on the virtual clock.
    assert!(clock.now() >= Duration::from_secs(10), "{:?}", clock.now());
    drop(engine);
    alloc_id
}

/// Bug 3 (fixed): the agent restarts while attempt 2 runs, an hour after
/// the restart (one per 10 min); attempt 2 then fails. Its interval
/// expired long ago: it is restarted. (The restored tracker's window began
/// at the restore, with the task's one restart in it, and gave up.)
#[test]
fn a_restore_keeps_the_restart_window() {
    let (first, second) = (runtime(), runtime());
    let home = Home::new();
    let clock = Arc::new(VirtualClock::default());
    let job = job(vec![web_with(policy(
        1,
        10 * MINUTE,
        Duration::from_secs(10),
    ))]);
    failed_once(&first, &home, &clock, &job);
    first.shutdown_timeout(idle());
    clock.advance(60 * MINUTE);
    let engine = home.engine_on(clock.clone());
    let alloc = restore_one(&engine, &second);
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    home.driver.exit("web", 1);
    assert_eq!(started_events(&second, &mut events, 1)[0].attempt, 3);
    control.stop();
    let summary = second
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert_eq!(summary.tasks[0].restarts, 2);
}

/// Bug 3's twin (fixed): a restart of all tasks brings back `web`
/// (completed an hour after its one restart); its next failure is judged
/// in the window the task was in, long passed: it is restarted.
#[test]
fn a_revived_task_keeps_its_restart_window() {
    let rt = runtime();
    let home = Home::new();
    let clock = Arc::new(VirtualClock::default());
    home.driver
        .script("web", [Exit::Code(1), Exit::Code(0), Exit::Code(1)]);
    let web = web_with(policy(1, 10 * MINUTE, Duration::from_secs(10)));
    let engine = home.engine_on(clock.clone());
    let alloc = submit(&rt, &engine, &job(vec![task("other", None, false), web]));
    home.wait_for(Await::Passed(scoped(Some("web"), points::TR_MAIN_EXITED)));
    clock.advance(60 * MINUTE);
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    let restarted = rt.block_on(control.restart(RestartScope::All));
    assert_eq!(restarted, Ok(()));
    // Attempt 3 fails; its window passed, so attempt 4 follows.
    while !started_events(&rt, &mut events, 1)
        .iter()
        .any(|e| e.task == "web" && e.attempt == 4)
    {}
    control.stop();
    let summary = rt
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(home.driver.starts("web"), 4);
    assert_eq!(summary.status.client, ClientStatus::Complete);
}

/// The agent dies inside a restart delay (an hour long here): the restored
/// agent waits out the rest of it (it used to skip it, as Nomad does),
/// and a stop meanwhile ends the wait, with no further attempt.
#[test]
fn a_restart_delay_an_agent_kill_cut_short_is_waited_out() {
    let second = runtime();
    let home = Home::new();
    let alloc_id = agent_died_in_an_hour_long_restart_delay(&home);
    // The restored engine's hits alone from here.
    home.faults.reset();
    let engine = home.engine_on(Arc::new(SystemClock::default()));
    let alloc = restore_one(&engine, &second);
    let web = engine.state().tasks(&alloc_id).unwrap().remove(0);
    let due = web.restart_due.expect("the delay's end was persisted");
    assert!(due > SystemClock::default().now() + 50 * MINUTE, "{due:?}");
    // The restored runner waits again, at the same point.
    home.wait_for(Await::Passed(scoped(Some("web"), points::TR_RESTART_DELAY)));
    alloc.stop();
    let summary = wait(&second, alloc);
    assert_eq!(home.driver.starts("web"), 1);
    assert_eq!(summary.status.client, ClientStatus::Complete);
    let (kind, message) = last_event(&summary, "web");
    assert_eq!(kind, EventKind::Killed, "{message}");
    assert_eq!(summary.tasks[0].restart_due, None);
}

/// As above, but the dead agent's runner had kept a user restart the
/// attempt outlived (its peek found the failure first): the restart is
/// still owed, so the restored agent cuts the hour-long delay short and
/// `web` runs again at once. (It waited the delay out.)
#[test]
fn a_restart_owed_across_a_restore_cuts_the_delay_short() {
    let second = runtime();
    let home = Home::new();
    let alloc_id = agent_died_in_an_hour_long_restart_delay(&home);
    edit_web_record(&home, &alloc_id, |web| web.restart_owed = Some(1));
    let engine = home.engine_on(Arc::new(SystemClock::default()));
    let alloc = restore_one(&engine, &second);
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    assert_eq!(started_events(&second, &mut events, 1)[0].attempt, 2);
    control.stop();
    let summary = second
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(home.driver.starts("web"), 2);
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert_eq!(summary.tasks[0].restart_owed, None, "paid");
    // The restored runner numbers its events on from the dead one's.
    let web = &summary.tasks[0];
    let seqs: Vec<u64> = web.events.iter().map(|e| e.seq).collect();
    let first = web.events_added - seqs.len() as u64;
    assert_eq!(seqs, (first..web.events_added).collect::<Vec<_>>());
    assert!(web.events_added > 4, "{:?}", web.events);
}

/// The agent died in `web`'s restart delay, and the alloc was stopped
/// while no agent ran: the restored runner ends `web` as the live one
/// would, killed while waiting to restart, never as a task that did not
/// start (it ran attempt 1).
#[test]
fn a_task_restored_in_its_delay_of_a_stopped_alloc_is_killed() {
    let second = runtime();
    let home = Home::new();
    let alloc_id = agent_died_in_an_hour_long_restart_delay(&home);
    {
        let state = StateDb::open(&home.data_dir().state_db()).unwrap();
        let mut alloc = state.alloc(&alloc_id).unwrap().unwrap();
        alloc.desired = taskgate_engine::DesiredStatus::Stop;
        state.put_alloc(&alloc).unwrap();
    }
    let engine = home.engine_on(Arc::new(SystemClock::default()));
    let summary = wait(&second, restore_one(&engine, &second));
    assert_eq!(summary.status.client, ClientStatus::Complete);
    let (kind, message) = last_event(&summary, "web");
    assert_eq!(kind, EventKind::Killed, "{message}");
    assert_eq!(summary.tasks[0].restart_due, None);
}

/// A restart delay that ran out is written as over at once: a task held
/// at its start condition afterwards (a restart's hold, its prestart
/// tasks run again) and an agent killed there leave no delay for the next
/// agent to wait again, the clock having been set back meanwhile.
#[test]
fn a_delay_that_ran_out_is_written_over() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1)]);
    let clock = Arc::new(VirtualClock::default());
    let engine = home.engine_on(clock.clone());
    let held = scoped(Some("web"), points::TR_START_CONDITION_MET);
    home.faults
        .configure_fault(&format!("{held}@2=park").parse().unwrap());
    let alloc = submit(
        &rt,
        &engine,
        &job(vec![web_with(policy(
            1,
            10 * MINUTE,
            Duration::from_secs(10),
        ))]),
    );
    home.wait_for(Await::Parked(held));
    let web = engine.state().tasks(&alloc.alloc_id).unwrap().remove(0);
    home.faults
        .release(Some("web"), points::TR_START_CONDITION_MET);
    alloc.stop();
    wait(&rt, alloc);
    assert_eq!((web.restart_due, web.restart_wait), (None, None));
}

/// Fails `web` (one restart left, an hour's delay) in a first engine, and
/// lets that engine die as its runner begins the delay; returns the alloc id.
fn agent_died_in_an_hour_long_restart_delay(home: &Home) -> String {
    let first = runtime();
    home.driver.script("web", [Exit::Code(1)]);
    let job = job(vec![web_with(policy(1, 60 * MINUTE, 60 * MINUTE))]);
    let engine = home.engine_on(Arc::new(SystemClock::default()));
    let alloc = submit(&first, &engine, &job);
    home.wait_for(Await::Passed(scoped(Some("web"), points::TR_RESTART_DELAY)));
    let alloc_id = alloc.alloc_id.clone();
    drop(alloc);
    drop(engine);
    first.shutdown_timeout(idle());
    alloc_id
}

/// Delay mode: `web` used its one restart of the interval, and waits out
/// the rest of it, its next window to begin as that wait ends. A user
/// restart cuts the wait short: the wait ends then, and so the next
/// window begins then, in the record too. (It stayed at the wait's planned
/// end, ahead of now, which a restored agent reads as a clock set back
/// and pulls back to its own start: the two agents judged the next
/// failure in different windows.)
#[test]
fn a_delay_mode_wait_cut_short_begins_the_next_window() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(1), Exit::Code(1)]);
    let clock = Arc::new(VirtualClock::default());
    let engine = home.engine_on(clock.clone());
    let mut web = web_with(policy(1, 10 * MINUTE, Duration::from_secs(10)));
    web.restart.mode = RestartMode::Delay;
    let job = job(vec![task("other", None, false), web]);
    let delay = scoped(Some("web"), points::TR_RESTART_DELAY);
    home.faults
        .configure_fault(&format!("{delay}@2=park").parse().unwrap());
    let alloc = submit(&rt, &engine, &job);
    let alloc_id = alloc.alloc_id.clone();
    let control = alloc.control();
    let (mut events, waiter) = alloc.into_parts();
    home.wait_for(Await::Parked(delay));
    let waits_from = clock.now();
    let restarted = rt.spawn(control.restart(RestartScope::Running));
    home.wait_for(Await::Passed(scoped(Some("web"), points::TR_RESTART_ASKED)));
    home.faults.release(Some("web"), points::TR_RESTART_DELAY);
    while !started_events(&rt, &mut events, 1)
        .iter()
        .any(|e| e.task == "web" && e.attempt == 3)
    {}
    let done = rt.block_on(async { tokio::time::timeout(idle(), restarted).await });
    assert_eq!(done.expect("restart hung").unwrap(), Ok(()));
    assert_eq!(clock.now(), waits_from, "the wait was cut short");
    let window = (engine.state().tasks(&alloc_id).unwrap())
        .into_iter()
        .find(|t| t.task == "web")
        .and_then(|t| t.restart_window)
        .expect("web's window");
    control.stop();
    let summary = rt
        .block_on(async { tokio::time::timeout(idle(), waiter.wait()).await })
        .expect("alloc hung");
    assert_eq!(summary.status.client, ClientStatus::Complete);
    assert!(
        window.start <= clock.now(),
        "the window begins at {:?}, now is {:?}",
        window.start,
        clock.now()
    );
}
