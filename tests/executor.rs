//! Privileged tests of the executor: isolation, limits, logs, stop, bad input
//! and reattach, each ending with the zero-leftovers check. Run as root:
//! `cargo test --test executor -- --test-threads=1`.

mod common;

use common::Sandbox;
use rstest::rstest;
use serial_test::serial;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use taskgate_executor::{
    Doom, Executor, ExecutorError, ExitPeek, ExitResult, ReattachInfo, TaskSpec,
};
use taskgate_oracle::identity::running;

/// Nomad's default exec-driver capabilities as a /proc/<pid>/status mask:
/// CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, FSETID 4, KILL 5, SETGID 6, SETUID 7,
/// SETPCAP 8, NET_BIND_SERVICE 10, SYS_CHROOT 18, MKNOD 27, AUDIT_WRITE 29, SETFCAP 31.
const DEFAULT_CAPS_MASK: u64 = (1 << 0)
    | (1 << 1)
    | (1 << 3)
    | (1 << 4)
    | (1 << 5)
    | (1 << 6)
    | (1 << 7)
    | (1 << 8)
    | (1 << 10)
    | (1 << 18)
    | (1 << 27)
    | (1 << 29)
    | (1 << 31);

/// Launches, waits for the exit, shuts the executor down; returns the result.
fn run_to_exit(sb: &Sandbox, spec: &TaskSpec) -> ExitResult {
    let exec = sb.launch(spec).expect("launch");
    let result = exec.wait().expect("wait");
    exec.shutdown().expect("shutdown");
    result
}

/// Runs `script` as `task` to a successful exit and returns its stdout.
fn stdout_of(sb: &Sandbox, task: &str, spec: TaskSpec) -> String {
    let result = run_to_exit(sb, &spec);
    let stdout = sb.read_log(task, "stdout");
    assert!(
        result.successful(),
        "{result:?}\nstdout: {stdout}\nstderr: {}",
        sb.read_log(task, "stderr")
    );
    stdout
}

fn cap_field(status: &str, field: &str) -> u64 {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .expect(field);
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

#[test]
#[serial]
fn task_is_pid_one_with_its_own_hostname_and_rlimits() {
    let sb = Sandbox::new();
    let mut spec = sb.spec("web", "echo $$; hostname; ulimit -n; ulimit -c");
    spec.rlimits.nofile = taskgate_executor::Limit::both(77);
    let out = stdout_of(&sb, "web", spec);
    assert_eq!(out, "1\nweb\n77\n0\n");
    sb.assert_no_leftovers();
}

#[test]
#[serial]
fn host_processes_and_mounts_are_invisible() {
    let sb = Sandbox::new();
    // Only shell builtins, so the shell is the only process there is.
    let script =
        "for p in /proc/[0-9]*; do echo ${p#/proc/}; done; echo ---; ip -o link; echo ---; \
                  cat /proc/self/mounts";
    let out = stdout_of(&sb, "web", sb.spec("web", script));
    let [procs, links, mounts] =
        <[&str; 3]>::try_from(out.split("---\n").collect::<Vec<_>>()).unwrap();
    assert_eq!(procs, "1\n", "only the task itself is visible");
    assert_eq!(links.lines().count(), 1, "only loopback: {links}");
    assert!(
        links.starts_with("1: lo: <LOOPBACK,UP,LOWER_UP>"),
        "loopback is up: {links}"
    );
    let points: Vec<&str> = mounts
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap())
        .collect();
    let allowed = [
        "/",
        "/bin",
        "/etc",
        "/local",
        "/secrets",
        "/tmp",
        "/alloc",
        "/proc",
        "/dev",
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
        "/dev/pts",
        "/dev/shm",
    ];
    for p in &points {
        // Below /proc: its read-only and masked entries (see tests/escapes.rs).
        assert!(
            allowed.contains(p) || p.starts_with("/proc/"),
            "unexpected mount {p} in the task: {mounts}"
        );
    }
    assert!(
        !mounts.contains(&*sb.path().to_string_lossy()),
        "host path leaked: {mounts}"
    );
    sb.assert_no_leftovers();
}

#[rstest]
#[case::root("root", DEFAULT_CAPS_MASK, "0")]
#[case::nobody("nobody", 0, "65534")]
#[serial]
fn capabilities_are_reduced(#[case] user: &str, #[case] effective: u64, #[case] uid: &str) {
    let sb = Sandbox::new();
    let mut spec = sb.spec("web", "id -u; cat /proc/self/status");
    spec.user = user.into();
    let out = stdout_of(&sb, "web", spec);
    let (id, status) = out.split_once('\n').unwrap();
    assert_eq!(id, uid);
    assert_eq!(cap_field(status, "CapBnd"), DEFAULT_CAPS_MASK, "{status}");
    assert_eq!(cap_field(status, "CapEff"), effective, "{status}");
    assert_eq!(cap_field(status, "CapPrm"), effective, "{status}");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    sb.assert_no_leftovers();
}

#[test]
#[serial]
fn only_the_task_dirs_are_writable() {
    let sb = Sandbox::new();
    // As root, so only the mounts (not file permissions) can refuse.
    let script =
        "for f in /x /bin/x /etc/x /dev/x /proc/x /local/x /secrets/x /tmp/x /alloc/x /dev/shm/x; do \
                  if touch $f 2>/dev/null; then echo \"$f ok\"; else echo \"$f refused\"; fi; done";
    let out = stdout_of(&sb, "web", sb.spec("web", script));
    let expected = "/x refused\n/bin/x refused\n/etc/x refused\n/dev/x refused\n/proc/x refused\n\
                    /local/x ok\n/secrets/x ok\n/tmp/x ok\n/alloc/x ok\n/dev/shm/x ok\n";
    assert_eq!(out, expected);
    assert!(
        sb.shared_alloc_dir().join("x").exists() && sb.task_dir("web").join("local/x").exists()
    );
    assert!(!sb.path().join("rootfs/bin/x").exists());
    sb.assert_no_leftovers();
}

#[test]
#[serial]
fn fork_bomb_is_held_by_pids_max_and_the_executor_survives() {
    let sb = Sandbox::new();
    let mut spec = sb.spec(
        "bomb",
        // A subshell forks 200 sleeps against pids.max 16 until a fork fails
        // and kills it; then the shell counts (with builtins) what is left.
        "(i=0; while [ $i -lt 200 ]; do sleep 1000 & i=$((i+1)); done); \
         n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n",
    );
    spec.resources.pids_max = 16;
    let exec = sb.launch(&spec).expect("launch");
    let result = exec.wait().expect("the executor answers after the bomb");
    assert!(result.successful(), "{result:?}");
    assert_eq!(
        sb.read_log("bomb", "stdout"),
        "15\n",
        "16 until the subshell died: the shell and 14 sleeps"
    );
    assert!(
        sb.read_log("bomb", "stderr").contains("can't fork"),
        "forks beyond pids.max failed"
    );
    let again = Executor::reattach(&exec.reattach_info()).expect("executor still serves");
    assert_eq!(again.wait().unwrap(), result);
    exec.shutdown().expect("shutdown");
    sb.assert_no_leftovers();
}

#[test]
#[serial]
fn memory_hog_is_oom_killed_and_reported() {
    let sb = Sandbox::new();
    let mut spec = sb.spec("hog", "");
    // dd allocates and fills a 64 MiB block: four times the limit.
    spec.command = "/bin/dd".into();
    spec.args = ["if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"]
        .map(String::from)
        .to_vec();
    spec.resources.memory_mb = 16;
    let result = run_to_exit(&sb, &spec);
    assert!(result.oom_killed, "{result:?}");
    assert_eq!(result.signal, Some(libc::SIGKILL), "{result:?}");
    assert!(!result.successful());
    sb.assert_no_leftovers();
}

#[test]
#[serial]
fn output_lands_in_rotated_log_files() {
    let sb = Sandbox::new();
    // 50 lines of 20 bytes = 1000 bytes into 100-byte files, at most 3 kept.
    let mut spec = sb.spec(
        "logger",
        "i=10; while [ $i -lt 60 ]; do echo line-$i-xxxxxxxxxxx; i=$((i+1)); done; echo oops >&2",
    );
    spec.logs.max_file_size_bytes = 100;
    spec.logs.max_files = 3;
    let result = run_to_exit(&sb, &spec);
    assert!(result.successful(), "{result:?}");
    let expected: String = (10..60)
        .map(|i| format!("line-{i}-xxxxxxxxxxx\n"))
        .collect();
    for old in 0..7 {
        assert!(
            !sb.log("logger", "stdout", old).exists(),
            "stdout.{old} should have been deleted"
        );
    }
    let kept: String = (7..10)
        .map(|i| std::fs::read_to_string(sb.log("logger", "stdout", i)).unwrap())
        .collect();
    assert_eq!(
        kept,
        expected[700..],
        "the newest 300 bytes survive, 100 per file"
    );
    for i in 7..10 {
        assert_eq!(
            std::fs::metadata(sb.log("logger", "stdout", i))
                .unwrap()
                .len(),
            100
        );
    }
    assert_eq!(sb.read_log("logger", "stderr"), "oops\n");
    sb.assert_no_leftovers();
}

#[rstest]
#[case::graceful("trap 'exit 3' TERM", Some(3), None)]
#[case::escalated("trap '' TERM", None, Some(libc::SIGKILL))]
#[serial]
fn stop_sends_the_signal_then_kills_after_the_grace(
    #[case] trap: &str,
    #[case] exit_code: Option<i32>,
    #[case] signal: Option<i32>,
) {
    let sb = Sandbox::new();
    let spec = sb.spec(
        "svc",
        &format!("{trap}; echo up > /local/ready; sleep 1000 & wait"),
    );
    let ready = sb.fifo("svc", "ready");
    let exec = sb.launch(&spec).expect("launch");
    let mut line = String::new();
    std::fs::File::open(&ready)
        .unwrap()
        .read_to_string(&mut line)
        .unwrap();
    assert_eq!(line, "up\n", "the trap is installed");
    // The graceful case gets a grace no machine is slow enough to use up,
    // so only the exit status tells the two apart; the escalated case's
    // grace is a lower bound on the time it took, which never flakes.
    let grace = if signal.is_some() {
        Duration::from_millis(500)
    } else {
        taskgate_faults::patience::scaled(Duration::from_secs(60))
    };
    let t0 = Instant::now();
    exec.stop(taskgate_executor::KillSignal::SIGTERM, grace, Doom::Kill)
        .expect("stop");
    let took = t0.elapsed();
    let result = exec.wait().expect("wait");
    assert_eq!(
        (result.exit_code, result.signal),
        (exit_code, signal),
        "{result:?}"
    );
    if signal.is_some() {
        assert!(took >= grace, "killed only after the grace ({took:?})");
    } else {
        assert!(
            took < grace,
            "the trap ended it within the grace ({took:?})"
        );
    }
    assert!(result.exited_at_ms >= result.started_at_ms);
    exec.shutdown().expect("shutdown");
    sb.assert_no_leftovers();
}

#[test]
#[serial]
fn chroot_escape_does_not_reach_the_host_root() {
    let sb = Sandbox::new();
    let marker = sb.path().join("HOST_MARKER");
    std::fs::write(&marker, "host").unwrap();
    // As root with CAP_SYS_CHROOT: climb with `..` from the task root, from
    // a nested busybox chroot, and through /proc/1/root.
    let script = r#"
        climb() { i=0; while [ $i -lt 40 ]; do cd ..; i=$((i+1)); done; }
        cd /; climb; cat ".$MARKER" 2>/dev/null || echo root-blocked
        mkdir -p /tmp/jail/bin && cp /bin/busybox /tmp/jail/bin/
        cd /tmp/jail/bin && chroot /tmp/jail /bin/busybox sh -c "
            i=0; while [ \$i -lt 40 ]; do cd ..; i=\$((i+1)); done
            /bin/busybox cat .$MARKER 2>/dev/null || echo jail-blocked"
        cat "/proc/1/root$MARKER" 2>/dev/null || echo proc-blocked
        ls /
    "#;
    let mut spec = sb.spec("esc", script);
    spec.env
        .insert("MARKER".into(), marker.to_string_lossy().into());
    let out = stdout_of(&sb, "esc", spec);
    assert!(!out.contains("host"), "the host marker was reached: {out}");
    assert!(
        out.starts_with("root-blocked\njail-blocked\nproc-blocked\n"),
        "{out}"
    );
    assert!(
        !out.contains("rootfs"),
        "the host temp dir is not the root: {out}"
    );
    sb.assert_no_leftovers();
}

/// One bad-input case: how to spoil a good spec, and the error it must give.
type Spoil = fn(&mut TaskSpec);

#[rstest]
#[case::relative_chroot_source(|s: &mut TaskSpec| { s.chroot_env.insert("rel/bin".into(), "/rbin".into()); },
    |e: &ExecutorError| matches!(e, ExecutorError::RelativePath { what, .. } if what == "chroot_env source"))]
#[case::relative_chroot_target(|s: &mut TaskSpec| { s.chroot_env.insert("/bin".into(), "rbin".into()); },
    |e: &ExecutorError| matches!(e, ExecutorError::RelativePath { what, .. } if what == "chroot_env target"))]
#[case::missing_chroot_source(|s: &mut TaskSpec| { s.chroot_env.insert("/nonexistent/bin".into(), "/x".into()); },
    |e: &ExecutorError| matches!(e, ExecutorError::PathMissing { what, .. } if what == "chroot_env source"))]
#[case::escaping_chroot_target(|s: &mut TaskSpec| { s.chroot_env.insert("/bin".into(), "/../x".into()); },
    |e: &ExecutorError| matches!(e, ExecutorError::UnsafePath { .. }))]
#[case::relative_task_dir(|s: &mut TaskSpec| s.task_dir = "alloc/web".into(),
    |e: &ExecutorError| matches!(e, ExecutorError::RelativePath { what, .. } if what == "task_dir"))]
#[case::missing_task_dir(|s: &mut TaskSpec| s.task_dir.push("gone"),
    |e: &ExecutorError| matches!(e, ExecutorError::TaskDirMissing { .. }))]
#[case::name_with_slash(|s: &mut TaskSpec| s.task_name = "a/b".into(),
    |e: &ExecutorError| matches!(e, ExecutorError::InvalidTaskName { .. }))]
#[case::name_with_dotdot(|s: &mut TaskSpec| s.task_name = "..".into(),
    |e: &ExecutorError| matches!(e, ExecutorError::InvalidTaskName { .. }))]
#[case::empty_name(|s: &mut TaskSpec| s.task_name = String::new(),
    |e: &ExecutorError| matches!(e, ExecutorError::InvalidTaskName { .. }))]
#[case::alloc_id_with_dot(|s: &mut TaskSpec| s.alloc_id.push_str(".x"),
    |e: &ExecutorError| matches!(e, ExecutorError::InvalidAllocId { .. }))]
#[case::no_command(|s: &mut TaskSpec| s.command = " ".into(),
    |e: &ExecutorError| matches!(e, ExecutorError::MissingCommand))]
#[case::zero_memory(|s: &mut TaskSpec| s.resources.memory_mb = 0,
    |e: &ExecutorError| matches!(e, ExecutorError::InvalidLimit { name, .. } if name == "memory_mb"))]
#[case::zero_pids(|s: &mut TaskSpec| s.resources.pids_max = 0,
    |e: &ExecutorError| matches!(e, ExecutorError::InvalidLimit { name, .. } if name == "pids_max"))]
#[case::unknown_user(|s: &mut TaskSpec| s.user = "no-such-user-tg".into(),
    |e: &ExecutorError| matches!(e, ExecutorError::UnknownUser { user } if user == "no-such-user-tg"))]
// Passes validation; fails inside the executor after cgroup and mounts exist.
#[case::command_not_in_root(|s: &mut TaskSpec| s.command = "/bin/no-such-tool".into(),
    |e: &ExecutorError| matches!(e, ExecutorError::Exec { command, .. } if command == "/bin/no-such-tool"))]
#[serial]
fn bad_input_gets_its_error_and_leaves_nothing(
    #[case] spoil: Spoil,
    #[case] expected: fn(&ExecutorError) -> bool,
) {
    let sb = Sandbox::new();
    let mut spec = sb.spec("web", "true");
    spoil(&mut spec);
    let err = sb.launch(&spec).expect_err("bad input must fail");
    assert!(expected(&err), "wrong error: {err:?} ({err})");
    sb.assert_no_leftovers();
}

/// A process outside the task that holds the write end of its stdout (a
/// sibling it handed the fd to; here the test, through `/proc`) does not
/// hold up its end: once the task is dead, what it wrote is drained and its
/// exit reported. (The log pumps waited for every writer to close, so the
/// stop, the wait and the shutdown hung, and with them a stop's kill waves.)
#[test]
#[serial]
fn a_stdout_held_outside_the_task_does_not_hold_up_its_end() {
    let sb = Sandbox::new();
    let spec = sb.spec(
        "svc",
        "echo logged; echo up > /local/ready; sleep 1000 & wait",
    );
    let ready = sb.fifo("svc", "ready");
    let exec = sb.launch(&spec).expect("launch");
    let mut line = String::new();
    (std::fs::File::open(&ready).unwrap())
        .read_to_string(&mut line)
        .unwrap();
    let task_pid = exec.reattach_info().task_pid;
    let held = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{task_pid}/fd/1"))
        .expect("the task's stdout, opened from outside");
    let (ended_tx, ended) = std::sync::mpsc::channel();
    let stopping = std::thread::spawn(move || {
        let stopped = exec.stop(
            taskgate_executor::KillSignal::SIGKILL,
            Duration::ZERO,
            Doom::Kill,
        );
        let waited = exec.wait();
        let _ = ended_tx.send(());
        (exec, stopped, waited)
    });
    let in_time = ended
        .recv_timeout(taskgate_faults::patience::step())
        .is_ok();
    // Let a hung executor go on before the checks, so nothing is left behind.
    drop(held);
    let (exec, stopped, waited) = stopping.join().unwrap();
    stopped.expect("stop");
    assert_eq!(waited.expect("wait").signal, Some(libc::SIGKILL));
    exec.shutdown().expect("shutdown");
    assert_eq!(sb.read_log("svc", "stdout"), "logged\n");
    sb.assert_no_leftovers();
    assert!(in_time, "the task's end waited for a writer outside it");
}

#[test]
#[serial]
fn reattach_gets_the_exit_result() {
    let sb = Sandbox::new();
    let spec = sb.spec("job", "read x < /local/go; exit 7");
    let go = sb.fifo("job", "go");
    let info = sb.launch(&spec).expect("launch").reattach_info();

    // The executor is a daemon of its own: a session leader no longer our child.
    let status = std::fs::read_to_string(format!("/proc/{}/stat", info.executor_pid)).unwrap();
    let fields: Vec<&str> = status.rsplit_once(") ").unwrap().1.split(' ').collect();
    assert_ne!(fields[1], std::process::id().to_string(), "parent");
    assert_eq!(fields[3], info.executor_pid.to_string(), "session id");
    // Whoever can connect can stop the task: its socket is root's alone.
    let socket_mode =
        std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(&info.socket_path).unwrap())
            & 0o777;
    assert_eq!(socket_mode, 0o600, "socket mode {socket_mode:o}");
    // Its fd 3 is the spec file, by which the oracle tells tasks apart.
    let fd3 = std::fs::read_link(format!("/proc/{}/fd/3", info.executor_pid)).unwrap();
    assert_eq!(
        fd3,
        sb.run_dir().join(format!("{}.job.spec.json", sb.alloc_id))
    );

    let again = sb
        .launch(&spec)
        .expect_err("a second executor for the same task");
    assert!(
        matches!(again, ExecutorError::AlreadyRunning { .. }),
        "{again:?}"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{}/fd/3", info.executor_pid)).unwrap(),
        fd3,
        "spec file intact"
    );

    let mut wrong = info.clone();
    wrong.task_pid += 1;
    assert!(matches!(
        Executor::reattach(&wrong),
        Err(ExecutorError::Protocol(_))
    ));

    let exec = Executor::reattach(&info).expect("reattach");
    let waiter = std::thread::spawn({
        let exec = exec.clone();
        move || exec.wait()
    });
    common::write_fifo(&go, "go\n");
    let result = waiter.join().unwrap().expect("wait");
    assert_eq!(result.exit_code, Some(7), "{result:?}");
    // An engine that lost the handle knows only the deterministic socket path.
    let pidless = ReattachInfo {
        socket_path: taskgate_executor::socket_path(&sb.run_dir(), &sb.alloc_id, "job"),
        executor_pid: 0,
        task_pid: 0,
    };
    let late = Executor::reattach(&pidless).expect("reattach after the exit");
    assert_eq!(
        late.reattach_info(),
        info,
        "the handle learns the real pids"
    );
    assert_eq!(late.wait().unwrap(), result);
    late.shutdown().expect("shutdown");
    assert!(Executor::reattach(&info).is_err(), "the executor is gone");
    sb.assert_no_leftovers();
}

/// A peek dooms a running task for its reason, the first reason stands,
/// and the executor keeps it past the task's end for whatever handle asks
/// next (a restored agent's); a task that ended before any peek is its own.
#[test]
#[serial]
fn a_peek_dooms_the_task_for_its_reason_and_any_handle_reads_it() {
    let sb = Sandbox::new();
    let spec = sb.spec("job", "read x < /local/go; exit 7");
    let go = sb.fifo("job", "go");
    let exec = sb.launch(&spec).expect("launch");
    assert_eq!(exec.doomed().unwrap(), None);
    assert_eq!(exec.own_end(Doom::Restart).unwrap(), ExitPeek::ToKill);
    assert_eq!(exec.own_end(Doom::Kill).unwrap(), ExitPeek::ToKill);
    common::write_fifo(&go, "go\n");
    assert_eq!(exec.wait().unwrap().exit_code, Some(7));
    let restored = Executor::reattach(&exec.reattach_info()).expect("reattach");
    assert_eq!(restored.doomed().unwrap(), Some(Doom::Restart));
    assert_eq!(restored.own_end(Doom::Kill).unwrap(), ExitPeek::ToKill);
    restored.shutdown().expect("shutdown");

    let own = sb.launch(&sb.spec("own", "exit 3")).expect("launch");
    let result = own.wait().unwrap();
    assert_eq!(
        own.own_end(Doom::Restart).unwrap(),
        ExitPeek::OwnEnd(result)
    );
    assert_eq!(own.doomed().unwrap(), None);
    own.shutdown().expect("shutdown");
    sb.assert_no_leftovers();
}

/// SIGKILLs `pid` and returns once it has exited (a pidfd tells, not a sleep).
fn kill_and_wait(pid: i32) {
    // SAFETY: plain syscalls; the fd is ours and closed below.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    assert!(pidfd >= 0, "pidfd_open({pid})");
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_send_signal, pidfd, libc::SIGKILL, 0, 0) };
    assert_eq!(rc, 0, "kill {pid}");
    let mut poll = libc::pollfd {
        fd: pidfd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; no timeout (the kernel reports the exit).
    while unsafe { libc::poll(&mut poll, 1, -1) } < 0 {}
    unsafe { libc::close(pidfd) };
}

/// B3 at the executor's layer: a task whose executor was SIGKILLed keeps
/// running (PID 1 of its namespace, in its own session); the next launch
/// of the task kills that tree before it starts anything, so the new
/// attempt never shares its cgroup with the old one.
#[test]
#[serial]
fn a_dead_executors_task_is_killed_before_the_next_launch() {
    let sb = Sandbox::new();
    let spec = sb.spec("web", "sleep 1000");
    let first = sb.launch(&spec).expect("launch").reattach_info();
    kill_and_wait(first.executor_pid);
    assert!(running(first.task_pid), "the orphaned task still runs");

    let second = sb.launch(&spec).expect("launch again");
    assert!(!running(first.task_pid), "the orphan was killed first");
    let info = second.reattach_info();
    assert_ne!(info.task_pid, first.task_pid);
    assert!(running(info.task_pid));
    second.shutdown().expect("shutdown");
    sb.assert_no_leftovers();
}

/// B4 at the executor's layer: the task's lock, not its socket, says
/// whether an executor lives. One whose socket is gone (as one that has not
/// bound it yet) still refuses a second launch, and `destroy_remains`
/// finds it from the kernel and kills it with its task.
#[test]
#[serial]
fn an_unreachable_executor_holds_its_task_until_destroyed() {
    let sb = Sandbox::new();
    let spec = sb.spec("web", "sleep 1000");
    let info = sb.launch(&spec).expect("launch").reattach_info();
    std::fs::remove_file(&info.socket_path).expect("unlink the socket");
    assert!(Executor::reattach(&info).is_err(), "unreachable");

    let again = sb.launch(&spec).expect_err("a second executor");
    assert!(
        matches!(again, ExecutorError::AlreadyRunning { .. }),
        "{again:?}"
    );

    let remains =
        taskgate_executor::destroy_remains(&sb.config(), &sb.alloc_id, "web").expect("destroy");
    assert_eq!(remains.executors, [info.executor_pid], "{remains}");
    assert!(remains.task_processes.contains(&info.task_pid), "{remains}");
    assert!(!running(info.executor_pid) && !running(info.task_pid));
    sb.assert_no_leftovers();
    // With nothing left, destroying again finds nothing.
    let none =
        taskgate_executor::destroy_remains(&sb.config(), &sb.alloc_id, "web").expect("destroy");
    assert!(none.is_empty(), "{none}");
    sb.assert_no_leftovers();
}

/// A process that is no executor can hold a task's lock for a while: a
/// launcher's fork child (another task's launch, in a multi-threaded agent)
/// has a copy of every fd of its process, the lock among them, until its
/// exec closes them, and the kernel lets go of the lock only once that exec
/// is done, when the fd no longer shows in /proc. `destroy_remains` and
/// `launch` wait for such a holder and kill nothing of it. (The parallel
/// gate saw both faces: an innocent executor start SIGKILLed, and a destroy
/// failing on "locked by a process this one cannot see", which left a task
/// running after its executor's death.)
#[cfg(feature = "failpoints")]
#[test]
#[serial]
fn a_lock_held_by_no_executor_is_waited_for_not_killed() {
    let sb = Sandbox::new();
    let lock = taskgate_executor::lock_path(&sb.run_dir(), &sb.alloc_id, "web");
    let with = |launcher_faults| taskgate_executor::ExecutorConfig {
        launcher_faults,
        ..sb.config()
    };
    let destroyed = with_stand_in_holder(&lock, |faults| {
        taskgate_executor::destroy_remains(&with(faults), &sb.alloc_id, "web")
    });
    assert!(destroyed.expect("destroy").is_empty());

    let spec = sb.spec("web", "true");
    let launched = with_stand_in_holder(&lock, |faults| sb.launch_with(&with(faults), &spec))
        .expect("launch once the holder let go");
    assert_eq!(launched.wait().expect("wait").exit_code, Some(0));
    launched.shutdown().expect("shutdown");
    sb.assert_no_leftovers();
}

/// Runs `op`, given the launcher faults to run with, while a stand-in for
/// a launcher's fork child (a `cat` that inherited the locked lock file)
/// holds `lock`. `op` parks at `ex.lock_waited` once it waits for the
/// stand-in, which lets go only then: the wait, not a race, is what the
/// test sees. Panics if the stand-in was killed.
#[cfg(feature = "failpoints")]
fn with_stand_in_holder<T: Send>(
    lock: &Path,
    op: impl FnOnce(taskgate_faults::Faults) -> T + Send,
) -> T {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use taskgate_faults::{points::EX_LOCK_WAITED, Action, Await, Faults, PointName};
    let faults = Faults::new();
    faults.configure(Some("web"), EX_LOCK_WAITED, Action::Park);
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock)
        .unwrap();
    // SAFETY: plain syscall on an fd this test owns.
    assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0);
    let raw = file.as_raw_fd();
    let mut command = std::process::Command::new("/bin/busybox");
    command
        .arg("cat")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null());
    // SAFETY: only dup2, async-signal-safe, between fork and exec; the copy
    // on fd 7 is not close-on-exec, so the stand-in keeps the lock.
    unsafe {
        command.pre_exec(move || match libc::dup2(raw, 7) {
            -1 => Err(std::io::Error::last_os_error()),
            _ => Ok(()),
        })
    };
    let mut holder = command.spawn().expect("spawn the stand-in");
    drop(file);
    let parked = PointName::new(Some("web"), EX_LOCK_WAITED).to_string();
    std::thread::scope(|scope| {
        let given = faults.clone();
        let op = scope.spawn(move || op(given));
        let waits = faults.wait_any(&[Await::Parked(parked)], taskgate_faults::patience::step());
        drop(holder.stdin.take());
        let status = holder.wait().expect("wait for the stand-in");
        // Let the op finish before any verdict, so a failing test leaves
        // nothing parked (and the sandbox's drop shuts down what it launched).
        faults.release(Some("web"), EX_LOCK_WAITED);
        let done = op.join().expect("the op panicked");
        if status.signal().is_some() {
            panic!("killed a holder of the lock that is no executor ({status})");
        }
        waits.expect("the op waits for the stand-in");
        done
    })
}

#[cfg(feature = "failpoints")]
#[rstest]
#[case::error_after_cgroup(taskgate_faults::points::EX_AFTER_CGROUP, "error")]
#[case::error_after_mounts(taskgate_faults::points::EX_AFTER_MOUNTS, "error")]
#[case::error_before_exec(taskgate_faults::points::EX_BEFORE_EXEC, "error")]
#[case::executor_killed_after_cgroup(taskgate_faults::points::EX_AFTER_CGROUP, "kill")]
#[case::executor_panics_after_cgroup(taskgate_faults::points::EX_AFTER_CGROUP, "panic")]
#[serial]
fn injected_executor_faults_fail_cleanly(#[case] point: &str, #[case] action: &str) {
    let sb = Sandbox::new();
    let spec = sb.spec("web", "true");
    let config = taskgate_executor::ExecutorConfig {
        faults: taskgate_executor::ExecutorFaults {
            spec: Some(format!("web:{point}={action}")),
            log: None,
        },
        ..sb.config()
    };
    let result = taskgate_executor::launch(&config, &spec);
    match (action, result) {
        ("error", Err(ExecutorError::Injected(msg))) => assert!(msg.contains(point), "{msg}"),
        // The executor died holding a cgroup: launch() removes it.
        (_, Err(ExecutorError::Vanished { .. })) if action != "error" => {}
        (_, other) => panic!("unexpected outcome of {action} at {point}: {other:?}"),
    }
    sb.assert_no_leftovers();
}

/// The device allow-list, read back from the kernel while the task runs: on
/// v1 the task cgroup's `devices.list`, on v2 the eBPF program attached to
/// it, decoded. Either way exactly `DEFAULT_DEVICES`, and nothing else.
#[test]
#[serial]
fn the_kernel_holds_exactly_the_device_allow_list() {
    use taskgate_executor::device_filter::{DeviceRule, DEFAULT_DEVICES};
    let sb = Sandbox::new();
    let spec = sb.spec("dev", "read x < /local/go");
    let go = sb.fifo("dev", "go");
    let exec = sb.launch(&spec).expect("launch");
    let task = common::cgroups_of(&exec.reattach_info().task_pid.to_string());
    let cg = PathBuf::from("/sys/fs/cgroup");
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        let programs =
            taskgate_executor::device_filter::read_back(&cg.join(&task[""])).expect("read back");
        assert_eq!(programs, [DEFAULT_DEVICES.to_vec()]);
    } else {
        let list = std::fs::read_to_string(
            cg.join("devices")
                .join(&task["devices"])
                .join("devices.list"),
        )
        .expect("devices.list of the task cgroup");
        let mut held: Vec<&str> = list.lines().collect();
        let mut want: Vec<String> = DEFAULT_DEVICES.iter().map(DeviceRule::v1_entry).collect();
        held.sort_unstable();
        want.sort_unstable();
        assert_eq!(held, want);
    }
    common::write_fifo(&go, "go\n");
    assert!(exec.wait().expect("wait").successful());
    exec.shutdown().expect("shutdown");
    sb.assert_no_leftovers();
}
