//! Restore after the agent is SIGKILLed.

use super::*;

// ---------------------------------------------------------------------------
// 8. Restore after the agent is SIGKILLed

/// Runs `taskgate agent` with these arguments (and faults), appending fault
/// hits to `log`; returns its exit status. Killed (and the test failed) if
/// it outlives the safety net.
fn agent(
    home: &EngineHome,
    extra: &[&str],
    faults: Option<&str>,
    log: &Path,
    tag: &str,
) -> ExitStatus {
    let out = home.path().join(format!("agent-{tag}.log"));
    let file = std::fs::File::create(&out).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_taskgate"));
    cmd.arg("agent")
        .arg("--data-dir")
        .arg(home.data_dir().path())
        .arg("--executor-bin")
        .arg(env!("CARGO_BIN_EXE_taskgate-executor"))
        .args(home.agent_args())
        .args(extra)
        .env(taskgate_faults::FAULT_LOG_ENV, log)
        .env_remove(taskgate_faults::FAULTS_ENV)
        .env_remove(taskgate_executor::FAILPOINTS_ENV)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    if let Some(faults) = faults {
        cmd.env(taskgate_faults::FAULTS_ENV, faults);
    }
    let mut child = cmd.spawn().expect("spawn taskgate agent");
    let fault_log = log.to_path_buf();
    let progress = move || std::fs::metadata(&fault_log).map_or(0, |m| m.len());
    let watchdog = Watchdog::arm(child.id(), idle(), progress);
    let status = child.wait().expect("wait for agent");
    let timed_out = watchdog.disarm();
    let output = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        !timed_out,
        "agent {tag} hung: no progress for {:?}; output:\n{output}",
        idle()
    );
    assert!(
        !output.contains("needs a build with fault points"),
        "{} is not a failpoints build (another build overwrote it?):\n{output}",
        env!("CARGO_BIN_EXE_taskgate")
    );
    status
}

struct AgentRestart {
    home: EngineHome,
    /// Every fault hit of both agents, in order.
    hits: Vec<Hit>,
    /// Index in `hits` of the restarted agent's first hit.
    restarted_at: usize,
    alloc_id: String,
    client: ClientStatus,
    desired: DesiredStatus,
    tasks: Vec<TaskRecord>,
}

/// Submits the job of docs/nomad-prestart-race-report.txt to an agent that SIGKILLs itself at `kill_at`,
/// then restores with a second agent that stops the alloc.
fn kill_and_restore(kill_at: &str) -> AgentRestart {
    let home = EngineHome::new();
    std::fs::create_dir_all(home.data_dir().path()).unwrap();
    let job_path = home.path().join("job.json");
    std::fs::write(&job_path, serde_json::to_vec(&report_alloc()).unwrap()).unwrap();
    let log = home.path().join("faults.jsonl");
    let kill = taskgate_faults::Fault {
        point: kill_at.parse().unwrap(),
        action: Action::KillAgent,
        nth: 1,
    };
    let faults = taskgate_faults::env_spec([&kill]);

    let first = agent(
        &home,
        &[
            "--job-json",
            job_path.to_str().unwrap(),
            "--stop-when-running",
        ],
        Some(&faults),
        &log,
        "1",
    );
    let output = std::fs::read_to_string(home.path().join("agent-1.log")).unwrap_or_default();
    assert_eq!(
        first.signal(),
        Some(libc::SIGKILL),
        "the first agent must die by SIGKILL at {kill_at}, got {first}:\n{output}"
    );
    let before = taskgate_faults::read_log(&log).unwrap();
    // The first agent's last hit is the kill. The executors it started
    // outlive it, and may still record after it (a task's first output).
    let killed = (before.iter())
        .rposition(|h| h.action == Some(Action::KillAgent))
        .unwrap_or_else(|| panic!("no kill: {:#?}", names(&before)));
    let recorded_since = (before[killed + 1..].iter())
        .all(|h| taskgate_faults::points::RECORDED_TASK_POINTS.contains(&h.point.point.as_str()));
    assert!(
        before[killed].name() == kill_at && recorded_since,
        "{:#?}",
        names(&before)
    );

    let second = agent(&home, &["--restore", "--stop"], None, &log, "2");
    let output = std::fs::read_to_string(home.path().join("agent-2.log")).unwrap_or_default();
    assert!(
        second.success(),
        "the restored agent failed: {second}\n{output}"
    );

    let hits = taskgate_faults::read_log(&log).unwrap();
    let state = StateDb::open(&home.data_dir().state_db()).expect("state db");
    let allocs = state.allocs().unwrap();
    assert_eq!(allocs.len(), 1, "{allocs:#?}");
    let alloc = &allocs[0];
    let tasks = state.tasks(&alloc.alloc_id).unwrap();
    AgentRestart {
        restarted_at: before.len(),
        hits,
        alloc_id: alloc.alloc_id.clone(),
        client: alloc.client,
        desired: alloc.desired,
        tasks,
        home,
    }
}

impl AgentRestart {
    fn passes_after_restart(&self, name: &str) -> usize {
        passes(&self.hits[self.restarted_at..], name)
    }

    /// `leader_started`: Started events the leader has (0 when the first
    /// agent died before it could emit it).
    fn assert_common(&self, leader_started: usize) {
        for t in &self.tasks {
            assert!(t.state.is_dead(), "task {} is not dead: {t:#?}", t.task);
            assert!(
                t.handle.is_none(),
                "task {} still has an executor handle: {t:#?}",
                t.task
            );
        }
        assert!(self.client.is_terminal(), "{:?}", self.client);
        assert_eq!(self.desired, DesiredStatus::Stop);
        // The leader was running when the agent died: re-attached, never
        // started again, its prestart never re-run.
        let leader = task(&self.tasks, "leader");
        assert_eq!(
            passes(&self.hits, "leader:tr.before_driver_start"),
            1,
            "{:#?}",
            names(&self.hits)
        );
        assert_eq!(
            passes(&self.hits, "leader:hook.prestart.before.task_dir"),
            1,
            "{:#?}",
            names(&self.hits)
        );
        assert_eq!(
            self.passes_after_restart("leader:hook.prestart.before.task_dir"),
            0
        );
        assert_eq!(
            passes(&self.hits, "leader:tr.after_driver_start"),
            1,
            "{:#?}",
            names(&self.hits)
        );
        assert_eq!(
            self.passes_after_restart("leader:tr.start_condition_met"),
            0,
            "{:#?}",
            names(&self.hits)
        );
        // Started by the first agent (persisted right after the launch, long
        // before the sidecar could launch), re-attached by the second.
        assert_eq!(
            count(leader, EventKind::Started),
            leader_started,
            "{leader:#?}"
        );
        assert_eq!(count(leader, EventKind::Restored), 1, "{leader:#?}");
        assert_killed(leader);
    }
}

/// Killed right after the sidecar's executor launched (before its Started
/// event): the restored agent re-attaches to both tasks, execs nothing
/// again, re-runs no prestart, stops them, and leaves nothing behind.
#[test]
#[serial]
fn agent_killed_after_sidecar_launch_restores_without_restarting_anything() {
    require_root();
    let _faults = Faults::reset();
    let run = kill_and_restore("sidecar:tr.after_driver_start");
    run.assert_common(1);
    let sidecar = task(&run.tasks, "sidecar");
    assert_eq!(
        passes(&run.hits, "sidecar:tr.before_driver_start"),
        1,
        "{:#?}",
        names(&run.hits)
    );
    assert_eq!(
        passes(&run.hits, "sidecar:hook.prestart.before.task_dir"),
        1,
        "{:#?}",
        names(&run.hits)
    );
    assert_eq!(
        run.passes_after_restart("sidecar:hook.prestart.before.task_dir"),
        0
    );
    assert_eq!(
        run.passes_after_restart("sidecar:tr.start_condition_met"),
        0,
        "{:#?}",
        names(&run.hits)
    );
    // Its Started event was never emitted (the agent died first); restore says Restored.
    assert_eq!(count(sidecar, EventKind::Started), 0, "{sidecar:#?}");
    assert_eq!(count(sidecar, EventKind::Restored), 1, "{sidecar:#?}");
    assert_eq!(sidecar.committed, Some(1));
    assert_killed(sidecar);
    assert_eq!(run.client, ClientStatus::Complete, "{:#?}", run.tasks);
    let AgentRestart { home, alloc_id, .. } = run;
    home.finish(&[alloc_id]);
}

/// Killed after the sidecar's prestart but before its start was committed:
/// the restored agent either never starts the sidecar (the stop wins) or
/// starts it only after running its own, complete prestart.
#[test]
#[serial]
fn agent_killed_before_sidecar_commit_never_execs_it_without_its_own_prestart() {
    require_root();
    let _faults = Faults::reset();
    let run = kill_and_restore("sidecar:tr.after_prestart");
    run.assert_common(1);
    let before = &run.hits[..run.restarted_at];
    assert_eq!(
        passes(before, "sidecar:tr.before_driver_start"),
        0,
        "{:#?}",
        names(before)
    );
    assert_sidecar_started_only_after_its_own_prestart(&run);
    assert_eq!(run.client, ClientStatus::Complete, "{:#?}", run.tasks);
    let AgentRestart { home, alloc_id, .. } = run;
    home.finish(&[alloc_id]);
}

/// The sidecar had no committed start when the first agent died: the
/// restored agent either never starts it (the stop wins) or starts it once,
/// only after running the sidecar's whole prestart itself.
fn assert_sidecar_started_only_after_its_own_prestart(run: &AgentRestart) {
    let sidecar = task(&run.tasks, "sidecar");
    // Nothing of it was running to re-attach to.
    assert_eq!(count(sidecar, EventKind::Restored), 0, "{sidecar:#?}");
    let after = &run.hits[run.restarted_at..];
    // Whatever the restored agent did, it reached the start gate with the
    // sidecar only after running the sidecar's whole prestart itself.
    if let Some(to_gate) = passed_at(after, "sidecar:tr.before_driver_start") {
        let prestart = passed_at(after, "sidecar:tr.after_prestart").unwrap_or_else(|| {
            panic!(
                "sidecar went for its start without prestart in the restored agent: {:#?}",
                names(after)
            )
        });
        // Every prestart hook ran in this agent, before the start.
        for hook in ["validate", "task_dir", "log_files", "task_env"] {
            let point = format!("sidecar:{}", hook_point("prestart", Edge::After, hook));
            let at = passed_at(after, &point).unwrap_or_else(|| {
                panic!(
                    "the restored agent took the sidecar to its start without running prestart hook {hook}: {:#?}",
                    names(after)
                )
            });
            assert!(at < prestart, "{:#?}", names(after));
        }
        let task_dir = passed_at(after, "sidecar:hook.prestart.before.task_dir").unwrap();
        assert!(
            task_dir < prestart && prestart < to_gate,
            "{:#?}",
            names(after)
        );
    }
    if sidecar.committed.is_none() {
        // The stop won: refused at its start condition, prestart or the gate.
        assert!(
            matches!(outcome(sidecar), Outcome::NeverStarted { .. }),
            "{sidecar:#?}"
        );
        assert_eq!(count(sidecar, EventKind::Started), 0, "{sidecar:#?}");
        assert_eq!(
            passes(after, "sidecar:tr.after_driver_start"),
            0,
            "{:#?}",
            names(after)
        );
    } else {
        // Started by the restored agent, once, after its own prestart (above).
        assert_eq!(sidecar.committed, Some(1), "{sidecar:#?}");
        assert_eq!(
            passes(after, "sidecar:tr.after_driver_start"),
            1,
            "{:#?}",
            names(after)
        );
        assert_eq!(count(sidecar, EventKind::Started), 1, "{sidecar:#?}");
        assert_killed(sidecar);
    }
}

/// Killed right after the leader's executor launched (before its Running
/// state and Started event were persisted, and before the sidecar could
/// start): the restored agent finds the leader's executor by its socket,
/// re-attaches without a second exec or prestart, and the sidecar is only
/// ever started after a prestart of its own.
#[test]
#[serial]
fn agent_killed_after_leader_launch_reattaches_the_leader() {
    require_root();
    let _faults = Faults::reset();
    let run = kill_and_restore("leader:tr.after_driver_start");
    run.assert_common(0);
    let before = &run.hits[..run.restarted_at];
    assert!(
        !before.iter().any(|h| h.point.scope() == Some("sidecar")),
        "{:#?}",
        names(before)
    );
    assert_sidecar_started_only_after_its_own_prestart(&run);
    assert_eq!(run.client, ClientStatus::Complete, "{:#?}", run.tasks);
    let AgentRestart { home, alloc_id, .. } = run;
    home.finish(&[alloc_id]);
}

/// After a reboot every cgroup is gone, the parent a data dir's tasks
/// lived under with them: no task of an unfinished allocation can live
/// there, so an engine given another parent (`auto` chose anew) opens,
/// and finds them lost. While the recorded parent exists, it is refused,
/// named in the error.
#[test]
#[serial]
fn a_recorded_parent_gone_with_a_reboot_holds_no_engine_back() {
    require_root();
    let home = EngineHome::new();
    // The data dir, as an earlier agent made it.
    home.open().give_back_cgroups();
    let state = StateDb::open(&home.data_dir().state_db()).unwrap();
    let alloc_id = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
    let job = jobspec::builtin_default();
    state
        .put_alloc(&taskgate_engine::state::AllocRecord {
            alloc_id: alloc_id.into(),
            group: job.groups[0].name.clone(),
            job,
            alloc_dir: home.data_dir().alloc(alloc_id),
            desired: DesiredStatus::Run,
            client: ClientStatus::Running,
            finished_at_ms: None,
            stop_sent: false,
        })
        .unwrap();
    drop(state);
    let elsewhere = common::test_cgroup_parent(&format!("elsewhere-{}", std::process::id()));
    let recorded = home.data_dir().cgroup_parent_file();
    std::fs::write(&recorded, format!("{elsewhere}\n")).unwrap();
    // Still there: refused.
    let made: Vec<PathBuf> = (common::cgroup_mounts().into_iter())
        .map(|m| m.join(elsewhere.as_str().trim_start_matches('/')))
        .collect();
    for dir in &made {
        std::fs::create_dir(dir).unwrap();
    }
    let while_there = Engine::open(home.config()).err().map(|e| e.to_string());
    for dir in &made {
        std::fs::remove_dir(dir).unwrap();
    }
    assert!(
        while_there
            .as_deref()
            .is_some_and(|e| e.contains(elsewhere.as_str())),
        "{while_there:?}"
    );
    // Gone: taken.
    let once_gone = Engine::open(home.config()).map(|engine| engine.give_back_cgroups());
    let recorded_now = std::fs::read_to_string(&recorded).unwrap();
    let given = home.cgroup_parent.clone();
    home.finish(&[]);
    assert!(
        once_gone.is_ok(),
        "{:?}",
        once_gone.err().map(|e| e.to_string())
    );
    assert_eq!(recorded_now.trim(), given.as_str());
}
