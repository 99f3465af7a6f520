//! The agent on a host's cgroups, through the command line: `taskgate
//! agent` killed (SIGTERM, SIGKILL) under running tasks and started again,
//! reattaching to them; its cgroup parent, chosen, delegated by systemd and
//! given back; its readiness under systemd. Every test checks that the
//! agent touched no cgroup outside its own parent and left nothing. These
//! run in the CI's cgroup v2 guest too, and in its v1 guest where the host
//! is not v1 (what each command tells its user is in tests/commands.rs).
//! Run as root:
//! `cargo test --features privileged --test agent -- --test-threads=1`.

mod common;

use common::cli::*;
use common::EngineHome;
use nix::sys::signal::Signal;
use rstest::rstest;
use serial_test::serial;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The agent dies under two running tasks (SIGTERM: it leaves them, as
/// Nomad's client does; SIGKILL: it could not say goodbye). The tasks run
/// on and their logs keep flowing with no agent at all; a new agent
/// reattaches to both, starts neither again (the same processes are in
/// their cgroups), and stops them on request; `logs -f` follows throughout
/// and ends with the allocation. Nothing outside the agent's cgroup parent
/// changed, and nothing is left.
#[rstest]
#[case::sigterm(Signal::SIGTERM)]
#[case::sigkill(Signal::SIGKILL)]
#[serial]
fn a_new_agent_reattaches_to_every_task_of_a_killed_one(#[case] signal: Signal) {
    let home = EngineHome::new();
    let cgroups_before = common::cgroup_snapshot();
    let job = write_job(&home, "job.hcl", ECHO_JOB);
    let agent_args = home.agent_args();
    let parent = home.cgroup_parent.clone();
    let mut agent = Running::agent(&home);
    // Submitted and followed until both tasks started (an event is streamed
    // once it is persisted), then detached with a SIGTERM: the alloc is the
    // agent's.
    let mut run = Running::start(&home, &run_args(&job, &agent_args, &[]));
    let alloc = placed_alloc(&run.expect_line(&["==> alloc", "placed"]));
    run.expect_lines(&[&["echo", "Started"], &["idle", "Started"]]);
    assert!(
        run.signal_and_wait(Signal::SIGTERM).success(),
        "{}",
        run.printed()
    );
    assert!(run.printed().contains("detached"), "{}", run.printed());

    let mut echo = Running::start(&home, &["logs", "-f", &alloc, "echo"]);
    let mut idle_task = Running::start(&home, &["logs", "-f", &alloc, "idle"]);
    echo.expect_line(&["ready"]);
    idle_task.expect_line(&["idle up"]);
    let fifo = home.data_dir().alloc(&alloc).join("echo/local/in");
    common::write_fifo(&fifo, "before\n");
    echo.expect_line(&["got before"]);
    let procs = |task| common::task_cgroup_procs(&parent, &alloc, task);
    let (echo_procs, idle_procs) = (procs("echo"), procs("idle"));

    let status = agent.signal_and_wait(signal);
    match signal {
        Signal::SIGTERM => assert!(status.success(), "{status}: {}", agent.printed()),
        _ => assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        ),
    }
    // No agent: the executors keep the tasks and their logs going, and
    // status reads the database itself.
    common::write_fifo(&fifo, "without an agent\n");
    echo.expect_line(&["got without an agent"]);
    let orphaned = alloc_status(&home, &alloc);
    for task in ["echo", "idle"] {
        assert_eq!(
            task_json(&orphaned, task)["state"],
            "running",
            "{orphaned:#}"
        );
    }

    let agent = Running::agent(&home);
    common::write_fifo(&fifo, "after\n");
    echo.expect_line(&["got after"]);
    assert_eq!(procs("echo"), echo_procs, "echo's processes changed");
    assert_eq!(procs("idle"), idle_procs, "idle's processes changed");

    let stopped = ok(&home, &["stop", &alloc]);
    assert!(
        stopped.contains("==> alloc finished: complete"),
        "{stopped}"
    );
    for follower in [&mut echo, &mut idle_task] {
        assert!(follower.wait_for_exit().success(), "{}", follower.printed());
    }
    let finished = alloc_status(&home, &alloc);
    assert_eq!(finished["client_status"], "complete", "{finished:#}");
    // Reattached, never started again: one start, one restore, each task.
    for task in ["echo", "idle"] {
        let t = task_json(&finished, task);
        assert_eq!(t["restarts"], 0, "{finished:#}");
        assert_eq!(
            events_of(t, "Started"),
            1,
            "{task} started again: {finished:#}"
        );
        assert_eq!(
            events_of(t, "Restored"),
            1,
            "{task} not reattached: {finished:#}"
        );
    }
    let readies = echo.seen.iter().filter(|l| *l == "ready").count();
    assert_eq!(readies, 1, "echo ran again: {}", echo.printed());
    end_and_check(agent, home, &cgroups_before, alloc);
}

/// With an agent running, `taskgate run` submits to it and follows the
/// allocation to its end and its logs; stop, logs and restart name what
/// they cannot find; a drain ends the agent, which gives its cgroup parent
/// back.
#[test]
#[serial]
fn run_submits_to_a_running_agent_and_a_drain_ends_it() {
    let home = EngineHome::new();
    let cgroups_before = common::cgroup_snapshot();
    let batch = write_job(&home, "batch.hcl", BATCH_JOB);
    let hold = write_job(&home, "hold.hcl", HOLD_JOB);
    let agent_args = home.agent_args();
    let parent = home.cgroup_parent.clone();
    let mut agent = Running::agent(&home);

    let printed = ok(&home, &run_args(&batch, &agent_args, &[]));
    let once = placed_alloc(&printed);
    assert!(printed.contains("hello      Started"), "{printed}");
    assert!(
        printed.contains(&format!("==> alloc {once} finished: complete")),
        "{printed}"
    );
    assert!(printed.contains("hello from the agent"), "{printed}");
    assert_eq!(
        ok(&home, &["logs", &once[..8], "hello"]),
        "hello from the agent\n"
    );
    assert_eq!(ok(&home, &["logs", &once, "hello", "--stderr"]), "");
    // Logs of a task that ran once end with it.
    assert_eq!(ok(&home, &["logs", "-f", &once]), "hello from the agent\n");

    let held = placed_alloc(&ok(&home, &run_args(&hold, &agent_args, &["--detach"])));
    // A user who may not reach the agent's socket is told to use sudo, not
    // that no agent runs.
    let as_nobody = {
        use std::os::unix::process::CommandExt;
        let mut cmd = taskgate(&home, &["run", "--detach"]);
        cmd.uid(65534).gid(65534);
        cmd.output().expect("run taskgate as nobody")
    };
    let (_, refused_nobody) = text(&as_nobody);
    assert!(
        !as_nobody.status.success() && refused_nobody.contains("run it with sudo"),
        "{refused_nobody}"
    );
    for (args, says) in [
        (
            vec!["logs", "no-such-alloc", "web"],
            "no allocation \"no-such-alloc\"",
        ),
        (
            vec!["logs", &held, "db"],
            "has no task \"db\" (its tasks: web)",
        ),
        (
            vec!["stop", "no-such-alloc"],
            "no allocation \"no-such-alloc\"",
        ),
        (vec!["stop", &once], "has already finished (complete)"),
        (vec!["restart", &once], "the allocation finished"),
    ] {
        let stderr = refused(&home, &args);
        assert!(stderr.contains(says), "taskgate {args:?}: {stderr}");
    }

    let drained = ok(&home, &["drain"]);
    assert!(
        drained.contains("every allocation has finished"),
        "{drained}"
    );
    assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    // A reader that went away (`logs | head`) ends `logs` quietly, as it
    // ends `cat`.
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    let cut = output_to(&home, &["logs", &once, "hello"], Stdio::from(write_end));
    assert!(
        cut.status.success() && cut.stderr.is_empty(),
        "{}: {}",
        cut.status,
        text(&cut).1
    );
    let held_status = alloc_status(&home, &held);
    assert_eq!(held_status["desired_status"], "stop", "{held_status:#}");
    assert_eq!(held_status["client_status"], "complete", "{held_status:#}");
    assert!(
        refused(&home, &["drain"]).contains("no agent is running"),
        "a drained agent is gone"
    );
    home.finish(&[once.clone(), held.clone()]);
    common::assert_only_its_subtree_was_touched(
        &cgroups_before,
        &common::cgroup_snapshot(),
        &parent,
        &[once, held],
    );
}

/// An agent told to go (SIGTERM, as `systemctl restart` sends it) while
/// it carries a request out answers it before it exits: a restart still
/// waiting for its task to go down (a task that takes its kill signal and goes on,
/// with ten minutes to go) is told it was left unfinished, not met with a
/// closed connection. The task runs on for the next agent, which stops it.
#[test]
#[serial]
fn an_agent_told_to_go_answers_the_request_it_carries_out() {
    let home = EngineHome::new();
    let cgroups_before = common::cgroup_snapshot();
    let job = write_job(&home, "stubborn.hcl", STUBBORN_JOB);
    let agent_args = home.agent_args();
    let mut agent = Running::agent(&home);
    let alloc = placed_alloc(&ok(&home, &run_args(&job, &agent_args, &["--detach"])));
    let mut web = Running::start(&home, &["logs", "-f", &alloc, "web"]);
    web.expect_line(&["web up"]);
    let mut restart = Running::start(&home, &["restart", &alloc]);
    // The restart's signal reached the task: the agent took the request,
    // and waits for the task to go down.
    web.expect_line(&["got signal 1"]);
    assert!(
        agent.signal_and_wait(Signal::SIGTERM).success(),
        "{}",
        agent.printed()
    );
    let restarted = restart.wait_for_exit();
    let told = restart.printed();
    // Judged once the task is stopped: a failing run leaves nothing either.
    let answered = !restarted.success()
        && told.contains("the agent exited (SIGTERM) before it carried this request out");

    let agent = Running::agent(&home);
    let stopped = ok(&home, &["stop", &alloc]);
    assert!(
        stopped.contains("==> alloc finished: complete"),
        "{stopped}"
    );
    web.expect_line(&["got signal 2"]);
    assert!(web.wait_for_exit().success(), "{}", web.printed());
    end_and_check(agent, home, &cgroups_before, alloc);
    assert!(
        answered,
        "`restart` was not told the agent left it unfinished: {told}"
    );
}

/// Tells the agent to go, then checks that `alloc` left nothing and that
/// no cgroup outside the home's parent changed since `cgroups_before`.
fn end_and_check(
    mut agent: Running,
    home: EngineHome,
    cgroups_before: &common::CgroupSnapshot,
    alloc: String,
) {
    assert!(
        agent.signal_and_wait(Signal::SIGTERM).success(),
        "{}",
        agent.printed()
    );
    let parent = home.cgroup_parent.clone();
    home.finish(std::slice::from_ref(&alloc));
    common::assert_only_its_subtree_was_touched(
        cgroups_before,
        &common::cgroup_snapshot(),
        &parent,
        &[alloc],
    );
}

/// A service task that takes its first kill signal and goes on, and ends
/// on every later one; ten minutes to go down before it is killed. Its
/// count is kept in its dir: a restored agent may carry the restart the
/// first signal began through (its executor's peek doomed the attempt),
/// and the stop then reaches the task's next run.
const STUBBORN_JOB: &str = r#"
job "stubborn" {
  type = "service"
  group "g" {
    task "web" {
      driver       = "exec"
      user         = "root"
      kill_timeout = "10m"
      config {
        command = "/bin/sh"
        args    = ["-c", "count() { n=$(cat /local/signals 2>/dev/null || echo 0); n=$((n+1)); echo $n > /local/signals; echo got signal $n; [ $n -lt 2 ] || exit 0; }; trap count INT TERM; echo web up; while true; do sleep 3600 & wait; done"]
      }
    }
  }
}
"#;

/// Under systemd (`Type=notify`) the agent says it is ready once its
/// socket serves, so a unit's start, and a `run` right after it, never
/// race the agent's own start (a `run` that won became a second agent).
#[test]
#[serial]
fn the_agent_tells_systemd_it_is_ready_once_it_serves() {
    let home = EngineHome::new();
    let notify = home.path().join("notify.sock");
    let systemd = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    systemd.set_read_timeout(Some(idle())).unwrap();
    let mut args = vec!["agent"];
    let agent_args = home.agent_args();
    args.extend(agent_args.iter().map(String::as_str));
    let mut cmd = taskgate(&home, &args);
    cmd.env("NOTIFY_SOCKET", &notify);
    let mut agent = Running::spawn(cmd);
    let mut said = [0u8; 64];
    let ready = systemd.recv(&mut said).map(|n| said[..n].to_vec());
    let served = taskgate_engine::control::agent_serves(&home.data_dir()).unwrap();
    assert!(
        agent.signal_and_wait(Signal::SIGTERM).success(),
        "{}",
        agent.printed()
    );
    home.finish(&[]);
    assert!(
        ready.as_deref().is_ok_and(|m| m == b"READY=1") && served,
        "told {ready:?}, serving {served}"
    );
}

/// Where an agent that is given no parent puts its tasks. On v2, in the
/// cgroup systemd delegated to it when it runs in a leaf below that cgroup
/// (`Delegate=yes` with `DelegateSubgroup=`): this test plays systemd,
/// marking a cgroup `trusted.delegate` and starting the agent in its
/// `agent` leaf. The agent enables the controllers there, puts executors
/// and task cgroups below it, and on leaving undoes exactly that: the
/// delegated cgroup and its leaf, which are systemd's, stay. On v1 there is
/// no delegation: the parent is taskgate's own /taskgate.
#[test]
#[serial]
fn an_agent_uses_the_cgroup_systemd_delegated_to_it() {
    let home = EngineHome::new();
    if !Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        let choice = taskgate_executor::auto_parent().expect("auto parent");
        assert_eq!(choice.parent().as_str(), taskgate_executor::DEDICATED_V1);
        return;
    }
    let unit = PathBuf::from("/sys/fs/cgroup").join(format!(
        "taskgate-test-{}.service",
        home.path().file_name().unwrap().to_string_lossy()
    ));
    std::fs::create_dir(&unit).unwrap();
    set_xattr(&unit, "trusted.delegate", "1");
    std::fs::create_dir(unit.join("agent")).unwrap();
    let cgroups_before = common::cgroup_snapshot();
    let delegated = taskgate_executor::CgroupParent::new(&format!(
        "/{}",
        unit.file_name().unwrap().to_string_lossy()
    ))
    .unwrap();

    // As systemd starts a unit's process in its cgroup: before it runs.
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(unit.join("agent/cgroup.procs"))
        .unwrap();
    let chroot = home.chroot_args();
    let mut args = vec!["agent"];
    args.extend(chroot.iter().map(String::as_str));
    let mut cmd = taskgate(&home, &args);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&procs);
    // SAFETY: only write(2), which is async-signal-safe, runs after fork.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut agent = Running::spawn(cmd);
    drop(procs);
    agent.expect_line(&["agent serving"]);
    let printed = agent.printed();
    assert!(printed.contains("delegated by systemd"), "{printed}");

    let hold = write_job(&home, "hold.hcl", HOLD_JOB);
    let alloc = placed_alloc(&ok(&home, &["run", hold.to_str().unwrap(), "--detach"]));
    let mut web = Running::start(&home, &["logs", "-f", &alloc, "web"]);
    web.expect_line(&["web up"]);
    let tasks = common::task_cgroup_procs(&delegated, &alloc, "web");
    assert!(!tasks.is_empty(), "no task in {delegated}");
    let executors = std::fs::read_to_string(unit.join("executors/cgroup.procs")).unwrap();
    assert!(
        !executors.trim().is_empty(),
        "no executor in {}",
        unit.display()
    );
    let enabled = std::fs::read_to_string(unit.join("cgroup.subtree_control")).unwrap();
    for c in ["cpu", "memory", "pids"] {
        assert!(enabled.split_whitespace().any(|e| e == c), "{enabled}");
    }

    assert!(ok(&home, &["drain"]).contains("every allocation has finished"));
    assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    assert!(web.wait_for_exit().success(), "{}", web.printed());
    assert!(
        !unit.join("executors").exists(),
        "the executors' leaf stayed"
    );
    assert_eq!(
        std::fs::read_to_string(unit.join("cgroup.subtree_control"))
            .unwrap()
            .trim(),
        "",
        "the controllers it enabled stayed"
    );
    // Everything else is as before the agent: the unit's cgroup and leaf
    // are the (pretend) systemd's.
    common::assert_only_its_subtree_was_touched(
        &cgroups_before,
        &common::cgroup_snapshot(),
        &home.cgroup_parent,
        std::slice::from_ref(&alloc),
    );
    std::fs::remove_dir(unit.join("agent")).unwrap();
    std::fs::remove_dir(&unit).unwrap();
    home.finish(&[alloc]);
}

fn set_xattr(path: &Path, name: &str, value: &str) {
    let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let cname = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C strings and a value of the length given.
    let rc = unsafe {
        libc::setxattr(
            cpath.as_ptr(),
            cname.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "setxattr {name} on {}", path.display());
}
