//! Running `taskgate` as its users do, for the agent and command tests:
//! a process whose output is read line by line as it runs, one-shot
//! commands and their output, and the jobs they run.

use super::EngineHome;
use nix::sys::signal::Signal;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

/// Hang safety net for one step (a line printed, a process exit), scaled
/// to the machine's speed; never a synchronisation device.
pub fn idle() -> Duration {
    taskgate_faults::patience::step()
}

/// A service task that runs until it is told to stop.
pub const HOLD_JOB: &str = r#"
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
pub const ECHO_JOB: &str = r#"
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
pub const GATED_JOB: &str = r#"
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
pub const BATCH_JOB: &str = r#"
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
pub struct Running {
    pub child: Child,
    pub lines: Receiver<String>,
    pub seen: Vec<String>,
}

pub fn read_lines(pipe: impl Read + Send + 'static, send: Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                return;
            }
        }
    });
}

impl Running {
    pub fn start(home: &EngineHome, args: &[&str]) -> Running {
        Running::spawn(taskgate(home, args))
    }

    pub fn spawn(mut cmd: Command) -> Running {
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
    pub fn agent(home: &EngineHome) -> Running {
        let mut args = vec!["agent"];
        let agent_args = home.agent_args();
        args.extend(agent_args.iter().map(String::as_str));
        let mut agent = Running::start(home, &args);
        agent.expect_line(&["agent serving"]);
        agent
    }

    pub fn printed(&self) -> String {
        self.seen.join("\n")
    }

    /// The next line printed; `waiting_for` says what for, should none come.
    pub fn next_line(&mut self, waiting_for: &dyn std::fmt::Debug) -> String {
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
    pub fn expect_line(&mut self, words: &[&str]) -> String {
        loop {
            let line = self.next_line(&words);
            if words.iter().all(|w| line.contains(w)) {
                return line;
            }
        }
    }

    /// Reads lines until each of `wanted` (a line's words) came, in any order.
    pub fn expect_lines(&mut self, wanted: &[&[&str]]) {
        let mut missing = wanted.to_vec();
        while !missing.is_empty() {
            let line = self.next_line(&missing);
            missing.retain(|words| !words.iter().all(|w| line.contains(w)));
        }
    }

    /// Reads every line up to the end of its output, then its exit status.
    pub fn wait_for_exit(&mut self) -> std::process::ExitStatus {
        self.exit_status()
            .unwrap_or_else(|| panic!("taskgate did not exit; printed:\n{}", self.printed()))
    }

    /// [`Running::wait_for_exit`], or `None` if it printed nothing and
    /// went on for a whole idle step.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
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
    pub fn signal_and_wait(&mut self, signal: Signal) -> std::process::ExitStatus {
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
pub fn taskgate(home: &EngineHome, args: &[&str]) -> Command {
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
pub fn taskgate_output(home: &EngineHome, args: &[&str]) -> Output {
    output_to(home, args, Stdio::piped())
}

/// [`taskgate_output`], its standard output sent to `stdout`.
pub fn output_to(home: &EngineHome, args: &[&str], stdout: Stdio) -> Output {
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

pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A command that must succeed; its stdout.
pub fn ok(home: &EngineHome, args: &[&str]) -> String {
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
pub fn refused(home: &EngineHome, args: &[&str]) -> String {
    let out = taskgate_output(home, args);
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "taskgate {args:?} succeeded:\n{stdout}"
    );
    stderr
}

pub fn write_job(home: &EngineHome, name: &str, text: &str) -> PathBuf {
    let path = home.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The alloc id from `==> alloc <id> of job ...`.
pub fn placed_alloc(printed: &str) -> String {
    let line = printed
        .lines()
        .find(|l| l.starts_with("==> alloc ") && l.ends_with(" placed"))
        .unwrap_or_else(|| panic!("no alloc placed in:\n{printed}"));
    line.split_whitespace().nth(2).unwrap().to_string()
}

/// A `taskgate run` of the job file `job` with `agent_args`, followed until
/// its task `web` started and said it is up: the run, and its alloc's id.
pub fn run_until_started(
    home: &EngineHome,
    job: &Path,
    agent_args: &[String],
) -> (Running, String) {
    let mut run = Running::start(home, &run_args(job, agent_args, &[]));
    let alloc = placed_alloc(&run.expect_line(&["==> alloc", "placed"]));
    run.expect_line(&["web", "Started"]);
    // Its signal trap is set once it says it is up: a Ctrl-C before that
    // reaches a PID 1 with no handler, which the kernel drops, and a kill
    // then waits out the task's whole kill timeout.
    Running::start(home, &["logs", "-f", &alloc]).expect_line(&["web up"]);
    (run, alloc)
}

/// `taskgate run JOB` with the home's task root and cgroup parent.
pub fn run_args<'a>(job: &'a Path, agent_args: &'a [String], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", job.to_str().unwrap()];
    args.extend(extra);
    args.extend(agent_args.iter().map(String::as_str));
    args
}

/// `taskgate status --json`, parsed: the alloc `alloc_id`.
pub fn alloc_status(home: &EngineHome, alloc_id: &str) -> serde_json::Value {
    let json: serde_json::Value =
        serde_json::from_str(&ok(home, &["status", "--json"])).expect("status --json");
    json.as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == alloc_id)
        .unwrap_or_else(|| panic!("no alloc {alloc_id} in {json:#}"))
        .clone()
}

pub fn task_json<'a>(alloc: &'a serde_json::Value, task: &str) -> &'a serde_json::Value {
    alloc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == task)
        .unwrap_or_else(|| panic!("no task {task} in {alloc:#}"))
}

/// How many of the task's recorded events are of `kind`.
pub fn events_of(task: &serde_json::Value, kind: &str) -> usize {
    let events = task["events"].as_array().unwrap();
    events.iter().filter(|e| e["kind"] == kind).count()
}

/// A task that, told to stop, ends only once its FIFO `local/gate` is
/// written: its stop takes as long as the test wants.
pub const SLOW_STOP_JOB: &str = r#"
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
