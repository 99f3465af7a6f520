//! The command line's own manners, with no root, agent or lab:
//! `cargo test --features failpoints --test cli`.

use std::ffi::OsStr;
use std::process::{Command, Stdio};

/// `taskgate ARGS` with no input: refused, its stderr.
fn refused(args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_taskgate"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run taskgate");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{stderr}");
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
