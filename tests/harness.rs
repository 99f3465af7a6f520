//! The fault-injection harness through its command line: explore, replay
//! and gate run against the real engine and executor, each in a private lab
//! (its temp dir placed under this test's own temp dir through TMPDIR), and
//! each followed by the zero-leftovers check. Run as root:
//! `cargo test --features failpoints --test harness -- --test-threads=1`.

mod common;

use common::scratch::{collect, idle, text, Scratch};
use rstest::rstest;
use serial_test::serial;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use taskgate_scenarios::html::kept::KEPT_RUNS_PER_SCENARIO;
use taskgate_scenarios::watchdog::Watchdog;

/// The full enumeration (5 task-runner × 4 update boundaries) plus five
/// random schedules of the race in docs/nomad-prestart-race-report.txt: all pass on this engine.
#[test]
#[serial]
fn explore_sidecar_stop_finds_no_failing_schedule() {
    let scratch = Scratch::new();
    let out = scratch.taskgate(&["explore", "sidecar-stop", "--random", "5"]);
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "explore failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("sidecar-stop: "))
        .unwrap_or_else(|| panic!("no summary line:\n{stdout}"));
    assert!(summary.contains(" 25 schedules run in "), "{summary}");
    assert!(summary.ends_with(", 0 failing"), "{summary}");
    assert!(!stdout.contains("FAIL "), "{stdout}");
    scratch.finish(&[]);
}

/// The report's interleaving (sidecar parked before prestart, the stop
/// delivered then, the update held after telling the task runners, the
/// task runner released first) passes, and really took the report's path:
/// the sidecar saw the alloc terminal and never went for its start.
#[test]
#[serial]
fn replay_of_the_report_interleaving_passes() {
    let scratch = Scratch::new();
    let stdout = passing_replay(&scratch, "sidecar-stop@tr=1.4/up=2/stop=0/first=tr/swaps=");
    for seen in [
        "point  sidecar:tr.before_prestart",
        "point  ar.task_runners_updated",
        "point  sidecar:tr.observed_terminal",
        "stop   delivered",
    ] {
        assert!(
            stdout.contains(seen),
            "{seen} missing from the replayed history:\n{stdout}"
        );
    }
    for unseen in [
        "point  sidecar:tr.before_driver_start",
        "point  sidecar:tr.after_driver_start",
        "point  sidecar:hook.prestart.",
    ] {
        assert!(
            !stdout.contains(unseen),
            "the sidecar got as far as {unseen}:\n{stdout}"
        );
    }
    scratch.finish(&[]);
}

/// An agent-host run is judged on every task event its agents emitted,
/// not only the last ten a task's record keeps: in
/// `failing-batch-agent-kill#0` web fails three times (13 events, the
/// agent killed as attempt 2 is about to start), and its history begins
/// with its receipt and attempt 1's setup.
#[test]
#[serial]
fn an_agent_runs_history_holds_each_tasks_every_event() {
    let scratch = Scratch::new();
    let stdout = passing_replay(&scratch, "failing-batch-agent-kill#0");
    let web: Vec<&str> = (stdout.lines())
        .filter(|line| line.contains(" event  web "))
        .collect();
    let begins = ["web Received (attempt 0)", "web TaskSetup (attempt 1)"];
    assert!(
        web.len() >= 2 && web[0].contains(begins[0]) && web[1].contains(begins[1]),
        "web's events begin at {:?} ({} of them)",
        web.first(),
        web.len()
    );
    assert!(web.len() > 10, "{stdout}");
    scratch.finish(&[]);
}

/// Replays `token` in `scratch`, requires it to pass, and returns what it
/// printed (the history).
fn passing_replay(scratch: &Scratch, token: &str) -> String {
    let out = scratch.taskgate(&["replay", token]);
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "replay failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    // A fault case is named by its whole token, fingerprint and all.
    let named = stdout
        .strip_prefix(&format!("PASS {token}"))
        .is_some_and(|rest| rest.starts_with([' ', ':']));
    assert!(named, "{stdout}");
    stdout
}

/// A malformed token fails fast, with a message naming the problem.
#[rstest]
#[case::no_separator("garbage", "is neither SCENARIO@SCHEDULE nor SCENARIO#N")]
#[case::bad_schedule("sidecar-stop@tr=zz", "bad schedule")]
#[case::unknown_scenario(
    "no-such-scenario@tr=1/up=2/stop=0/first=tr/swaps=",
    "unknown scenario \"no-such-scenario\""
)]
#[case::fault_index_out_of_range("prestart-hook-error#99", "out of range")]
#[serial]
fn replay_rejects_a_malformed_token(#[case] token: &str, #[case] message: &str) {
    let scratch = Scratch::new();
    let out = scratch.taskgate(&["replay", token]);
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "replay of {token:?} succeeded:\n{stdout}"
    );
    assert!(stderr.starts_with("Error: "), "{stderr}");
    assert!(
        stderr.contains(message),
        "expected {message:?} in:\n{stderr}"
    );
    assert!(!stdout.contains("PASS"), "{stdout}");
    scratch.finish(&[]);
}

/// The gate over one scenario exits 0 and writes a JUnit report with one
/// passing testcase per case (4 prestart hooks × before/after).
#[test]
#[serial]
fn gate_writes_a_junit_report() {
    let scratch = Scratch::new();
    let xml_path = scratch.path().join("g.xml");
    let out = scratch.taskgate(&[
        "gate",
        "--only",
        "prestart-hook-error",
        "--junit",
        xml_path.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "gate failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(stdout.contains("8 passed, 0 failed"), "{stdout}");
    let xml = std::fs::read_to_string(&xml_path).expect("JUnit report written");
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert!(
        xml.contains("<testsuite name=\"prestart-hook-error\" tests=\"8\""),
        "{xml}"
    );
    assert!(xml.contains("failures=\"0\""), "{xml}");
    let cases: Vec<&str> = xml
        .match_indices("<testcase ")
        .map(|(i, _)| &xml[i..])
        .collect();
    assert_eq!(cases.len(), 8, "{xml}");
    for n in 0..8 {
        assert!(
            xml.contains(&format!("name=\"prestart-hook-error#{n}:")),
            "case #{n} missing:\n{xml}"
        );
    }
    assert!(!xml.contains("<failure"), "{xml}");
    scratch.finish(&["g.xml"]);
}

/// A lab too deep for its executors' sockets (a long `TMPDIR`) refuses its
/// runs as harness errors: the engine's "socket path too long" start
/// failure is never judged, where it broke an invariant of its own and let
/// the zoo count every seeded bug as caught by it.
#[test]
#[serial]
fn a_lab_too_deep_for_its_sockets_fails_its_runs_unjudged() {
    let scratch = Scratch::new();
    let deep = scratch.path().join("d".repeat(60));
    std::fs::create_dir(&deep).unwrap();
    let out = scratch.run(
        {
            let mut command = scratch.command(&["gate", "--only", "prestart-hook-error"]);
            command.env("TMPDIR", &deep);
            command
        },
        &["gate"],
    );
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("is longer than a Unix socket address allows"),
        "{stdout}"
    );
    assert!(stdout.contains("0 passed, 8 failed"), "{stdout}");
    assert!(!stdout.contains("violation:"), "{stdout}");
    std::fs::remove_dir_all(&deep).unwrap();
    scratch.finish(&[]);
}

/// A report file that cannot be written is refused before the first run,
/// for `gate --junit` and `explore --failing-tokens` alike: it was found
/// only after the whole run, whose verdict was then lost.
#[test]
#[serial]
fn a_report_path_that_cannot_be_written_is_refused_before_any_run() {
    let scratch = Scratch::new();
    let nowhere = scratch.path().join("no-such-dir").join("out");
    let nowhere = nowhere.to_str().unwrap();
    let mut ran_first = Vec::new();
    let gate: &[&str] = &["gate", "--only", "prestart-hook-error", "--junit", nowhere];
    let explore: &[&str] = &[
        "explore",
        "prestart-hook-error",
        "--failing-tokens",
        nowhere,
    ];
    for args in [gate, explore] {
        let out = scratch.taskgate(args);
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{args:?}\nstdout:\n{stdout}");
        assert!(stderr.contains(nowhere), "{args:?}\nstderr:\n{stderr}");
        if stdout.lines().any(|l| l.starts_with("[1/")) {
            ran_first.push(args[0]);
        }
    }
    scratch.finish(&[]);
    assert!(ran_first.is_empty(), "{ran_first:?} ran before refusing");
}

/// A gate told to stop (SIGINT, as Ctrl-C sends it) ends the run in
/// progress, gives no verdict and no report, and takes its lab down:
/// nothing of it is left (its tasks, cgroups, mount and temp dir).
#[test]
#[serial]
fn an_interrupted_gate_takes_its_lab_down() {
    let scratch = Scratch::new();
    let xml_path = scratch.path().join("g.xml");
    let mut child = scratch
        .command(&["gate", "--junit", xml_path.to_str().unwrap()])
        .spawn()
        .expect("spawn taskgate");
    let printed = Arc::new(AtomicU64::new(0));
    let stderr = collect(child.stderr.take().expect("piped"), printed.clone());
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            all.push_str(&line);
            all.push('\n');
            let _ = lines_tx.send(line);
        }
        all
    });
    // Two runs done: the lab is up, and the third run is under way.
    loop {
        let line = lines
            .recv_timeout(idle())
            .expect("the gate printed no second run");
        if line.starts_with("[2/") {
            break;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let watchdog = Watchdog::arm(child.id(), idle(), move || printed.load(Ordering::Relaxed));
    let status = child.wait().expect("wait for taskgate");
    assert!(!watchdog.disarm(), "the interrupted gate hung");
    let stdout = reader.join().unwrap();
    let stderr = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
    assert_eq!(
        status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains("interrupted after ") && stderr.contains("no verdict"),
        "{stderr}"
    );
    assert!(!xml_path.exists(), "an interrupted gate wrote a report");
    scratch.finish(&[]);
}

/// `--jobs 2` gives a serial gate's verdicts: on the legacy build (the
/// report's own bug, from the zoo), over the report's scenario, the same
/// JUnit cases with the same failures and messages, the same summary, and
/// an HTML report keeping the same runs' data under the same names.
#[test]
#[serial]
fn jobs_give_a_serial_gates_verdicts() {
    let scratch = Scratch::new();
    let mut junits = Vec::new();
    let mut summaries = Vec::new();
    for jobs in ["1", "2"] {
        let xml = scratch.path().join(format!("jobs-{jobs}.xml"));
        let report = scratch.path().join(format!("report-{jobs}"));
        let (stdout, _) = scratch.legacy_gate(&[
            "--only",
            "sidecar-stop",
            "--random",
            "4",
            "--jobs",
            jobs,
            "--junit",
            xml.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ]);
        let junit = std::fs::read_to_string(&xml).unwrap();
        junits.push(comparable_junit(&junit, &report.display().to_string()));
        let tally = stdout.lines().find(|l| l.contains(" passed, "));
        summaries.push(tally.unwrap_or_default().to_string());
    }
    let failing = junits[0].iter().filter(|c| c.contains(" FAIL ")).count();
    assert!(failing > KEPT_RUNS_PER_SCENARIO, "{:#?}", junits[0]);
    let kept = (junits[0].iter()).filter(|c| c.contains("data kept in REPORT/runs/"));
    assert_eq!(kept.count(), KEPT_RUNS_PER_SCENARIO, "{:#?}", junits[0]);
    assert_eq!(junits[0], junits[1], "--jobs 1 and --jobs 2 JUnit differ");
    assert_eq!(summaries[0], summaries[1], "the gates' tallies differ");
    scratch.finish(&["jobs-1.xml", "jobs-2.xml", "report-1", "report-2"]);
}

/// Each JUnit case of a gate as a line: its name, its verdict (the broken
/// invariants) and what became of its data, without what differs between
/// two runs of one gate (times, pids, alloc ids, temp dirs).
fn comparable_junit(xml: &str, report_dir: &str) -> Vec<String> {
    let xml = xml.replace(report_dir, "REPORT");
    let mut cases = Vec::new();
    for case in xml.split("<testcase ").skip(1) {
        let case = case.split("</testcase>").next().unwrap();
        let name = case.split('"').nth(1).unwrap();
        let mut line = name.to_string();
        if let Some(message) = case.split("<failure message=\"").nth(1) {
            line += &format!(" FAIL {}", message.split('"').next().unwrap());
        }
        for said in case.lines().map(str::trim_start) {
            if let Some(broken) = said.strip_prefix("violation: ") {
                line += &format!(" [{}]", broken.split(' ').next().unwrap());
            }
            if said.starts_with("problem: data ") {
                line += &format!(" ({said})");
            }
        }
        cases.push(line);
    }
    cases
}

/// The gate split in two shards, then merged: the shards are disjoint, the
/// merge holds exactly the unsharded gate's 8 cases, and a merge that lacks
/// a shard is refused instead of passing a partial gate.
#[test]
#[serial]
fn gate_shards_merge_into_the_whole_gate() {
    let scratch = Scratch::new();
    let path = |name: &str| scratch.path().join(name).display().to_string();
    let mut cases = Vec::new();
    for (shard, file) in [("1/2", "s1.xml"), ("2/2", "s2.xml")] {
        let out = scratch.taskgate(&[
            "gate",
            "--only",
            "prestart-hook-error",
            "--shard",
            shard,
            "--junit",
            &path(file),
        ]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "shard {shard}: {stdout}\n{stderr}");
        assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
        let xml = std::fs::read_to_string(path(file)).unwrap();
        cases.extend(
            // Each case by its place (its token without the fingerprint).
            xml.match_indices("<testcase name=\"").map(|(i, m)| {
                xml[i + m.len()..]
                    .split([':', '"'])
                    .next()
                    .unwrap()
                    .to_string()
            }),
        );
    }
    cases.sort();
    let expected: Vec<String> = (0..8).map(|n| format!("prestart-hook-error#{n}")).collect();
    let mut sorted = expected.clone();
    sorted.sort();
    assert_eq!(cases, sorted, "the two shards together run each case once");

    let out = scratch.taskgate(&[
        "gate",
        "--merge",
        &path("s1.xml"),
        &path("s2.xml"),
        "--junit",
        &path("all.xml"),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "merge: {stdout}\n{stderr}");
    assert!(stdout.contains("8 passed, 0 failed"), "{stdout}");
    let merged = std::fs::read_to_string(path("all.xml")).unwrap();
    for case in &expected {
        assert!(merged.contains(&format!("name=\"{case}:")), "{merged}");
    }

    let out = scratch.taskgate(&[
        "gate",
        "--merge",
        &path("s2.xml"),
        "--junit",
        &path("partial.xml"),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "a partial merge passed: {stdout}");
    assert!(stderr.contains("shards [1] of 2 are missing"), "{stderr}");
    scratch.finish(&["s1.xml", "s2.xml", "all.xml"]);
}
