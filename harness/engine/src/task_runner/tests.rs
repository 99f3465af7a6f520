//! The task runner on its own, against the fake driver.

use super::*;
use crate::alloc::{ClientStatus, DesiredStatus};
use crate::clock::SystemClock;
use crate::fake_driver::FakeDriver;
use crate::hooks::HookSet;
use crate::state::StateDb;

/// A runner for a one-task alloc in a temp dir, and the fake driver under it.
fn runner(dir: &std::path::Path) -> (TaskRunner, TaskRunnerHandle, FakeDriver) {
    runner_with(dir, |_| {})
}

/// [`runner`], its standard hooks changed by `hooks` first.
fn runner_with(
    dir: &std::path::Path,
    hooks: impl FnOnce(&mut HookSet),
) -> (TaskRunner, TaskRunnerHandle, FakeDriver) {
    let state = StateDb::open(&crate::DataDir::new(dir).state_db()).unwrap();
    runner_on(dir, hooks, state)
}

/// [`runner_with`], its records kept in `state`.
fn runner_on(
    dir: &std::path::Path,
    hooks: impl FnOnce(&mut HookSet),
    state: StateDb,
) -> (TaskRunner, TaskRunnerHandle, FakeDriver) {
    let mut task = Task::new("web", "/bin/true", vec![]);
    task.restart.attempts = 0;
    runner_of(dir, hooks, task, TaskRecord::new("web"), state)
}

/// [`runner_on`] for `task`, from `record` (a restored runner's, if it
/// says the task was running).
fn runner_of(
    dir: &std::path::Path,
    hooks: impl FnOnce(&mut HookSet),
    task: Task,
    record: TaskRecord,
    state: StateDb,
) -> (TaskRunner, TaskRunnerHandle, FakeDriver) {
    let data_dir = crate::DataDir::new(dir);
    let faults = taskgate_faults::Faults::default();
    let driver = FakeDriver::new(data_dir.run(), faults.clone());
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .expect("the test's own user");
    let mut hook_set = HookSet::standard(&me.name);
    hooks(&mut hook_set);
    let deps = TaskRunnerDeps {
        alloc_id: "a1".into(),
        alloc_dir: AllocDir::new(data_dir.alloc("a1")),
        hooks: Arc::new(hook_set),
        driver: Arc::new(driver.clone()),
        gate: Arc::new(StartGate::new()),
        state: Arc::new(state),
        defaults: Arc::new(SpecDefaults {
            chroot_env: BTreeMap::new(),
            default_user: me.name,
            pids_max: 8,
        }),
        run_dir: data_dir.run(),
        clock: Arc::new(SystemClock::default()),
        job_type: crate::job::JobType::Batch,
        restart_seed: 0,
        events: mpsc::unbounded_channel().0,
        faults,
    };
    let alloc = AllocStatus {
        desired: DesiredStatus::Run,
        client: ClientStatus::Pending,
    };
    let (changed, _) = mpsc::unbounded_channel();
    // No alloc runner to release it: a dead task's runner returns at once.
    let released = watch::channel(true).1;
    let (runner, handle) = TaskRunner::new(task, deps, record, alloc, changed, released);
    (runner, handle, driver)
}

/// Starts `runner`'s task and returns its run once the task is running.
async fn started(
    runner: TaskRunner,
    handle: &TaskRunnerHandle,
) -> tokio::task::JoinHandle<TaskRecord> {
    let mut state = handle.state.clone();
    handle.start.send_replace(true);
    let run = tokio::spawn(runner.run());
    state
        .wait_for(|s| matches!(s, TaskState::Running { .. }))
        .await
        .unwrap();
    run
}

/// An agent going down drops its alloc runners (the senders of the start
/// and kill flags): that is no order to kill. The task runs on, untouched,
/// until it ends by itself.
#[tokio::test]
async fn a_gone_alloc_runner_is_no_kill_order() {
    let dir = tempfile::tempdir().unwrap();
    let (runner, handle, driver) = runner(dir.path());
    let run = started(runner, &handle).await;
    drop(handle);
    // The task ends on its own (its executor killed it, say).
    driver.destroy_remains("a1", "web").await.unwrap();
    let record = run.await.unwrap();
    let stops = driver.stops();
    assert!(stops.is_empty(), "told to stop: {stops:?}");
    assert!(
        matches!(
            &record.state,
            TaskState::Dead {
                outcome: Outcome::Exited { .. }
            }
        ),
        "{:?}",
        record.state
    );
}

/// Nor is a gone alloc runner a start order.
#[tokio::test]
async fn a_gone_alloc_runner_is_no_start_order() {
    let dir = tempfile::tempdir().unwrap();
    let (runner, handle, driver) = runner(dir.path());
    drop(handle);
    let waiting = tokio::time::timeout(std::time::Duration::ZERO, runner.run());
    assert!(waiting.await.is_err(), "the runner went on without a start");
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
}

/// The Terminated event's message, as Nomad words it.
#[rstest::rstest]
#[case::code(Some(3), None, false, "Exit Code: 3")]
#[case::signal(None, Some(9), false, "Exit Code: 137, Signal: 9")]
#[case::code_and_signal(Some(1), Some(15), false, "Exit Code: 1, Signal: 15")]
#[case::unknown(None, None, false, "Exit Code: unknown")]
#[case::oom(None, Some(9), true, "Exit Code: 137, Signal: 9, OOM Killed")]
fn an_exit_is_described_as_nomad_does(
    #[case] exit_code: Option<i32>,
    #[case] signal: Option<i32>,
    #[case] oom_killed: bool,
    #[case] expected: &str,
) {
    let result = ExitResult {
        exit_code,
        signal,
        oom_killed,
        ..ExitResult::with_code(0)
    };
    assert_eq!(describe_exit(&result), expected);
}

struct FailingPoststart;

impl crate::hooks::Hook for FailingPoststart {
    fn name(&self) -> &'static str {
        "failing"
    }
}

impl crate::hooks::PoststartHook for FailingPoststart {
    fn poststart(&self, _: &mut HookContext<'_>, _: &RunningTask) -> Result<(), HookError> {
        Err(HookError::Failed {
            hook: "failing",
            message: "boom".into(),
        })
    }
}

/// A poststart hook that fails is recorded as a "Hook Failed" event; the
/// task it ran for runs on.
#[tokio::test]
async fn a_failing_poststart_hook_is_an_event() {
    let dir = tempfile::tempdir().unwrap();
    let (runner, handle, _driver) = runner_with(dir.path(), |hooks| {
        hooks.poststart = vec![Box::new(FailingPoststart)]
    });
    let run = started(runner, &handle).await;
    handle.kill.send_replace(true);
    let record = run.await.unwrap();
    let failed: Vec<(EventKind, &str)> = (record.events.iter())
        .filter(|e| e.kind == EventKind::HookFailed)
        .map(|e| (e.kind, e.message.as_str()))
        .collect();
    assert_eq!(failed, [(EventKind::HookFailed, "failing: boom")]);
    assert!(
        matches!(
            &record.state,
            TaskState::Dead {
                outcome: Outcome::Killed { .. }
            }
        ),
        "ran on until killed: {:?}",
        record.state
    );
}

/// An exited hook that cannot reach the task's executor, as
/// `executor_shutdown` cannot once the executor died.
struct UnreachableExecutor;

impl crate::hooks::Hook for UnreachableExecutor {
    fn name(&self) -> &'static str {
        "executor_shutdown"
    }
}

impl crate::hooks::ExitedHook for UnreachableExecutor {
    fn exited(
        &self,
        _: &mut HookContext<'_>,
        _: &RunningTask,
        _: Option<&ExitResult>,
    ) -> Result<(), HookError> {
        Err(HookError::Failed {
            hook: "executor_shutdown",
            message: "connect to executor: Connection refused".into(),
        })
    }
}

/// An executor that could not be shut down after its task exited (it died
/// just then, say) leaves its cgroup, socket, spec and root behind: the
/// runner destroys them, as a restored agent or the next launch would.
#[tokio::test]
async fn an_executor_that_cannot_be_shut_down_has_its_remains_destroyed() {
    let dir = tempfile::tempdir().unwrap();
    let (runner, handle, driver) = runner_with(dir.path(), |hooks| {
        hooks.exited = vec![Box::new(UnreachableExecutor)]
    });
    let run = started(runner, &handle).await;
    driver.exit("web", 0);
    run.await.unwrap();
    let destroyed = (driver.calls().iter()).any(|c| {
        matches!(c, crate::fake_driver::Call::DestroyRemains { task, found: true } if task == "web")
    });
    assert!(
        destroyed && driver.live().is_empty(),
        "the runner left what an executor it could not shut down left: {:?}",
        driver.calls()
    );
}

/// An exit the task made before its runner was told to die is its own
/// end, which its policy judges: with no restart left it failed. (Taken
/// for the kill's end, a failure just before a stop was hidden.)
#[tokio::test]
async fn an_exit_before_the_kill_is_the_tasks_own_end() {
    let dir = tempfile::tempdir().unwrap();
    let (runner, handle, driver) = runner(dir.path());
    let run = started(runner, &handle).await;
    // Both before the runner runs again (one thread): it sees the kill first.
    driver.exit("web", 1);
    handle.kill.send_replace(true);
    let record = run.await.unwrap();
    assert!(
        matches!(
            &record.state,
            TaskState::Dead {
                outcome: Outcome::Exited { failed: true, .. }
            }
        ),
        "{:?}",
        record.state
    );
    assert!(driver.stops().is_empty(), "an exited task was stopped");
}

/// A restart asked as the task exited by itself finds that exit (its own
/// end) and is kept: the record that ends the attempt owes the restart in
/// the same write, so an agent killed right after any write restores
/// either the attempt running or its end with the restart owed (then cut
/// short the delay the policy gives). (Written apart, an agent killed
/// between the two writes lost the restart and waited the delay out.)
#[tokio::test]
async fn a_kept_restart_is_owed_in_the_write_that_ends_the_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let (state, writes) = StateDb::recording();
    let (runner, handle, driver) = runner_on(dir.path(), |_| {}, state);
    let run = started(runner, &handle).await;
    // Both before the runner runs again (one thread): it sees the restart
    // first, and its peek then finds the exit.
    driver.exit("web", 1);
    handle.restart.send_modify(|ask| ask.generation += 1);
    run.await.unwrap();
    let records = writes.records();
    let ends: Vec<_> = (records.iter())
        .filter(|r| r.ended.as_ref().is_some_and(|e| e.attempt == 1))
        .collect();
    assert_eq!(
        ends.first().map(|r| r.restart_owed),
        Some(Some(1)),
        "the end was written before the restart it owes"
    );
}

/// A restored runner that finds its attempt's executor gone writes the
/// loss together with the restart policy's decision on it: an agent killed
/// after any write restores either the attempt as the dead agent left it
/// (and loses it again) or the decision. (A write of the task pending and
/// undecided made the next agent start the next attempt at once,
/// uncounted, even with no restart left.) The dead agent may have died
/// before it wrote the launch: the decision is written with the attempt
/// done with, so the next agent does not look for it, lose it and count
/// it again (`lost-attempt-counted-again`).
#[tokio::test]
async fn a_restored_runner_writes_a_lost_attempt_with_its_decision() {
    for (attempts, launched) in [(0, Some(1)), (1, Some(1)), (1, None)] {
        let dir = tempfile::tempdir().unwrap();
        let (state, writes) = StateDb::recording();
        let mut task = Task::new("web", "/bin/true", vec![]);
        task.restart.attempts = attempts;
        task.restart.delay = std::time::Duration::from_secs(3600);
        let left = TaskRecord {
            state: TaskState::Running { attempt: 1 },
            prestart_done: Some(1),
            committed: Some(1),
            launched,
            ..TaskRecord::new("web")
        };
        let (runner, _handle, _driver) = runner_of(dir.path(), |_| {}, task, left, state);
        let run = tokio::spawn(runner.run());
        if attempts == 0 {
            run.await.unwrap();
        } else {
            // Nothing but the hour's restart delay makes it wait.
            tokio::task::yield_now().await;
            run.abort();
            let _ = run.await;
        }
        let records = writes.records();
        let last = records.last().expect("the runner wrote its record");
        assert!(
            last.state.is_dead() || last.restarts == 1,
            "{attempts} restarts allowed: no decision written: {last:?}"
        );
        assert!(
            last.committed <= last.launched,
            "the decision reads as a launch under way: {last:?}"
        );
        let undecided: Vec<_> = (records.iter())
            .filter(|r| {
                !matches!(r.state, TaskState::Running { .. })
                    && !r.state.is_dead()
                    && r.restarts == 0
            })
            .collect();
        assert!(
            undecided.is_empty(),
            "{attempts} restarts allowed: a write left the lost attempt pending and undecided: \
             {undecided:?}"
        );
    }
}

/// An exited hook that tells its task to die, as a stop reaching the runner
/// while it decides the exit's restart would.
struct KilledAsItExits(Arc<std::sync::OnceLock<watch::Sender<bool>>>);

impl crate::hooks::Hook for KilledAsItExits {
    fn name(&self) -> &'static str {
        "killed_as_it_exits"
    }
}

impl crate::hooks::ExitedHook for KilledAsItExits {
    fn exited(
        &self,
        _: &mut HookContext<'_>,
        _: &RunningTask,
        _: Option<&ExitResult>,
    ) -> Result<(), HookError> {
        self.0
            .get()
            .expect("the runner's kill flag")
            .send_replace(true);
        Ok(())
    }
}

/// A restart the policy grants and a kill refuses counts for nothing: the
/// window persisted keeps the restarts it had, so a task a restart of all
/// tasks revives later has its policy's attempts in full.
#[tokio::test]
async fn a_restart_a_kill_refused_is_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDb::open(&crate::DataDir::new(dir.path()).state_db()).unwrap();
    let mut task = Task::new("web", "/bin/true", vec![]);
    task.restart.attempts = 1;
    let kill = Arc::new(std::sync::OnceLock::new());
    let hook = KilledAsItExits(kill.clone());
    let (runner, handle, driver) = runner_of(
        dir.path(),
        |hooks| hooks.exited = vec![Box::new(hook)],
        task,
        TaskRecord::new("web"),
        state,
    );
    kill.set(handle.kill.clone()).unwrap();
    let run = started(runner, &handle).await;
    driver.exit("web", 1);
    assert_killed_uncounted(&run.await.unwrap());
}

/// Nor does one whose delay a kill ends: the restart never came, and the
/// window and the task's restarts persisted keep what they had.
#[tokio::test]
async fn a_restart_killed_in_its_delay_is_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDb::open(&crate::DataDir::new(dir.path()).state_db()).unwrap();
    let (_, run, handle) = in_restart_delay(dir.path(), state).await;
    handle.kill.send_replace(true);
    assert_killed_uncounted(&run.await.unwrap());
}

/// A task with one restart and an hour's delay, started, failed, and
/// waiting out the delay of the restart its policy granted.
async fn in_restart_delay(
    dir: &std::path::Path,
    state: StateDb,
) -> (Task, tokio::task::JoinHandle<TaskRecord>, TaskRunnerHandle) {
    let mut task = Task::new("web", "/bin/true", vec![]);
    task.restart.attempts = 1;
    task.restart.delay = std::time::Duration::from_secs(3600);
    let (runner, handle, driver) =
        runner_of(dir, |_| {}, task.clone(), TaskRecord::new("web"), state);
    let run = started(runner, &handle).await;
    let mut waiting = handle.state.clone();
    driver.exit("web", 1);
    waiting
        .wait_for(|s| matches!(s, TaskState::Pending))
        .await
        .unwrap();
    (task, run, handle)
}

/// Nor when the agent that granted it died in its delay: the restored
/// runner, killed in the rest of that delay, takes the restart back just
/// as the live runner would have.
#[tokio::test]
async fn a_restart_killed_in_a_restored_delay_is_not_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (state, writes) = StateDb::recording();
    let (task, run, _handle) = in_restart_delay(dir.path(), state).await;
    // The agent dies in the delay.
    run.abort();
    let _ = run.await;
    let left = writes.records().last().cloned().expect("a record written");
    assert_eq!(left.restarts, 1, "the restart was granted: {left:?}");

    let state = StateDb::open(&crate::DataDir::new(dir.path()).state_db()).unwrap();
    let (restored, handle, _driver) = runner_of(dir.path(), |_| {}, task, left, state);
    let mut waiting = handle.state.clone();
    handle.start.send_replace(true);
    let run = tokio::spawn(restored.run());
    waiting
        .wait_for(|s| matches!(s, TaskState::Pending))
        .await
        .unwrap();
    handle.kill.send_replace(true);
    let record = run.await.unwrap();
    assert_killed_uncounted(&record);
}

/// The task was killed, and no restart is counted: not in its restarts,
/// not in the window persisted.
fn assert_killed_uncounted(record: &TaskRecord) {
    assert!(
        matches!(
            record.state,
            TaskState::Dead {
                outcome: Outcome::Killed { .. }
            }
        ),
        "{:?}",
        record.state
    );
    let counted = (
        record.restarts,
        record.restart_window.map_or(0, |w| w.count),
    );
    assert_eq!(counted, (0, 0), "{:?}", record.restart_window);
}

/// A prestart hook that fails once an in-place update has come in while it
/// ran: the update is there for the runner to take with the failure.
struct FailingAfterAnUpdate(Arc<std::sync::OnceLock<watch::Sender<Task>>>);

impl crate::hooks::Hook for FailingAfterAnUpdate {
    fn name(&self) -> &'static str {
        "failing"
    }
}

impl crate::hooks::PrestartHook for FailingAfterAnUpdate {
    fn prestart(&self, _: &mut HookContext<'_>, _: &mut TaskSetup) -> Result<(), HookError> {
        let definition = self.0.get().expect("the runner's update channel");
        definition.send_modify(|task| {
            task.meta.insert("version".into(), "2".into());
        });
        Err(HookError::Failed {
            hook: "failing",
            message: "boom".into(),
        })
    }
}

/// A failed start is written with the restart policy's decision on it, or
/// as a failed start still to decide, even when an in-place update is
/// taken with it: an agent killed after any write restores the attempt
/// before its start, the failure to decide, or the decision. (The update's
/// own write came first: the next agent found the task pending and
/// undecided, and ran the setup again, uncounted.)
#[tokio::test]
async fn a_failed_start_is_written_with_its_decision() {
    let dir = tempfile::tempdir().unwrap();
    let (state, writes) = StateDb::recording();
    let definition = Arc::new(std::sync::OnceLock::new());
    let hook = FailingAfterAnUpdate(definition.clone());
    let (runner, handle, _driver) = runner_on(
        dir.path(),
        |hooks| hooks.prestart = vec![Box::new(hook)],
        state,
    );
    definition.set(handle.definition.clone()).unwrap();
    handle.start.send_replace(true);
    let record = runner.run().await;
    assert!(record.state.is_dead(), "{:?}", record.state);
    let failed = |r: &TaskRecord| (r.events.iter()).any(|e| e.kind == EventKind::SetupFailure);
    let undecided: Vec<_> = (writes.records().into_iter())
        .filter(|r| failed(r) && !r.state.is_dead() && r.start_failed.is_none())
        .collect();
    assert!(
        undecided.is_empty(),
        "a write held the failed start undecided: {undecided:?}"
    );
}

/// An executor that dies while its task runs loses the attempt: its
/// remains are destroyed once, and the Killed event says what that killed.
/// (Its exited hook's failed shutdown used to destroy them first, so the
/// lost attempt's own pass found nothing and said so.)
#[tokio::test]
async fn a_lost_attempts_remains_are_destroyed_once() {
    let dir = tempfile::tempdir().unwrap();
    let (runner, handle, driver) = runner(dir.path());
    let run = started(runner, &handle).await;
    driver.lose_executor("web");
    let record = run.await.unwrap();
    let destroys: Vec<_> = (driver.calls().into_iter())
        .filter(|c| matches!(c, crate::fake_driver::Call::DestroyRemains { .. }))
        .collect();
    assert!(
        destroys.len() == 1,
        "lost attempt's remains destroyed twice: {destroys:?}"
    );
    let killed = (record.events.iter()).find(|e| e.kind == EventKind::Killed);
    assert!(
        killed.is_some_and(|e| e.message.starts_with("Killed what was left")),
        "{:?}",
        record.events
    );
}
