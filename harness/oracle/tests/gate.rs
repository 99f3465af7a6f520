//! Privileged tests of the exec gate on a real marked tmpfs.
//!
//! Host safety: each test body runs in a re-exec'd copy of this test binary
//! (`<name> --exact`) that [`enter_private_mount_namespace`] moved, as a whole
//! process, into a private mount namespace between fork and exec. Unsharing in
//! place would not do: cargo's test harness is multithreaded, and there
//! `unshare(CLONE_NEWNS)` moves only the calling thread. Forking the test
//! process without exec would leave a child that may only make
//! async-signal-safe calls. The child checks it really is in another
//! namespace before mounting anything; the parent checks that no marked tmpfs
//! ever showed up on the host.
//!
//! No sleeps: tests wait on channels, on process exit, or (where the only
//! witness is the kernel) on `/proc` showing a process asleep in the
//! fanotify wait; every wait has a deadline only as a safety net.

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use taskgate_oracle::marked_fs::mounts;
use taskgate_oracle::{
    enter_private_mount_namespace, Answer, ExecGate, ExecIdentity, Judge, MarkedFs, OracleError,
    PendingExec, Verdict, MARKED_FS_SOURCE,
};

const CHILD_ENV: &str = "TASKGATE_ORACLE_GATE_TEST";
const HOST_NS_ENV: &str = "TASKGATE_ORACLE_HOST_MNT_NS";
/// Safety net against a hung exec or gate, scaled to the machine's speed;
/// never a synchronisation device.
fn deadline() -> Duration {
    taskgate_faults::patience::scaled(Duration::from_secs(60))
}

fn require_root() {
    if !nix::unistd::Uid::effective().is_root() {
        panic!("this test needs root (fanotify permission events): run as root");
    }
}

fn mount_ns() -> PathBuf {
    std::fs::read_link("/proc/thread-self/ns/mnt").unwrap()
}

fn to_io(e: OracleError) -> io::Error {
    match e {
        OracleError::Sys { errno, .. } => io::Error::from_raw_os_error(errno as i32),
        other => io::Error::other(other.to_string()),
    }
}

/// Runs `body` in a child copy of this test binary that lives in a private
/// mount namespace; see the module docs.
fn isolated(name: &str, body: impl FnOnce()) {
    require_root();
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        let host = std::env::var_os(HOST_NS_ENV).expect("host namespace passed by the parent");
        assert_ne!(
            mount_ns().as_os_str(),
            host,
            "the test child must not share the host's mount namespace"
        );
        return body();
    }
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .env(HOST_NS_ENV, mount_ns())
        .env("RUST_BACKTRACE", "1");
    // SAFETY: enter_private_mount_namespace only makes system calls.
    unsafe { cmd.pre_exec(|| enter_private_mount_namespace().map_err(to_io)) };
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "isolated child for {name} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    let leaked: Vec<_> = mounts()
        .unwrap()
        .into_iter()
        .filter(|m| m.source == MARKED_FS_SOURCE)
        .collect();
    assert!(
        leaked.is_empty(),
        "marked tmpfs visible on the host: {leaked:?}"
    );
}

/// A marked tmpfs holding a busybox root, under a temporary directory.
struct Fixture {
    fs: Option<MarkedFs>,
    mount_point: PathBuf,
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mount_point = dir.path().join("marked");
        std::fs::create_dir(&mount_point).unwrap();
        let fs = MarkedFs::mount(&mount_point).unwrap();
        let mount_point = fs.path().to_path_buf();
        assert!(mounts()
            .unwrap()
            .iter()
            .any(|m| m.mount_point == mount_point && m.source == MARKED_FS_SOURCE));
        taskgate_executor::build_busybox_root(&mount_point).unwrap();
        Fixture {
            fs: Some(fs),
            mount_point,
            dir,
        }
    }

    fn busybox(&self) -> PathBuf {
        self.mount_point.join("bin/busybox")
    }

    /// A second binary on the marked fs, for judges that tell execs apart by file.
    fn denied(&self) -> PathBuf {
        let p = self.mount_point.join("bin/denied");
        if !p.exists() {
            std::fs::copy(self.busybox(), &p).unwrap();
        }
        p
    }

    /// Unmounts and checks that nothing is left mounted there.
    fn finish(mut self) {
        drop(self.fs.take());
        let left: Vec<_> = mounts()
            .unwrap()
            .into_iter()
            .filter(|m| m.mount_point == self.mount_point)
            .collect();
        assert!(left.is_empty(), "still mounted after drop: {left:?}");
        assert!(std::fs::read_dir(&self.mount_point)
            .unwrap()
            .next()
            .is_none());
    }
}

fn judge(f: impl Fn(&PendingExec) -> Verdict + Send + Sync + 'static) -> Judge {
    Arc::new(f)
}

/// Runs `f` on a thread and fails the test if it does not finish in time.
fn within_deadline<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(deadline())
        .unwrap_or_else(|_| panic!("{what} did not finish within {:?}", deadline()))
}

/// Spin-waits for a condition only the kernel can witness.
fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let until = Instant::now() + deadline();
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// Whether `pid` is asleep in the kernel waiting for a fanotify verdict.
fn waits_for_verdict(pid: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.contains("fanotify"))
}

/// Forks a child that only execs `exe` (async-signal-safe in the child), so
/// that its pid is known while its exec is still paused.
fn fork_exec(exe: &Path, args: &[&str]) -> Pid {
    let exe = CString::new(exe.as_os_str().as_encoded_bytes()).unwrap();
    let argv: Vec<CString> = std::iter::once(c"busybox".to_owned())
        .chain(args.iter().map(|a| CString::new(*a).unwrap()))
        .collect();
    // SAFETY: the child calls only execv and _exit.
    match unsafe { fork() }.unwrap() {
        ForkResult::Child => {
            let _ = nix::unistd::execv(&exe, &argv);
            unsafe { libc::_exit(127) }
        }
        ForkResult::Parent { child } => child,
    }
}

fn exit_code(pid: Pid) -> i32 {
    match waitpid(pid, None).unwrap() {
        WaitStatus::Exited(_, code) => code,
        other => panic!("{pid} ended with {other:?}"),
    }
}

#[test]
fn allowed_exec_runs_and_denied_exec_fails() {
    isolated("allowed_exec_runs_and_denied_exec_fails", || {
        let fx = Fixture::new();
        let denied = fx.denied();
        let mut gate = ExecGate::start(
            &fx.mount_point,
            judge(|e| match e.exe.file_name().and_then(|n| n.to_str()) {
                Some("denied") => Verdict::Deny("test denies this file".into()),
                _ => Verdict::Allow,
            }),
        )
        .unwrap();

        let mut child = Command::new(fx.busybox())
            .args(["sh", "-c", "exit 7"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert_eq!(
            child.wait().unwrap().code(),
            Some(7),
            "the allowed exec ran"
        );

        let err = Command::new(&denied)
            .arg0("busybox")
            .arg("true")
            .status()
            .unwrap_err();
        let errno = err.raw_os_error();
        assert!(
            errno == Some(libc::EPERM) || errno == Some(libc::EACCES),
            "denied exec failed with {err}"
        );

        // A file outside the marked fs is not gated at all.
        assert!(Command::new("/bin/busybox")
            .arg("true")
            .status()
            .unwrap()
            .success());

        let d = gate.decisions();
        assert_eq!(d.len(), 2, "{d:#?}");
        assert_eq!(
            (d[0].seq, d[0].pid, &d[0].exe, d[0].verdict),
            (1, pid, &fx.busybox(), Answer::Allow)
        );
        assert_eq!(d[0].identity, ExecIdentity::Unknown);
        assert!(d[0].judged && d[0].reason.is_empty());
        assert_eq!(
            (d[1].seq, &d[1].exe, d[1].verdict),
            (2, &denied, Answer::Deny)
        );
        assert_eq!(d[1].reason, "test denies this file");

        within_deadline("stop", move || {
            gate.stop().unwrap();
            gate
        });
        // Stopping closed the group, and with it the mark.
        assert!(Command::new(&denied)
            .arg0("busybox")
            .arg("true")
            .status()
            .unwrap()
            .success());
        fx.finish();
    });
}

#[test]
fn exec_through_a_bind_mount_in_another_namespace_is_gated() {
    isolated(
        "exec_through_a_bind_mount_in_another_namespace_is_gated",
        || {
            let fx = Fixture::new();
            let gate =
                ExecGate::start(&fx.mount_point, judge(|_| Verdict::Deny("deny all".into())))
                    .unwrap();
            let elsewhere = fx.dir.path().join("elsewhere");
            std::fs::create_dir(&elsewhere).unwrap();
            let bin = fx.mount_point.join("bin");
            let target = elsewhere.clone();
            let mut cmd = Command::new(elsewhere.join("busybox"));
            cmd.arg("true");
            // SAFETY: only system calls (paths are short: nix uses a stack buffer).
            unsafe {
                cmd.pre_exec(move || {
                    enter_private_mount_namespace().map_err(to_io)?;
                    nix::mount::mount(
                        Some(&bin),
                        &target,
                        None::<&str>,
                        nix::mount::MsFlags::MS_BIND,
                        None::<&str>,
                    )
                    .map_err(|e| io::Error::from_raw_os_error(e as i32))
                })
            };
            let err = cmd.status().unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
            let d = gate.decisions();
            assert_eq!(d.len(), 1, "{d:#?}");
            assert_eq!(d[0].verdict, Answer::Deny);
            assert_eq!(d[0].exe.file_name().unwrap(), "busybox", "{:?}", d[0].exe);
            drop(gate);
            fx.finish();
        },
    );
}

#[test]
fn identity_of_executor_and_task_processes() {
    isolated("identity_of_executor_and_task_processes", || {
        let fx = Fixture::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let gate = ExecGate::start(
            &fx.mount_point,
            judge(move |e| {
                log.lock().unwrap().push(e.clone());
                Verdict::Allow
            }),
        )
        .unwrap();

        // An executor: the engine hands it `<alloc>.<task>.spec.json` on fd 3.
        let spec_path = fx.dir.path().join("a1.web.front.spec.json");
        std::fs::write(&spec_path, "{}").unwrap();
        let spec = File::open(&spec_path).unwrap();
        let spec_fd = spec.as_raw_fd();
        let mut cmd = Command::new(fx.busybox());
        cmd.arg("true");
        // SAFETY: dup2 is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                nix::unistd::dup2(spec_fd, 3)
                    .map(drop)
                    .map_err(|e| io::Error::from_raw_os_error(e as i32))
            })
        };
        let mut child = cmd.spawn().unwrap();
        let executor_pid = child.id() as i32;
        assert!(child.wait().unwrap().success());

        // A task: a process in the cgroup `taskgate.<alloc>.<task>`.
        let cgroup2 = mounts()
            .unwrap()
            .into_iter()
            .find(|m| m.fstype == "cgroup2")
            .expect("this test needs a cgroup2 mount (for the task identity)")
            .mount_point;
        let alloc = format!("t{}", std::process::id());
        let cg = cgroup2.join(format!("taskgate.{alloc}.api.v2"));
        std::fs::create_dir(&cg).unwrap();
        let procs: OwnedFd = File::options()
            .write(true)
            .open(cg.join("cgroup.procs"))
            .unwrap()
            .into();
        let mut cmd = Command::new(fx.busybox());
        cmd.arg("true");
        // SAFETY: write(2) only; "0" moves the writing process itself.
        unsafe {
            cmd.pre_exec(move || {
                nix::unistd::write(&procs, b"0")
                    .map(drop)
                    .map_err(|e| io::Error::from_raw_os_error(e as i32))
            })
        };
        let mut child = cmd.spawn().unwrap();
        let task_pid = child.id() as i32;
        let status = child.wait().unwrap();
        std::fs::remove_dir(&cg).unwrap();
        assert!(status.success(), "{status:?}");

        let seen = seen.lock().unwrap().clone();
        let ids: Vec<_> = seen.iter().map(|e| (e.pid, e.identity.clone())).collect();
        assert_eq!(
            ids,
            [
                (
                    executor_pid,
                    ExecIdentity::Executor {
                        alloc_id: "a1".into(),
                        task: "web.front".into()
                    }
                ),
                (
                    task_pid,
                    ExecIdentity::Task {
                        alloc_id: alloc,
                        task: "api.v2".into()
                    }
                ),
            ]
        );
        assert_eq!(
            gate.decisions()
                .iter()
                .map(|r| r.identity.clone())
                .collect::<Vec<_>>(),
            ids.into_iter().map(|i| i.1).collect::<Vec<_>>()
        );
        drop(gate);
        fx.finish();
    });
}

#[test]
fn judge_panic_denies_and_the_gate_goes_on() {
    isolated("judge_panic_denies_and_the_gate_goes_on", || {
        let fx = Fixture::new();
        let mut gate = ExecGate::start(&fx.mount_point, judge(|_| panic!("boom"))).unwrap();
        for _ in 0..2 {
            let err = Command::new(fx.busybox()).arg("true").status().unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
        }
        let d = gate.decisions();
        assert_eq!(
            d.iter().map(|r| (r.seq, r.verdict)).collect::<Vec<_>>(),
            [(1, Answer::Deny), (2, Answer::Deny)]
        );
        assert_eq!(d[0].reason, "judge panicked: boom");
        gate.stop().unwrap();
        fx.finish();
    });
}

#[test]
fn stop_without_events_returns() {
    isolated("stop_without_events_returns", || {
        let fx = Fixture::new();
        let mount_point = fx.mount_point.clone();
        within_deadline("stop with nothing in flight", move || {
            let mut gate = ExecGate::start(&mount_point, judge(|_| Verdict::Allow)).unwrap();
            gate.stop().unwrap();
            gate.stop().unwrap();
            assert!(gate.decisions().is_empty());
            // Dropping a running gate stops it too.
            drop(ExecGate::start(&mount_point, judge(|_| Verdict::Allow)).unwrap());
        });
        assert!(Command::new(fx.busybox())
            .arg("true")
            .status()
            .unwrap()
            .success());
        fx.finish();
    });
}

#[test]
fn stop_with_execs_in_flight_answers_every_one() {
    isolated("stop_with_execs_in_flight_answers_every_one", || {
        let fx = Fixture::new();
        // The judge holds the first exec until released; any later one is allowed.
        let (entered_tx, entered_rx) = mpsc::channel::<i32>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let hold = Mutex::new(Some((entered_tx, release_rx)));
        let mut gate = ExecGate::start(
            &fx.mount_point,
            judge(move |e| {
                let held = hold.lock().unwrap().take();
                if let Some((entered, release)) = held {
                    entered.send(e.pid).unwrap();
                    release.recv().unwrap();
                }
                Verdict::Allow
            }),
        )
        .unwrap();

        let first = fork_exec(&fx.busybox(), &["true"]);
        assert_eq!(entered_rx.recv_timeout(deadline()).unwrap(), first.as_raw());

        // Stop while the judge holds the first exec; the gate's thread cannot
        // finish yet. The stopper is past signalling once it blocks in join.
        let (tid_tx, tid_rx) = mpsc::channel();
        let stopper = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid()).unwrap();
            let result = gate.stop();
            (result, gate.decisions())
        });
        let tid = tid_rx.recv().unwrap();
        wait_for("the stopper to block joining the gate thread", || {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/wchan"))
                .is_ok_and(|w| w.contains("futex"))
        });

        // Two more execs queue up in the kernel behind the held one.
        let queued = [
            fork_exec(&fx.busybox(), &["true"]),
            fork_exec(&fx.busybox(), &["true"]),
        ];
        for pid in queued {
            wait_for("a queued exec to wait for its verdict", || {
                waits_for_verdict(pid)
            });
        }
        assert!(waits_for_verdict(first));

        release_tx.send(()).unwrap();
        let (result, d) =
            within_deadline("stop with execs in flight", move || stopper.join().unwrap());
        result.unwrap();
        for pid in [first].iter().chain(&queued) {
            assert_eq!(exit_code(*pid), 0, "exec of {pid} went through");
        }
        let summary: Vec<_> = d.iter().map(|r| (r.pid, r.verdict, r.judged)).collect();
        assert_eq!(summary[0], (first.as_raw(), Answer::Allow, true));
        let mut rest: Vec<_> = summary[1..].to_vec();
        rest.sort_by_key(|r| r.0);
        let mut want: Vec<_> = queued
            .iter()
            .map(|p| (p.as_raw(), Answer::Allow, false))
            .collect();
        want.sort_by_key(|r| r.0);
        assert_eq!(rest, want, "queued execs allowed unjudged: {d:#?}");
        assert!(d[1..]
            .iter()
            .all(|r| r.reason == "gate stopping: allowed unjudged"));
        fx.finish();
    });
}

#[test]
fn refuses_to_mark_anything_but_a_tmpfs_root() {
    isolated("refuses_to_mark_anything_but_a_tmpfs_root", || {
        let fx = Fixture::new();
        let allow = || judge(|_| Verdict::Allow);
        for path in [
            Path::new("/"),
            &fx.mount_point.join("bin"),
            fx.dir.path(),
            Path::new("/dev/shm"),
        ] {
            assert!(
                matches!(
                    ExecGate::start(path, allow()),
                    Err(OracleError::NotMarkedFs(_))
                ),
                "{path:?} must be refused"
            );
        }
        assert!(matches!(
            MarkedFs::mount(&fx.mount_point),
            Err(OracleError::NotEmpty(_))
        ));
        fx.finish();
    });
}

#[test]
fn marked_fs_refuses_the_host_namespace() {
    require_root();
    // Runs in the host namespace on purpose: the guard must hold there.
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        MarkedFs::mount(dir.path()),
        Err(OracleError::HostNamespace)
    ));
    assert!(!mounts()
        .unwrap()
        .iter()
        .any(|m| m.source == MARKED_FS_SOURCE));
}

#[test]
fn unshare_in_a_multithreaded_process_moves_only_the_calling_thread() {
    require_root();
    // The test harness has other threads; this one leaves the host namespace
    // (no mounts are made, and the namespace dies with the thread).
    let host = mount_ns();
    let (ns, other) = std::thread::spawn(move || {
        enter_private_mount_namespace().unwrap();
        let leader =
            std::fs::read_link(format!("/proc/self/task/{}/ns/mnt", std::process::id())).unwrap();
        (mount_ns(), leader)
    })
    .join()
    .unwrap();
    assert_ne!(ns, host);
    assert_eq!(
        other, host,
        "threads that already existed stay in the host namespace"
    );
    assert_eq!(mount_ns(), host);
}
