//! What each command tells its user, beside an agent or as one: `run`
//! (submitted, in the foreground, interrupted), `stop`, `status`, `logs
//! -f` and `drain`, and the options they refuse. Every test checks that
//! nothing is left. (The agent on the host's cgroups, which the CI's
//! guests run too, is in tests/agent.rs.) Run as root:
//! `cargo test --features privileged --test commands -- --test-threads=1`.

mod common;

use common::cli::*;
use common::EngineHome;
use nix::sys::signal::Signal;
use rstest::rstest;
use serial_test::serial;
use std::process::Command;
use std::sync::mpsc::{channel, RecvTimeoutError};

/// `taskgate status` reads while a foreground `taskgate run` holds the
/// state database.
#[test]
#[serial]
fn status_reads_while_an_agent_runs() {
    let home = EngineHome::new();
    let job = write_job(&home, "job.hcl", HOLD_JOB);
    let agent_args = home.agent_args();
    let (mut run, alloc) = run_until_started(&home, &job, &agent_args);

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
    // A job of two groups: the first is placed, with a warning, and the
    // second's missing user does not matter to it.
    let other_group = "  group \"other\" {\n    task \"x\" {\n      driver = \"exec\"\n      user   = \"no-such-user-xyz\"\n      config {\n        command = \"/bin/true\"\n      }\n    }\n  }\n}\n";
    let first_group = HOLD_JOB
        .trim_end()
        .strip_suffix('}')
        .expect("the job's end");
    let two = format!("{first_group}{other_group}");
    let two = write_job(&home, "two.hcl", &two);
    let two_out = taskgate_output(&home, &run_args(&two, &agent_args, &["--detach"]));
    let (two_stdout, two_stderr) = text(&two_out);
    ok(&home, &["drain"]);
    assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    let placed = (out
        .status
        .success()
        .then(|| placed_alloc(&stdout))
        .into_iter())
    .chain(two_out.status.success().then(|| placed_alloc(&two_stdout)));
    home.finish(&placed.collect::<Vec<_>>());
    assert!(two_out.status.success(), "{two_stderr}");
    assert!(
        two_stderr.contains("has 2 groups; this run places the first, \"g\""),
        "{two_stderr}"
    );
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
    let (mut run, own) = run_until_started(&home, &job, &agent_args);
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
    let (mut run, alloc) = run_until_started(&home, &job, &agent_args);
    agent.signal_and_wait(Signal::SIGKILL);
    // Its follower is told the agent went; the task runs on.
    assert!(!run.wait_for_exit().success(), "{}", run.printed());
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
    // Damaged again once it has ended: an old allocation's record, with no
    // executor left, is named, and fails no drain.
    (taskgate_engine::state::StateDb::open(&state_db).unwrap())
        .put_raw_alloc(&alloc, b"not a record")
        .unwrap();
    let mut agent = Running::agent(&home);
    let old = taskgate_output(&home, &["drain"]);
    assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    home.finish(std::slice::from_ref(&alloc));
    assert!(!drain.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains(&alloc) && stderr.contains("not stopped"),
        "{stdout}{stderr}"
    );
    let (old_out, old_err) = text(&old);
    assert!(old.status.success(), "{old_out}{old_err}");
    assert!(
        old_err.contains(&alloc) && old_err.contains("no executor of it serves"),
        "{old_err}"
    );
}

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
    let (mut run, alloc) = run_until_started(&home, &job, &agent_args);
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
    let (mut run, alloc) = run_until_started(&home, &job, &agent_args);

    let status = run.signal_and_wait(Signal::SIGINT);
    if let Some(agent) = &mut agent {
        ok(&home, &["drain"]);
        assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    }
    home.finish(std::slice::from_ref(&alloc));
    let printed = run.printed();
    assert!(
        printed.contains(&format!("==> alloc {alloc} finished: complete")),
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

/// With no agent, `status` and `logs` read the data dir themselves, as
/// root: a data dir another user owns or can write is refused, as the
/// agent refuses it, before its state database is read. Its owner could
/// have written any record there (allocations that never ran, and where
/// their logs are), or made the database a FIFO, which hung the read, or
/// a link to `/dev/zero`, which the read took until memory ran out.
#[test]
#[serial]
fn without_an_agent_a_data_dir_another_user_owns_is_not_read() {
    let home = EngineHome::new();
    let batch = write_job(&home, "batch.hcl", BATCH_JOB);
    let agent_args = home.agent_args();
    let once = placed_alloc(&ok(&home, &run_args(&batch, &agent_args, &[])));
    let data_dir = home.data_dir();
    let chown = |uid: u32| {
        std::os::unix::fs::chown(data_dir.path(), Some(uid), None).expect("chown the data dir")
    };
    chown(65534);
    let read: Vec<_> = [vec!["status"], vec!["logs", &once, "hello"]]
        .into_iter()
        .map(|args| (args.join(" "), taskgate_output(&home, &args)))
        .collect();
    chown(0);
    // Its own again: read as before.
    assert!(ok(&home, &["status"]).contains(&once));
    home.finish(std::slice::from_ref(&once));
    for (command, out) in read {
        let (stdout, stderr) = text(&out);
        assert!(
            !out.status.success() && stderr.contains("belongs to uid 65534"),
            "`{command}` read it: {stdout}{stderr}"
        );
    }
}

/// A data dir is reached through dirs and links another user could
/// change: a link of theirs (`ln -s /etc/sudoers.d /tmp/tg`), or a dir
/// inside one of theirs, which they can move aside and replace. Root's
/// `run` (the agent) would have written its files wherever the other user
/// pointed it, and `status` read what they put there: both are refused,
/// naming the user, before anything is read or written.
#[rstest]
#[case::through_another_users_link("link", "a link uid 65534 owns")]
#[case::inside_another_users_dir("theirs/real", "belongs to uid 65534")]
#[serial]
fn a_data_dir_another_user_could_swap_is_refused(#[case] name: &str, #[case] why: &str) {
    let home = EngineHome::new();
    let batch = write_job(&home, "batch.hcl", BATCH_JOB);
    let theirs = home.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    let roots = home.path().join("roots");
    std::fs::create_dir(&roots).unwrap();
    std::fs::create_dir(theirs.join("real")).unwrap();
    // Their link sits in root's dir: only its owner makes it theirs.
    std::os::unix::fs::symlink(&roots, home.path().join("link")).unwrap();
    for owned in [theirs.clone(), home.path().join("link")] {
        std::os::unix::fs::lchown(owned, Some(65534), Some(65534)).unwrap();
    }
    let data_dir = home.path().join(name);
    let agent_args = home.agent_args();
    let mut told = Vec::new();
    for args in [run_args(&batch, &agent_args, &[]), vec!["status"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_taskgate"))
            .args(&args)
            .arg("--data-dir")
            .arg(&data_dir)
            .env_remove("TASKGATE_LOG")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        told.push((args[0].to_string(), out.status.success(), stdout + &stderr));
    }
    let wrote = std::fs::read_dir(&roots).unwrap().count()
        + std::fs::read_dir(theirs.join("real")).unwrap().count();
    home.finish(&[]);
    for (command, succeeded, said) in told {
        assert!(
            !succeeded && said.contains(why),
            "`{command}` used it: {said}"
        );
    }
    assert_eq!(wrote, 0, "files were written there");
}

/// The logs a `run` prints at its allocation's end are held to what the
/// task's `logs` stanza keeps: a root task can make its own log file far
/// larger (sparse: `truncate -s 1T`, no disk spent), which the run read
/// whole into memory, the host's, not the task's cgroup's.
#[test]
#[serial]
fn a_run_prints_no_more_log_than_the_task_keeps() {
    let home = EngineHome::new();
    let job = write_job(&home, "swollen.hcl", SWOLLEN_LOG_JOB);
    let agent_args = home.agent_args();
    let out = taskgate_output(&home, &run_args(&job, &agent_args, &[]));
    let (stdout, stderr) = text(&out);
    let alloc = placed_alloc(&stdout);
    home.finish(std::slice::from_ref(&alloc));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("before it swelled"), "{stderr}");
    assert!(
        stdout.len() < 2 << 20 && stdout.contains("not shown"),
        "`run` printed {} bytes",
        stdout.len()
    );
}

/// A batch task whose one 1 MiB log file it makes a sparse 64 MiB, once
/// its line is in it.
const SWOLLEN_LOG_JOB: &str = r#"
job "swollen" {
  type = "batch"
  group "g" {
    task "web" {
      driver = "exec"
      user   = "root"
      logs {
        max_files     = 1
        max_file_size = 1
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo before it swelled; until grep -q swelled /alloc/logs/web.stdout.0; do :; done; truncate -s 64M /alloc/logs/web.stdout.0"]
      }
    }
  }
}
"#;

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
    // With no agent left, the follower says what it waits for.
    follower.expect_line(&["no agent serves", "until one does"]);
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
    let followed = follower.printed();
    drop(follower);
    // The task still runs: a new agent restores it, and stops it.
    let state = taskgate_engine::state::StateDb::open(&state_db).unwrap();
    state.put_alloc(&running).unwrap();
    drop(state);
    let mut agent = Running::agent(&home);
    assert!(ok(&home, &["stop", &held]).contains("finished: complete"));
    assert!(
        agent.signal_and_wait(Signal::SIGTERM).success(),
        "{}",
        agent.printed()
    );
    home.finish(std::slice::from_ref(&held));
    assert!(
        ended.is_some_and(|status| status.success()),
        "logs -f still waits ({ended:?}); it printed:\n{followed}"
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
    let (mut run, held) = run_until_started(&home, &hold, &agent_args);
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
    let (mut run, held) = run_until_started(&home, &hold, &agent_args);
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

/// A task whose executor socket would not fit a Unix socket address (its
/// name too long for this data dir) is refused with its job, never placed
/// to fail at each launch until its restart policy gives up.
#[test]
#[serial]
fn a_task_whose_socket_path_cannot_fit_is_not_placed() {
    let home = EngineHome::new();
    let long = "w".repeat(100);
    let job = write_job(
        &home,
        "job.hcl",
        &HOLD_JOB.replace("task \"web\"", &format!("task \"{long}\"")),
    );
    let agent_args = home.agent_args();
    let mut agent = Running::agent(&home);
    let stderr = refused(&home, &run_args(&job, &agent_args, &["--detach"]));
    ok(&home, &["drain"]);
    assert!(agent.wait_for_exit().success(), "{}", agent.printed());
    home.finish(&[]);
    assert!(
        stderr.contains(&format!("task {long:?}"))
            && stderr.contains("is longer than a Unix socket address allows"),
        "{stderr}"
    );
}

/// A bench that cannot start (no `unshare` or `chroot` to time it
/// against) leaves no cgroup parent behind: it claimed one before it
/// looked for them, and a failed start never gave it back.
#[test]
#[serial]
fn a_bench_that_cannot_start_leaves_no_cgroup() {
    let bench = std::process::Command::new(env!("CARGO_BIN_EXE_taskgate"))
        .args(["bench", "--no-search"])
        .env("PATH", "")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run taskgate");
    let leaf = format!("taskgate-bench-{}", bench.id());
    let out = bench.wait_with_output().expect("the bench's end");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("no unshare on PATH"),
        "{stderr}"
    );
    let root = std::path::Path::new("/sys/fs/cgroup");
    let hierarchies = std::fs::read_dir(root).unwrap().flatten().map(|e| e.path());
    let left: Vec<_> = std::iter::once(root.to_path_buf())
        .chain(hierarchies)
        .map(|h| h.join(&leaf))
        .filter(|dir| dir.is_dir())
        .collect();
    // Removed before the verdict, so a failing run leaves nothing either.
    for dir in &left {
        for child in std::fs::read_dir(dir).unwrap().flatten() {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir(child.path());
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A listener at `home`'s control socket that reads each connection's
/// request line and hangs up without an answer, listening as `uid`.
struct SilentListener {
    socket: std::path::PathBuf,
    thread: std::thread::JoinHandle<()>,
    got: std::sync::mpsc::Receiver<usize>,
}

impl SilentListener {
    const THE_END: &'static str = "the test is done\n";

    fn start(home: &EngineHome, uid: nix::unistd::Uid) -> SilentListener {
        use nix::sys::socket::{bind, listen, socket, AddressFamily, Backlog, SockFlag};
        use nix::sys::socket::{SockType, UnixAddr};
        use std::io::BufRead;
        use std::os::fd::AsRawFd;

        let socket_path = home.data_dir().control_socket();
        std::fs::create_dir_all(socket_path.parent().unwrap()).unwrap();
        let listener = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(listener.as_raw_fd(), &UnixAddr::new(&socket_path).unwrap()).unwrap();
        // The kernel takes a listener's credentials at listen(): this thread
        // alone takes `uid` (the raw call, not glibc's, which would change
        // every thread of the test) before it listens.
        let (ready_tx, ready) = channel();
        let (got_tx, got) = channel();
        let thread = std::thread::spawn(move || {
            let id = uid.as_raw() as libc::c_long;
            assert_eq!(unsafe { libc::syscall(libc::SYS_setresuid, id, id, id) }, 0);
            listen(&listener, Backlog::new(8).unwrap()).unwrap();
            ready_tx.send(()).unwrap();
            let listener = std::os::unix::net::UnixListener::from(listener);
            // Each connection's request line (`run` probes, then sends),
            // until the test's own says the end.
            let mut sent = 0;
            for stream in listener.incoming() {
                let mut line = String::new();
                let _ = std::io::BufReader::new(stream.unwrap()).read_line(&mut line);
                if line == SilentListener::THE_END {
                    break;
                }
                sent += line.len();
            }
            got_tx.send(sent).unwrap();
        });
        ready.recv().unwrap();
        SilentListener {
            socket: socket_path,
            thread,
            got,
        }
    }

    /// Ends it; how many bytes of requests it was sent.
    fn stop(self) -> usize {
        let mut end = std::os::unix::net::UnixStream::connect(&self.socket).unwrap();
        std::io::Write::write_all(&mut end, SilentListener::THE_END.as_bytes()).unwrap();
        let sent = self.got.recv().unwrap();
        self.thread.join().unwrap();
        // A thread's change of user marks the whole process undumpable (the
        // kernel's rule for any change of credentials): put back for the
        // tests after this one.
        assert_eq!(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1) }, 0);
        std::fs::remove_file(&self.socket).unwrap();
        sent
    }
}

/// A control socket another user serves is not an agent's: a data dir
/// such a user made (`mkdir -p /tmp/tg/run`, then a listener there) got
/// root's `run --data-dir /tmp/tg` job, with its environment, and could
/// answer as an agent would (placed, then complete). The commands now ask
/// the kernel who listens (`SO_PEERCRED`) and talk only to root or to
/// their own user.
#[test]
#[serial]
fn a_control_socket_another_user_serves_is_refused() {
    let home = EngineHome::new();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid;
    let impostor = SilentListener::start(&home, nobody);
    let out = taskgate_output(&home, &["run", "--detach"]);
    let (_, stderr) = text(&out);
    let sent = impostor.stop();
    home.finish(&[]);
    assert!(!out.status.success(), "exit 0: {stderr}");
    assert_eq!(sent, 0, "the job went to nobody's socket; stderr: {stderr}");
    assert!(
        stderr.contains("is served by uid") && stderr.contains("not by root"),
        "{stderr}"
    );
}

/// An agent that hangs up on a submitted job without answering (it was
/// told to exit as it placed it, or it crashed) may have placed it: `run`
/// says so, and where to look, rather than leave it looking refused, to be
/// submitted again and run twice.
#[test]
#[serial]
fn a_submit_left_unanswered_says_the_job_may_be_placed() {
    let home = EngineHome::new();
    let agent = SilentListener::start(&home, nix::unistd::Uid::current());
    let out = taskgate_output(&home, &["run", "--detach"]);
    let (_, stderr) = text(&out);
    let sent = agent.stop();
    home.finish(&[]);
    assert!(!out.status.success(), "exit 0: {stderr}");
    assert!(sent > 0, "no job sent: {stderr}");
    assert!(
        stderr.contains("may have been placed") && stderr.contains("taskgate status"),
        "{stderr}"
    );
}
