//! The agent as its users run it, through the command line: `taskgate run`
//! in the foreground, and `taskgate status` beside it. Run as root:
//! `cargo test --features privileged --test agent -- --test-threads=1`.

mod common;

use common::EngineHome;
use serial_test::serial;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
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

/// A `taskgate` process that keeps running (a foreground `run`), its
/// stdout read line by line.
struct Running {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn start(home: &EngineHome, args: &[&str]) -> Running {
        let mut child = taskgate(home, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn taskgate");
        let stdout = child.stdout.take().expect("piped");
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until one contains every word of `words`; returns it.
    fn expect_line(&mut self, words: &[&str]) -> String {
        loop {
            match self.lines.recv_timeout(idle()) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if words.iter().all(|w| line.contains(w)) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!(
                        "no line with {words:?} for {:?}; printed:\n{}",
                        idle(),
                        self.seen.join("\n")
                    )
                }
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "taskgate exited ({:?}) before printing {words:?}; printed:\n{}",
                    self.child.wait(),
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Sends `signal` and waits for the process to exit (with the safety net).
    fn signal_and_wait(mut self, signal: nix::sys::signal::Signal) -> Vec<String> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signal taskgate");
        // Every line up to the end of its output: the exit follows at once.
        loop {
            match self.lines.recv_timeout(idle()) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!("taskgate hung after {signal}:\n{}", self.seen.join("\n"))
                }
            }
        }
        let status = self.child.wait().expect("wait for taskgate");
        assert!(
            status.success(),
            "taskgate exited with {status} after {signal}:\n{}",
            self.seen.join("\n")
        );
        std::mem::take(&mut self.seen)
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

/// `taskgate ARGS --data-dir <home>`, with the home's busybox root.
fn taskgate(home: &EngineHome, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_taskgate"));
    cmd.args(args)
        .arg("--data-dir")
        .arg(home.data_dir())
        .env("RUST_BACKTRACE", "0")
        .env_remove(taskgate_faults::FAULTS_ENV)
        .env_remove(taskgate_faults::FAULT_LOG_ENV)
        .env_remove(taskgate_executor::FAILPOINTS_ENV)
        .stdin(Stdio::null());
    cmd
}

/// Runs a short `taskgate` command to its end.
fn taskgate_output(home: &EngineHome, args: &[&str]) -> Output {
    taskgate(home, args).output().expect("run taskgate")
}

fn write_job(home: &EngineHome, text: &str) -> PathBuf {
    let path = home.path().join("job.hcl");
    std::fs::write(&path, text).unwrap();
    path
}

/// The alloc id from `==> alloc <id> of job ...`.
fn placed_alloc(line: &str) -> String {
    line.split_whitespace()
        .nth(2)
        .unwrap_or_else(|| panic!("no alloc id in {line:?}"))
        .to_string()
}

fn chroot_args(home: &EngineHome) -> Vec<String> {
    home.agent_args()
}

fn run_args<'a>(job: &'a Path, chroot: &'a [String]) -> Vec<&'a str> {
    let mut args = vec!["run", job.to_str().unwrap()];
    args.extend(chroot.iter().map(String::as_str));
    args
}

/// `taskgate status` reads while a foreground `taskgate run` holds the
/// state database.
#[test]
#[serial]
fn status_reads_while_an_agent_runs() {
    let home = EngineHome::new();
    let job = write_job(&home, HOLD_JOB);
    let chroot = chroot_args(&home);
    let mut run = Running::start(&home, &run_args(&job, &chroot));
    let alloc = placed_alloc(&run.expect_line(&["==> alloc", "placed"]));
    run.expect_line(&["web", "Started"]);

    // Issue 22 item 4: status opened the state database itself, which
    // redb's lock refused ("Database already open") while the agent held it.
    let status = taskgate_output(&home, &["status"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&status.stdout),
        String::from_utf8_lossy(&status.stderr),
    );
    assert!(status.status.success(), "status failed:\n{stderr}");
    assert!(
        stdout.contains(&format!("ID            = {alloc}")),
        "{stdout}"
    );
    assert!(stdout.contains("Client Status = running"), "{stdout}");
    assert!(stdout.contains("web            running"), "{stdout}");

    run.signal_and_wait(nix::sys::signal::Signal::SIGINT);
    home.finish(&[alloc]);
}
