//! The agent as its users run it, through the command line: `taskgate
//! agent` killed (SIGTERM, SIGKILL) under running tasks and started again;
//! `taskgate run` submitting to it or running in the foreground; `stop`,
//! `status`, `logs -f` and `drain` beside it. Every test checks that the
//! agent touched no cgroup outside its own parent and left nothing. Run as
//! root: `cargo test --features privileged --test agent -- --test-threads=1`.

mod common;

use common::EngineHome;
use nix::sys::signal::Signal;
use rstest::rstest;
use serial_test::serial;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

/// Hang safety net for one step (a line printed, a process exit), scaled
/// to the machine's speed; never a synchronisation device.
fn idle() -> Duration {
    taskgate_faults::patience::step()
}

/// A service task that runs until it is told to stop.
const HOLD_JOB: &str = r#"
job "hold" {
  type = "service"
  group "g" {
    task "web" {
      driver = "exec"
      user   = "root"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo web up; sleep 3600 & wait"]
      }
    }
  }
}
"#;

/// Two service tasks: `echo` prints `got LINE` for each line written to
/// its FIFO `local/in`, `idle` only waits; both run until stopped.
const ECHO_JOB: &str = r#"
job "echo" {
  type = "service"
  group "g" {
    task "echo" {
      driver = "exec"
      user   = "root"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; mkfifo /local/in; echo ready; while true; do read line < /local/in && echo \"got $line\"; done"]
      }
    }
    task "idle" {
      driver = "exec"
      user   = "root"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo idle up; sleep 3600 & wait"]
      }
    }
  }
}
"#;

/// A service task that runs until stopped, and a poststop task that ends
/// only once a line (or EOF) comes through the FIFO `alloc/gate`, which
/// the test makes.
const GATED_JOB: &str = r#"
job "gated" {
  type = "service"
  group "g" {
    task "web" {
      driver = "exec"
      user   = "root"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; sleep 3600 & wait"]
      }
    }
    task "last" {
      driver = "exec"
      user   = "root"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "read line < /alloc/gate; echo gate passed"]
      }
    }
  }
}
"#;

/// A batch job that completes on its own.
const BATCH_JOB: &str = r#"
job "once" {
  type = "batch"
  group "g" {
    task "hello" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello from the agent"]
      }
    }
  }
}
"#;

/// A `taskgate` process that keeps running (an agent, a foreground `run`,
/// a `logs -f`), its stdout and stderr read line by line.
struct Running {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

fn read_lines(pipe: impl Read + Send + 'static, send: Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                return;
            }
        }
    });
}

impl Running {
    fn start(home: &EngineHome, args: &[&str]) -> Running {
        Running::spawn(taskgate(home, args))
    }

    fn spawn(mut cmd: Command) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn taskgate");
        let (send, lines) = channel();
        read_lines(child.stdout.take().expect("piped"), send.clone());
        read_lines(child.stderr.take().expect("piped"), send);
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// An agent serving `home`, once it says so.
    fn agent(home: &EngineHome) -> Running {
        let mut args = vec!["agent"];
        let agent_args = home.agent_args();
        args.extend(agent_args.iter().map(String::as_str));
        let mut agent = Running::start(home, &args);
        agent.expect_line(&["agent serving"]);
        agent
    }

    fn printed(&self) -> String {
        self.seen.join("\n")
    }

    /// The next line printed; `waiting_for` says what for, should none come.
    fn next_line(&mut self, waiting_for: &dyn std::fmt::Debug) -> String {
        match self.lines.recv_timeout(idle()) {
            Ok(line) => {
                self.seen.push(line.clone());
                line
            }
            Err(RecvTimeoutError::Timeout) => panic!(
                "no line with {waiting_for:?} for {:?}; printed:\n{}",
                idle(),
                self.printed()
            ),
            Err(RecvTimeoutError::Disconnected) => panic!(
                "taskgate exited ({:?}) before printing {waiting_for:?}; printed:\n{}",
                self.child.wait(),
                self.printed()
            ),
        }
    }

    /// Reads lines until one contains every word of `words`; returns it.
    fn expect_line(&mut self, words: &[&str]) -> String {
        loop {
            let line = self.next_line(&words);
            if words.iter().all(|w| line.contains(w)) {
                return line;
            }
        }
    }

    /// Reads lines until each of `wanted` (a line's words) came, in any order.
    fn expect_lines(&mut self, wanted: &[&[&str]]) {
        let mut missing = wanted.to_vec();
        while !missing.is_empty() {
            let line = self.next_line(&missing);
            missing.retain(|words| !words.iter().all(|w| line.contains(w)));
        }
    }

    /// Reads every line up to the end of its output, then its exit status.
    fn wait_for_exit(&mut self) -> std::process::ExitStatus {
        self.exit_status()
            .unwrap_or_else(|| panic!("taskgate did not exit; printed:\n{}", self.printed()))
    }

    /// [`Running::wait_for_exit`], or `None` if it printed nothing and
    /// went on for a whole idle step.
    fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        loop {
            match self.lines.recv_timeout(idle()) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => return None,
            }
        }
        Some(self.child.wait().expect("wait for taskgate"))
    }

    /// Sends `signal` and waits for the process to exit.
    fn signal_and_wait(&mut self, signal: Signal) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signal taskgate");
        self.wait_for_exit()
    }
}

impl Drop for Running {
    /// A failing test leaves no agent behind (a passing one waited for it).
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `taskgate ARGS --data-dir <home>`.
fn taskgate(home: &EngineHome, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_taskgate"));
    cmd.args(args)
        .arg("--data-dir")
        .arg(home.data_dir().path())
        .env("RUST_BACKTRACE", "0")
        .env_remove("TASKGATE_LOG")
        .env_remove(taskgate_faults::FAULTS_ENV)
        .env_remove(taskgate_faults::FAULT_LOG_ENV)
        .env_remove(taskgate_executor::FAILPOINTS_ENV)
        .stdin(Stdio::null());
    cmd
}

/// Runs a short `taskgate` command to its end (with the safety net).
fn taskgate_output(home: &EngineHome, args: &[&str]) -> Output {
    output_to(home, args, Stdio::piped())
}

/// [`taskgate_output`], its standard output sent to `stdout`.
fn output_to(home: &EngineHome, args: &[&str], stdout: Stdio) -> Output {
    let child = taskgate(home, args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("run taskgate");
    let pid = child.id();
    let (send, done) = channel();
    std::thread::spawn(move || send.send(child.wait_with_output()));
    match done.recv_timeout(idle()) {
        Ok(out) => out.expect("taskgate's output"),
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL);
            panic!("taskgate {args:?} hung")
        }
    }
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A command that must succeed; its stdout.
fn ok(home: &EngineHome, args: &[&str]) -> String {
    let out = taskgate_output(home, args);
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "taskgate {args:?}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
}

/// A command that must fail; its stderr.
fn refused(home: &EngineHome, args: &[&str]) -> String {
    let out = taskgate_output(home, args);
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "taskgate {args:?} succeeded:\n{stdout}"
    );
    stderr
}

fn write_job(home: &EngineHome, name: &str, text: &str) -> PathBuf {
    let path = home.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The alloc id from `==> alloc <id> of job ...`.
fn placed_alloc(printed: &str) -> String {
    let line = printed
        .lines()
        .find(|l| l.starts_with("==> alloc ") && l.ends_with(" placed"))
        .unwrap_or_else(|| panic!("no alloc placed in:\n{printed}"));
    line.split_whitespace().nth(2).unwrap().to_string()
}

/// `taskgate run JOB` with the home's task root and cgroup parent.
fn run_args<'a>(job: &'a Path, agent_args: &'a [String], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", job.to_str().unwrap()];
    args.extend(extra);
    args.extend(agent_args.iter().map(String::as_str));
    args
}

/// `taskgate status --json`, parsed: the alloc `alloc_id`.
fn alloc_status(home: &EngineHome, alloc_id: &str) -> serde_json::Value {
    let json: serde_json::Value =
        serde_json::from_str(&ok(home, &["status", "--json"])).expect("status --json");
    json.as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == alloc_id)
        .unwrap_or_else(|| panic!("no alloc {alloc_id} in {json:#}"))
        .clone()
}

fn task_json<'a>(alloc: &'a serde_json::Value, task: &str) -> &'a serde_json::Value {
    alloc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == task)
        .unwrap_or_else(|| panic!("no task {task} in {alloc:#}"))
}

/// How many of the task's recorded events are of `kind`.
fn events_of(task: &serde_json::Value, kind: &str) -> usize {
    let events = task["events"].as_array().unwrap();
    events.iter().filter(|e| e["kind"] == kind).count()
}

/// `taskgate status` reads while a foreground `taskgate run` holds the
/// state database.
#[test]
#[serial]
fn status_reads_while_an_agent_runs() {
    let home = EngineHome::new();
    let job = write_job(&home, "job.hcl", HOLD_JOB);
    let agent_args = home.agent_args();
    let mut run = Running::start(&home, &run_args(&job, &agent_args, &[]));
    let alloc = placed_alloc(&run.expect_line(&["==> alloc", "placed"]));
    run.expect_line(&["web", "Started"]);

    // Issue 22 item 4: status opened the state database itself, which
    // redb's lock refused ("Database already open") while the agent held it.
    let stdout = ok(&home, &["status"]);
    assert!(
        stdout.contains(&format!("ID            = {alloc}")),
        "{stdout}"
    );
    // The task's record is written before its event is streamed; the
    // alloc's client status follows a moment later, so it is not asked.
    assert!(stdout.contains("web            running"), "{stdout}");

    ok(&home, &["stop", &alloc]);
    assert!(run.wait_for_exit().success(), "{}", run.printed());
    home.finish(&[alloc]);
}

/// An agent whose `--user` (the tasks' default user) does not exist on the
/// host refuses to start, as it refuses a `--chroot-env` no task could
/// start with: otherwise it served, and every task without a `user` of its
/// own failed at its first start.
#[test]
#[serial]
fn an_agent_refuses_a_default_user_the_host_lacks() {
    let home = EngineHome::new();
    let mut args = vec!["agent", "--user", "no-such-user-xyz"];
    let agent_args = home.agent_args();
    args.extend(agent_args.iter().map(String::as_str));
    let mut agent = Running::start(&home, &args);
    let served = loop {
        match agent.lines.recv_timeout(idle()) {
            Ok(line) if line.contains("agent serving") => break true,
            Ok(line) => agent.seen.push(line),
            Err(RecvTimeoutError::Disconnected) => break false,
            Err(RecvTimeoutError::Timeout) => panic!("agent hung:\n{}", agent.printed()),
        }
    };
    if served {
        ok(&home, &["drain"]);
    }
    let status = agent.wait_for_exit();
    home.finish(&[]);
    assert!(!served, "the agent served:\n{}", agent.printed());
    assert!(!status.success(), "{}", agent.printed());
    assert!(
        agent
            .printed()
            .contains("--user: no user \"no-such-user-xyz\" on this host"),
        "{}",
        agent.printed()
    );
}

/// A `run` submitted to an agent has its job's users checked by the agent,
/// against the agent's default user, not against the run's own `--user`,
/// which the agent ignores (and the run says so).
#[test]
#[serial]
fn a_submitted_run_checks_users_against_the_agents_default() {
    let home = EngineHome::new();
    let job = write_job(
        &home,
        "job.hcl",
        &HOLD_JOB.replace("      user   = \"root\"\n", ""),
    );
    let agent_args = home.agent_args();
    let mut agent = Running::agent(&home);
    let out = taskgate_output(
        &home,
        &run_args(
            &job,
            &agent_args,
            &["--detach", "--user", "no-such-user-xyz"],
        ),
    );
    let (stdout, stderr) = text(&out);
    // The agent itself refuses a task whose own user the host lacks.
    let stranger = write_job(
        &home,
        "stranger.hcl",
        &HOLD_JOB.replace("user   = \"root\"", "user   = \"no-such-user-xyz\""),
    );
    let refused_stranger = refused(&home, &run_args(&stranger, &agent_args, &["--detach"]));
    assert!(
        refused_stranger.contains("task \"web\": user \"no-such-user-xyz\" does not exist"),
        "{refused_stranger}"
    );
    ok(&home, &["drain"]);
    assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    let placed = out.status.success().then(|| placed_alloc(&stdout));
    home.finish(&placed.into_iter().collect::<Vec<_>>());
    assert!(out.status.success(), "refused: {stderr}");
    let warned = stderr.lines().find(|l| l.starts_with("warning:"));
    assert!(
        warned.is_some_and(|w| w.contains("--user") && w.contains("ignored")),
        "{stderr}"
    );
}

/// A foreground run that ends with its own allocation names the ones other
/// commands placed in it, which run on with no agent until the next one
/// restores them, rather than leave them unsupervised without a word.
#[test]
#[serial]
fn a_foreground_run_names_the_allocations_it_leaves_running() {
    let home = EngineHome::new();
    let job = write_job(&home, "job.hcl", HOLD_JOB);
    let agent_args = home.agent_args();
    let mut run = Running::start(&home, &run_args(&job, &agent_args, &[]));
    let own = placed_alloc(&run.expect_line(&["==> alloc", "placed"]));
    run.expect_line(&["web", "Started"]);
    let other = placed_alloc(&ok(&home, &run_args(&job, &agent_args, &["--detach"])));
    ok(&home, &["stop", "--detach", &own]);
    assert!(run.wait_for_exit().success(), "{}", run.printed());
    let mut agent = Running::agent(&home);
    ok(&home, &["drain"]);
    assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    home.finish(&[own, other.clone()]);
    let told = (run.seen.iter()).find(|line| line.contains("run on with no agent"));
    assert!(
        told.is_some_and(|line| line.contains(&other)),
        "{}",
        run.printed()
    );
}

/// A drain stops what its agent runs; an allocation the agent could not
/// restore (its record damaged, or another version's) runs on, and the
/// drain says so and fails, rather than report every allocation finished.
#[test]
#[serial]
fn a_drain_names_the_allocations_it_could_not_stop() {
    let home = EngineHome::new();
    let job = write_job(&home, "job.hcl", HOLD_JOB);
    let agent_args = home.agent_args();
    let mut agent = Running::agent(&home);
    let alloc = placed_alloc(&ok(&home, &run_args(&job, &agent_args, &["--detach"])));
    agent.signal_and_wait(Signal::SIGKILL);
    let state_db = home.data_dir().state_db();
    let record = {
        let state = taskgate_engine::state::StateDb::open(&state_db).unwrap();
        let record = state.alloc(&alloc).unwrap().expect("the alloc's record");
        state.put_raw_alloc(&alloc, b"not a record").unwrap();
        record
    };
    let mut agent = Running::agent(&home);
    let drain = taskgate_output(&home, &["drain"]);
    let (stdout, stderr) = text(&drain);
    assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    // Mended, so that an agent can stop what still runs.
    (taskgate_engine::state::StateDb::open(&state_db).unwrap())
        .put_alloc(&record)
        .unwrap();
    let mut agent = Running::agent(&home);
    ok(&home, &["drain"]);
    assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    home.finish(std::slice::from_ref(&alloc));
    assert!(!drain.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains(&alloc) && stderr.contains("not stopped"),
        "{stdout}{stderr}"
    );
}

/// A task that, told to stop, ends only once its FIFO `local/gate` is
/// written: its stop takes as long as the test wants.
const SLOW_STOP_JOB: &str = r#"
job "slow" {
  type = "service"
  group "g" {
    task "web" {
      driver       = "exec"
      user         = "root"
      kill_timeout = "1h"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'read line < /local/gate; exit 0' INT TERM; mkfifo /local/gate; echo web up; sleep 3600 & wait"]
      }
    }
  }
}
"#;

/// A second Ctrl-C ends a submitted run at once: the agent carries the
/// stop the first one sent through without it (the run used to say
/// "already stopping" and wait out the tasks' stop, however long).
#[test]
#[serial]
fn a_second_interrupt_ends_a_submitted_run_at_once() {
    let home = EngineHome::new();
    let job = write_job(&home, "job.hcl", SLOW_STOP_JOB);
    let agent_args = home.agent_args();
    let mut agent = Running::agent(&home);
    let mut run = Running::start(&home, &run_args(&job, &agent_args, &[]));
    let alloc = placed_alloc(&run.expect_line(&["==> alloc", "placed"]));
    run.expect_line(&["web", "Started"]);
    let pid = nix::unistd::Pid::from_raw(run.child.id() as i32);
    nix::sys::signal::kill(pid, Signal::SIGINT).unwrap();
    run.expect_line(&["web", "Killing"]);
    let ended_at_once = loop {
        nix::sys::signal::kill(pid, Signal::SIGINT).unwrap();
        match run.lines.recv_timeout(idle()) {
            Ok(line) if line.contains("already stopping") => break false,
            Ok(line) => run.seen.push(line),
            Err(RecvTimeoutError::Disconnected) => break true,
            Err(RecvTimeoutError::Timeout) => panic!("run hung:\n{}", run.printed()),
        }
    };
    // The task ends once its gate is written.
    let gate = home.data_dir().alloc(&alloc).join("web/local/gate");
    std::fs::write(&gate, "go\n").unwrap();
    let status = run.wait_for_exit();
    ok(&home, &["drain"]);
    assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    home.finish(std::slice::from_ref(&alloc));
    assert!(ended_at_once, "{}", run.printed());
    assert_eq!(status.code(), Some(130), "{}", run.printed());
}

/// Ctrl-C stops a run's allocation and waits for it, and the run then
/// fails as interrupted, in the foreground and submitted to an agent
/// alike: a script (or a shell's loop) must not take a run cut short for
/// one that did its work.
#[rstest]
#[case::foreground(false)]
#[case::submitted(true)]
#[serial]
fn an_interrupted_run_stops_its_allocation_and_fails(#[case] submitted: bool) {
    let home = EngineHome::new();
    let job = write_job(&home, "job.hcl", HOLD_JOB);
    let agent_args = home.agent_args();
    let mut agent = submitted.then(|| Running::agent(&home));
    let mut run = Running::start(&home, &run_args(&job, &agent_args, &[]));
    let alloc = placed_alloc(&run.expect_line(&["==> alloc", "placed"]));
    run.expect_line(&["web", "Started"]);

    let status = run.signal_and_wait(Signal::SIGINT);
    if let Some(agent) = &mut agent {
        ok(&home, &["drain"]);
        assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    }
    home.finish(std::slice::from_ref(&alloc));
    let printed = run.printed();
    assert!(
        printed.contains(&format!("==> alloc {alloc} finished: Complete")),
        "{printed}"
    );
    assert_eq!(
        status.code(),
        Some(1),
        "a run Ctrl-C stopped exited {status}:\n{printed}"
    );
    assert!(
        printed.contains("Error: interrupted: the allocation was stopped"),
        "{printed}"
    );
}

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

    let mut agent = Running::agent(&home);
    common::write_fifo(&fifo, "after\n");
    echo.expect_line(&["got after"]);
    assert_eq!(procs("echo"), echo_procs, "echo's processes changed");
    assert_eq!(procs("idle"), idle_procs, "idle's processes changed");

    let stopped = ok(&home, &["stop", &alloc]);
    assert!(
        stopped.contains("==> alloc finished: Complete"),
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
    assert!(
        agent.signal_and_wait(Signal::SIGTERM).success(),
        "{}",
        agent.printed()
    );
    home.finish(std::slice::from_ref(&alloc));
    common::assert_only_its_subtree_was_touched(
        &cgroups_before,
        &common::cgroup_snapshot(),
        &parent,
        &[alloc],
    );
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
        printed.contains(&format!("==> alloc {once} finished: Complete")),
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

/// `logs -f` with no agent to follow waits for one, and reads the record
/// again each time it finds none: an allocation an agent finished just
/// before it exited (its follower cut off, or reached too late) ends the
/// logs, which used to wait for good for an agent that would never come.
#[test]
#[serial]
fn logs_follow_ends_with_an_allocation_no_agent_is_left_to_report() {
    let home = EngineHome::new();
    let hold = write_job(&home, "hold.hcl", HOLD_JOB);
    let agent_args = home.agent_args();
    let mut agent = Running::agent(&home);
    let held = placed_alloc(&ok(&home, &run_args(&hold, &agent_args, &["--detach"])));
    let mut follower = Running::start(&home, &["logs", "-f", &held]);
    follower.expect_line(&["web up"]);
    assert!(
        agent.signal_and_wait(Signal::SIGTERM).success(),
        "{}",
        agent.printed()
    );
    // What an agent that finished the allocation and exited at once
    // leaves: a terminal record, and the socket it bound in the run dir,
    // which the follower wakes for and finds no agent behind.
    let state_db = home.data_dir().state_db();
    let running = {
        let state = taskgate_engine::state::StateDb::open(&state_db).unwrap();
        let running = state.alloc(&held).unwrap().expect("the record");
        let finished = taskgate_engine::state::AllocRecord {
            client: taskgate_engine::ClientStatus::Complete,
            ..running.clone()
        };
        state.put_alloc(&finished).unwrap();
        running
    };
    drop(std::os::unix::net::UnixListener::bind(home.data_dir().control_socket()).unwrap());
    let ended = follower.exit_status();
    drop(follower);
    // The task still runs: a new agent restores it, and stops it.
    let state = taskgate_engine::state::StateDb::open(&state_db).unwrap();
    state.put_alloc(&running).unwrap();
    drop(state);
    let mut agent = Running::agent(&home);
    assert!(ok(&home, &["stop", &held]).contains("finished: Complete"));
    assert!(
        agent.signal_and_wait(Signal::SIGTERM).success(),
        "{}",
        agent.printed()
    );
    home.finish(std::slice::from_ref(&held));
    assert!(
        ended.is_some_and(|status| status.success()),
        "logs -f still waits ({ended:?})"
    );
}

/// `taskgate stop` prints the stop's events from its first: the task's
/// "Killing" and "Killed" before the end. (It followed the alloc only once
/// the stop was delivered, so what came before its follow could be missed.)
#[test]
#[serial]
fn stop_prints_the_stops_events_from_the_first() {
    let home = EngineHome::new();
    let hold = write_job(&home, "hold.hcl", HOLD_JOB);
    let agent_args = home.agent_args();
    let mut agent = Running::agent(&home);
    let mut run = Running::start(&home, &run_args(&hold, &agent_args, &[]));
    let held = placed_alloc(&run.expect_line(&["==> alloc", "placed"]));
    run.expect_line(&["web", "Started"]);
    let stopped = ok(&home, &["stop", &held]);
    assert!(run.wait_for_exit().success(), "{}", run.printed());
    let drained = ok(&home, &["drain"]);
    assert!(
        agent.wait_for_exit().success(),
        "{drained}: {}",
        agent.printed()
    );
    home.finish(&[held]);
    let printed = |kind: &str| {
        stopped
            .lines()
            .any(|l| l.contains("web") && l.contains(kind))
    };
    assert!(printed("Killing") && printed("Killed"), "{stopped}");
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

/// A foreground `run` is the agent while it runs: a `drain` sent to it
/// must finish, every allocation with it, before it exits, even once its
/// own allocation has finished. Another allocation's poststop task, held
/// on a FIFO, keeps the drain going after the run's own allocation ended.
/// A signal ends that wait (the drain goes on in the next agent).
#[rstest]
#[case::drained(None)]
#[case::signalled(Some(Signal::SIGTERM))]
#[serial]
fn a_foreground_run_serves_a_drain_to_its_end(#[case] signal: Option<Signal>) {
    let home = EngineHome::new();
    let hold = write_job(&home, "hold.hcl", HOLD_JOB);
    let gated = write_job(&home, "gated.hcl", GATED_JOB);
    let agent_args = home.agent_args();
    let mut run = Running::start(&home, &run_args(&hold, &agent_args, &[]));
    let held = placed_alloc(&run.expect_line(&["==> alloc", "placed"]));
    run.expect_line(&["web", "Started"]);
    let other = placed_alloc(&ok(&home, &run_args(&gated, &agent_args, &["--detach"])));
    let gate = home.data_dir().alloc(&other).join("alloc/gate");
    nix::unistd::mkfifo(&gate, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut drain = Running::start(&home, &["drain"]);
    // The gate is shut: the drain cannot end before the run's own
    // allocation has.
    let waited = loop {
        match run.lines.recv_timeout(idle()) {
            Ok(line) if line.contains("waiting for the drain") => break true,
            Ok(line) => run.seen.push(line),
            Err(RecvTimeoutError::Disconnected) => break false,
            Err(RecvTimeoutError::Timeout) => panic!("run hung:\n{}", run.printed()),
        }
    };
    let signalled = signal
        .filter(|_| waited)
        .map(|signal| run.signal_and_wait(signal));
    // What a run that exited left, a new agent restores and drains.
    let agent = (!waited || signalled.is_some()).then(|| Running::agent(&home));
    let (opened, poststop_reads) = channel();
    std::thread::spawn(move || {
        let _ = opened.send(std::fs::OpenOptions::new().write(true).open(gate));
    });
    drop(
        (poststop_reads.recv_timeout(idle()))
            .expect("the poststop task never opened its gate")
            .unwrap(),
    );
    if let Some(mut agent) = agent {
        ok(&home, &["drain"]);
        assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    }
    let drained = drain.wait_for_exit();
    let run_status = run.wait_for_exit();
    home.finish(&[held, other]);
    assert!(
        waited,
        "the run exited before the drain ended; drain {drained}: {}\nrun {run_status}: {}",
        drain.printed(),
        run.printed()
    );
    assert!(run_status.success(), "{}", run.printed());
    if signalled.is_some() {
        assert!(
            run.printed().contains("exiting before the drain ended"),
            "{}",
            run.printed()
        );
        // Its client is not told the drain ended: it did not, there.
        assert!(!drained.success(), "{}", drain.printed());
        return;
    }
    assert!(drained.success(), "{}", drain.printed());
    assert!(
        drain.printed().contains("every allocation has finished"),
        "{}",
        drain.printed()
    );
}
