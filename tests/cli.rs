//! The command line's own manners, with no root, agent or lab:
//! `cargo test --features failpoints --test cli`.

use std::ffi::OsStr;
use std::process::{Command, Stdio};

/// `taskgate ARGS` with no input and no PATH (nothing it would run can be
/// found): whether it succeeded, and its stderr.
fn outcome(args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_taskgate"))
        .args(args)
        .env("PATH", "")
        .stdin(Stdio::null())
        .output()
        .expect("run taskgate");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), stderr)
}

/// `taskgate ARGS` with no input: refused, its stderr.
fn refused(args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> String {
    let (succeeded, stderr) = outcome(args);
    assert!(!succeeded, "{stderr}");
    stderr
}

/// A reader that went away (`taskgate gate --list | head -1`) ends the
/// output, not the command: printing to the closed pipe once panicked.
#[test]
fn output_into_a_closed_pipe_is_dropped_quietly() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    // Closed before the command starts: its first line already meets EPIPE.
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_taskgate"))
        .args(["gate", "--list"])
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run taskgate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// An error told into a closed stderr (`taskgate status 2>&1 | head -0`)
/// still ends the command with its own exit code, 1, not a panic's 101:
/// stderr was written with `eprintln!`, which panics on EPIPE.
#[test]
fn an_error_into_a_closed_stderr_still_exits_1() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let data_dir = tempfile::tempdir().expect("a temp dir");
    let status = Command::new(env!("CARGO_BIN_EXE_taskgate"))
        .args(["status", "--data-dir"])
        .arg(data_dir.path().join("never-made"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(writer)
        .status()
        .expect("run taskgate");
    assert_eq!(status.code(), Some(1), "a panic's exit is 101");
}

/// A scenario the fake driver cannot run (its faults act in the executor)
/// is refused up front, with why and what to run instead. Each of its
/// cases used to "fail" on the fake, and the real executor's replay of
/// them then accused the fake's model of a harness bug.
#[test]
fn the_fake_driver_refuses_a_scenario_it_cannot_run() {
    let stderr = refused(["explore", "--driver", "fake", "executor-fault"]);
    assert!(
        stderr.contains("the fake driver cannot run executor-fault")
            && stderr.contains("--driver real"),
        "explore --driver fake took cases it cannot run for failures: {stderr}"
    );
}

/// A gate that cannot give a verdict (bad input, an interrupt, a run that
/// errs) leaves no JUnit file, never the last gate's: a CI step that
/// publishes the file whatever happened would show an old pass.
#[test]
fn a_gate_without_a_verdict_leaves_no_old_junit_file() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("gate.xml");
    std::fs::write(&junit, "<testsuites/>").unwrap();
    let no_dir = dir.path().join("no-such-dir");
    let stderr = refused([
        OsStr::new("gate"),
        OsStr::new("--junit"),
        junit.as_os_str(),
        OsStr::new("--catalogue"),
        no_dir.as_os_str(),
    ]);
    assert!(
        !junit.exists(),
        "the last gate's {} is still there ({stderr})",
        junit.display()
    );
}

/// `--random` draws schedules for a stop race; a fault scenario's cases
/// are listed, so the flag there is refused, not silently dropped.
#[test]
fn explore_refuses_random_schedules_for_a_fault_scenario() {
    let stderr = refused([
        "explore",
        "--driver",
        "fake",
        "restart-races",
        "--random",
        "5",
    ]);
    assert!(
        stderr.contains("--random") && stderr.contains("restart-races"),
        "{stderr}"
    );
}

/// A merge whose `--junit` is one of its shards, however spelled, is
/// refused before anything is removed: the shard is the merge's input.
#[test]
fn a_merge_into_one_of_its_shards_is_refused_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let shard = dir.path().join("s1.xml");
    std::fs::write(&shard, "<testsuites/>").unwrap();
    let spelled_otherwise = dir.path().join(".").join("s1.xml");
    let stderr = refused([
        OsStr::new("gate"),
        OsStr::new("--merge"),
        shard.as_os_str(),
        OsStr::new("--junit"),
        spelled_otherwise.as_os_str(),
    ]);
    assert!(stderr.contains("is one of the shard reports"), "{stderr}");
    assert!(shard.exists(), "the shard was removed");
}

/// `--pids-max 0` leaves a task no process to run: refused as typed, not
/// at every launch, a restart delay at a time.
#[test]
fn a_pids_max_of_zero_is_refused_as_typed() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let agent = [
        OsStr::new("agent"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
        OsStr::new("--user"),
        OsStr::new("no-such-user-for-taskgate"),
    ];
    let run = [
        OsStr::new("run"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
        OsStr::new("no-such-job.hcl"),
    ];
    for command in [&agent[..], &run[..]] {
        let mut args = command.to_vec();
        args.extend([OsStr::new("--pids-max"), OsStr::new("0")]);
        let stderr = refused(args);
        assert!(
            stderr.contains("--pids-max"),
            "{:?} took --pids-max 0: {stderr}",
            command[0]
        );
    }
}

/// A group the job lacks is refused before anything of an agent starts
/// (no data dir, no cgroup parent, no socket), naming the groups it has.
#[test]
fn a_run_of_a_group_the_job_lacks_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let job = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/lifecycle.hcl");
    let stderr = refused([
        OsStr::new("run"),
        OsStr::new("--data-dir"),
        data_dir.as_os_str(),
        OsStr::new("--group"),
        OsStr::new("no-such-group"),
        OsStr::new(job),
    ]);
    assert!(
        stderr.contains("no group \"no-such-group\"")
            && stderr.contains("its groups")
            && !data_dir.exists(),
        "{stderr}"
    );
}

/// What `--list` and `--merge` would not use is refused, not dropped:
/// `--list --only` lists the named scenarios alone.
#[test]
fn gate_list_and_merge_take_no_flag_they_ignore() {
    let dir = tempfile::tempdir().unwrap();
    let shard = dir.path().join("s1.xml");
    let junit = dir.path().join("merged.xml");
    let merge = |extra: &[&str]| {
        let mut args = vec![
            OsStr::new("gate"),
            OsStr::new("--merge"),
            shard.as_os_str(),
            OsStr::new("--junit"),
            junit.as_os_str(),
        ];
        args.extend(extra.iter().map(OsStr::new));
        refused(args)
    };
    let mut ignored = Vec::new();
    for extra in [
        &["--only", "sidecar-stop"][..],
        &["--random", "3"],
        &["--seed", "9"],
        &["--jobs", "4"],
        &["--list"],
    ] {
        let stderr = merge(extra);
        if !stderr.contains("cannot be used with") {
            ignored.push(format!("--merge {extra:?}: {stderr}"));
        }
    }
    let listed = Command::new(env!("CARGO_BIN_EXE_taskgate"))
        .args(["gate", "--list", "--only", "sidecar-stop"])
        .output()
        .expect("run taskgate");
    let lines: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(String::from)
        .collect();
    if !(listed.status.success() && lines.len() == 1 && lines[0].starts_with("sidecar-stop ")) {
        ignored.push(format!("--list --only sidecar-stop listed {lines:?}"));
    }
    let listed_into = refused(["gate", "--list", "--junit", "list.xml"]);
    if !listed_into.contains("cannot be used with") {
        ignored.push(format!("--list --junit: {listed_into}"));
    }
    let (listed_unknown, unknown) = outcome(["gate", "--list", "--only", "no-such-scenario"]);
    if listed_unknown || !unknown.contains("no-such-scenario") {
        ignored.push(format!("--list --only no-such-scenario: {unknown}"));
    }
    assert!(ignored.is_empty(), "{ignored:#?}");
}

/// `status --verbose` shapes the table; with `--json` it would do
/// nothing, so the two are refused together.
#[test]
fn status_refuses_verbose_with_json() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = refused([
        OsStr::new("status"),
        OsStr::new("--json"),
        OsStr::new("--verbose"),
        OsStr::new("--data-dir"),
        dir.path().as_os_str(),
    ]);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

/// `bench --no-search` times no gate and no fake schedules: the options
/// for those are refused beside it.
#[test]
fn bench_refuses_search_options_without_the_search() {
    let mut taken = Vec::new();
    for extra in [
        &["--gate-only", "sidecar-stop"][..],
        &["--fake-schedules", "10"],
    ] {
        let mut args = vec!["bench", "--no-search"];
        args.extend(extra);
        // With no PATH, a bench that took them stops at once: no runc.
        let stderr = refused(args);
        if !stderr.contains("cannot be used with") {
            taken.push(format!("{extra:?}: {stderr}"));
        }
    }
    assert!(taken.is_empty(), "{taken:#?}");
}

/// `--seed` seeds random schedules of a stop race; a fault scenario's
/// cases are listed, so an explicit seed there is refused, as `--random` is.
#[test]
fn explore_refuses_a_seed_for_a_fault_scenario() {
    let (explored, stderr) = outcome([
        "explore",
        "--driver",
        "fake",
        "restart-races",
        "--seed",
        "7",
    ]);
    assert!(
        !explored && stderr.contains("--seed") && stderr.contains("restart-races"),
        "{stderr}"
    );
}

/// Each option's help says what it does: `gate --seed` had none, and
/// `replay --report` described the gate's report, not replay's.
#[test]
fn every_option_says_what_it_does() {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_taskgate"))
            .args(args)
            .arg("--help")
            .output()
            .expect("run taskgate");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let gate = help(&["gate"]);
    let seed = gate.lines().find(|l| l.contains("--seed")).unwrap_or("");
    let replay = help(&["replay"]);
    let seed_help = (seed.split_once("<SEED>").map(|(_, rest)| rest))
        .and_then(|rest| rest.split("[default").next())
        .unwrap_or("");
    assert!(
        !seed_help.trim().is_empty() && replay.contains("passing or not"),
        "gate --seed: {seed:?}; replay --report: {replay}"
    );
}

/// A mistyped scenario name gets the nearest one, not a dump of every
/// name on one line; a token's mistyped name is named before its schedule
/// is read.
#[test]
fn a_mistyped_scenario_is_answered_with_the_nearest() {
    let explored = refused(["explore", "--driver", "fake", "sidecar-sto"]);
    let replayed = refused(["replay", "sidecar-stp@tr=1.4"]);
    assert!(
        explored.contains("did you mean \"sidecar-stop\"")
            && explored.len() < 300
            && replayed.contains("sidecar-stp")
            && replayed.contains("did you mean \"sidecar-stop\""),
        "explore: {explored}\nreplay: {replayed}"
    );
}

/// A submitted run whose stop the agent never answers (a suspended
/// foreground agent, say) still takes its second Ctrl-C: it exits 130 at
/// once. The stop request used to block the one thread that takes the
/// run's signals.
#[test]
fn a_second_interrupt_ends_a_run_whose_stop_hangs() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;
    use taskgate_engine::control::{ControlAnswer, ControlReply};
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    std::fs::create_dir_all(data_dir.join("run")).unwrap();
    // A stand-in agent: it places the job, then takes the stop and never answers.
    let agent = UnixListener::bind(data_dir.join("run/control.sock")).unwrap();
    let mut run = Command::new(env!("CARGO_BIN_EXE_taskgate"))
        .args([
            OsStr::new("run"),
            OsStr::new("--data-dir"),
            data_dir.as_os_str(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run taskgate");
    let pid = Pid::from_raw(run.id() as i32);
    drop(agent.accept().expect("the probe for an agent"));
    let (mut submit, _) = agent.accept().expect("the job");
    let mut line = String::new();
    BufReader::new(&submit).read_line(&mut line).unwrap();
    let placed: ControlReply = Ok(ControlAnswer::Placed {
        alloc_id: "a1".into(),
    });
    writeln!(submit, "{}", serde_json::to_string(&placed).unwrap()).unwrap();
    // Once the run blocks its signals (its signal thread takes them), the
    // first Ctrl-C sends the stop.
    let blocked = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let mask = status
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .unwrap_or(0);
        mask & (1 << (Signal::SIGINT as u64 - 1)) != 0
    };
    while !blocked() {
        if let Some(status) = run.try_wait().unwrap() {
            panic!("the run ended before it took its signals: {status}");
        }
        std::thread::yield_now();
    }
    kill(pid, Signal::SIGINT).unwrap();
    let (stop, _) = agent.accept().expect("the stop");
    line.clear();
    BufReader::new(&stop).read_line(&mut line).unwrap();
    assert!(line.contains("Stop"), "{line}");
    kill(pid, Signal::SIGINT).unwrap();
    let (send, exited) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let status = run.wait();
        let _ = send.send(());
        status
    });
    let ended = exited
        .recv_timeout(taskgate_faults::patience::step())
        .is_ok();
    if !ended {
        let _ = kill(pid, Signal::SIGKILL);
    }
    let status = waiter.join().unwrap().unwrap();
    drop((submit, stop));
    assert!(
        ended && status.code() == Some(130),
        "a second Ctrl-C left the run waiting on its stop ({status})"
    );
}
