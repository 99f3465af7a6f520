//! The escape catalogue: attempts to reach the host from inside a real task,
//! each run as root and as nobody, each expected to fail in a named way.
//! Nothing here damages the host: kernel tunables and triggers are opened
//! for writing, never written. Run as root:
//! `cargo test --features failpoints --test escapes -- --test-threads=1`.

mod common;

use common::Sandbox;
use rstest::rstest;
use serial_test::serial;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Runs `script` (busybox sh) as `user` in a fresh task and returns what it
/// printed. Every attempt prints `ESCAPED` if it got through, else `held`
/// and what stopped it; the task itself must exit 0.
fn attempt(user: &str, script: &str) -> String {
    let sb = Sandbox::new();
    let mut spec = sb.spec("t", script);
    spec.user = user.to_string();
    let exec = sb.launch(&spec).expect("launch");
    let result = exec.wait().expect("wait");
    exec.shutdown().expect("shutdown");
    let out = sb.read_log("t", "stdout");
    let err = sb.read_log("t", "stderr");
    assert!(
        result.successful(),
        "{result:?}\nstdout: {out}\nstderr: {err}"
    );
    assert!(!out.contains("ESCAPED"), "as {user}: {out}\nstderr: {err}");
    sb.assert_no_leftovers();
    out
}

/// `try WHAT CMD...`: runs CMD; prints `ESCAPED: WHAT` if it succeeded,
/// else `held: WHAT: <its error>`.
const TRY: &str = r#"try() { what=$1; shift; if out=$("$@" 2>&1); then echo "ESCAPED: $what"; else echo "held: $what: $out"; fi; }; "#;

/// Each of `attempts` was tried and held.
fn assert_held(out: &str, attempts: &[&str]) {
    for what in attempts {
        assert!(out.contains(&format!("held: {what}")), "{what}: {out}");
    }
}

fn script(body: &str) -> String {
    format!("{TRY}{body}")
}

/// The classic escape: `core_pattern` set to `|/host/program` runs it as
/// host root on the next crash. /proc/sys is read-only (opened, not written).
#[rstest]
#[serial]
fn kernel_tunables_cannot_be_opened_for_writing(#[values("root", "nobody")] user: &str) {
    let out = attempt(
        user,
        &script(
            "try core_pattern sh -c 'exec 3>>/proc/sys/kernel/core_pattern'; \
             try drop_caches sh -c 'exec 3>>/proc/sys/vm/drop_caches'; \
             try sysrq sh -c 'exec 3>>/proc/sysrq-trigger'",
        ),
    );
    assert_held(&out, &["core_pattern", "drop_caches", "sysrq"]);
    if user == "root" {
        // Root passes the permission check: the read-only mount stops it.
        assert!(out.contains("Read-only file system"), "{out}");
    }
}

/// Kernel memory and the keyring are masked: /dev/null stands in for them.
#[rstest]
#[serial]
fn kernel_memory_and_keys_are_masked(#[values("root", "nobody")] user: &str) {
    let out = attempt(
        user,
        &script(
            "for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug; do \
               [ -e $f ] || { echo \"held: $f absent\"; continue; }; \
               if [ -c $f ] && [ $(cat $f | wc -c) = 0 ]; then echo \"held: $f masked\"; \
               else echo \"ESCAPED: $f readable\"; fi; done",
        ),
    );
    // This kernel may have no /proc/kcore; the keyring is always there.
    assert_held(&out, &["/proc/kcore", "/proc/keys masked"]);
}

/// Mounting, a cgroupfs to write, the host's root through /proc/1/root,
/// joining pid 1's namespaces (pid 1 is the task itself; host pids, to
/// signal or ptrace, have no number in its PID namespace): none.
#[rstest]
#[serial]
fn mounts_cgroups_and_the_hosts_root_are_out_of_reach(#[values("root", "nobody")] user: &str) {
    let out = attempt(
        user,
        &script(
            "mkdir -p /tmp/m; \
             try mount_tmpfs mount -t tmpfs x /tmp/m; \
             try mount_cgroup2 mount -t cgroup2 none /tmp/m; \
             try cgroupfs test -e /sys/fs/cgroup; \
             try host_root_via_proc test -e /proc/1/root/var; \
             try setns_pid1 nsenter -t 1 -m -u -i -n -p true; \
             try host_root_dotdot test -e /../../var",
        ),
    );
    assert_held(
        &out,
        &[
            "mount_tmpfs",
            "mount_cgroup2",
            "cgroupfs",
            "host_root_via_proc",
            "setns_pid1",
            "host_root_dotdot",
        ],
    );
}

/// Hard limits cannot be raised (no CAP_SYS_RESOURCE, even for root).
#[rstest]
#[serial]
fn hard_rlimits_cannot_be_raised(#[values("root", "nobody")] user: &str) {
    let out = attempt(user, &script("try nofile sh -c 'ulimit -Hn 4096'"));
    assert_held(&out, &["nofile"]);
}

/// The task's own binary cannot be opened for writing through
/// /proc/self/exe (CVE-2019-5736 overwrote runc's this way): the executor
/// is not in the task's PID namespace, and the task's root is read-only.
#[rstest]
#[serial]
fn the_binary_behind_proc_self_exe_cannot_be_overwritten(#[values("root", "nobody")] user: &str) {
    let out = attempt(
        user,
        &script(
            "try self_exe sh -c 'exec 3>>/proc/self/exe'; \
             try other_exe sh -c 'for p in /proc/[0-9]*; do [ \"$(readlink $p/exe)\" = /bin/busybox ] || exit 0; done; exit 1'",
        ),
    );
    assert_held(&out, &["self_exe", "other_exe"]);
}

/// A setuid-root copy of busybox in the task's own dir gives nobody nothing:
/// the task dirs are mounted nosuid, and no_new_privs would stop it anyway.
#[test]
#[serial]
fn a_setuid_binary_gives_no_privileges() {
    let sb = Sandbox::new();
    // Named busybox: busybox picks its applet from the name it runs under.
    let mut spec = sb.spec("t", "/local/busybox id -u");
    spec.user = "nobody".into();
    let suid = sb.task_dir("t").join("local/busybox");
    std::fs::copy("/bin/busybox", &suid).expect("copy busybox");
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let exec = sb.launch(&spec).expect("launch");
    assert!(exec.wait().expect("wait").successful());
    exec.shutdown().expect("shutdown");
    assert_eq!(sb.read_log("t", "stdout").trim(), "65534");
    sb.assert_no_leftovers();
}

/// Another task's private dirs are not in this task's root at all.
#[rstest]
#[serial]
fn another_tasks_dirs_are_invisible(#[values("root", "nobody")] user: &str) {
    let sb = Sandbox::new();
    let other = sb.spec("other", "true");
    std::fs::write(other.task_dir.join("local/private"), "secret").unwrap();
    let mut spec = sb.spec(
        "t",
        &script(
            "try other_local sh -c 'cat /alloc/../other/local/private || cat /../other/local/private'; \
             try find_private sh -c 'find / -name private -xdev 2>/dev/null | grep -q private'",
        ),
    );
    spec.user = user.to_string();
    let exec = sb.launch(&spec).expect("launch");
    assert!(exec.wait().expect("wait").successful());
    exec.shutdown().expect("shutdown");
    let out = sb.read_log("t", "stdout");
    assert!(!out.contains("ESCAPED"), "{out}");
    assert_held(&out, &["other_local", "find_private"]);
    sb.assert_no_leftovers();
}

/// A block device node, created where nothing forbids device nodes (the
/// host's /tmp, mounted without nodev), cannot be opened by a process in the
/// task's cgroup: the device allow-list stops it (v1 devices controller or
/// v2 eBPF program). Opened read-only; nothing is ever written to a device.
#[test]
#[serial]
fn a_block_device_cannot_be_opened_from_the_task_cgroup() {
    let sb = Sandbox::new();
    let spec = sb.spec("t", "read x < /local/go");
    let go = sb.task_dir("t").join("local/go");
    nix::unistd::mkfifo(&go, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let exec = sb.launch(&spec).expect("launch");
    let task_pid = exec.reattach_info().task_pid;
    let procs = cgroup_procs_of(task_pid);
    let node = sb.path().join("disk-node");
    let flags = nix::sys::statvfs::statvfs(sb.path()).unwrap().flags();
    assert!(
        !flags.contains(nix::sys::statvfs::FsFlags::ST_NODEV),
        "{} is mounted nodev: the test would prove nothing",
        sb.path().display()
    );
    // A host shell joins the task's cgroup (every hierarchy that has a
    // device list), creates the node and tries to read from it.
    let out = std::process::Command::new("/bin/busybox")
        .args(["sh", "-c"])
        .arg(format!(
            "for f in {procs}; do echo $$ > $f || exit 9; done; \
             mknod {node} b 8 0 || exit 8; \
             if (exec 3<{node}) 2>/dev/null; then echo ESCAPED; else echo held; fi",
            procs = procs.join(" "),
            node = node.display()
        ))
        .output()
        .expect("run the helper");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout.trim(), "held", "{out:?}");
    assert!(
        node.exists(),
        "the node was created: only opening it is refused"
    );
    std::fs::remove_file(&node).unwrap();
    common::write_fifo(&go, "go\n");
    assert!(exec.wait().expect("wait").successful());
    exec.shutdown().expect("shutdown");
    sb.assert_no_leftovers();
}

/// The `cgroup.procs` files of the task's cgroups that carry its device
/// list: v1's devices hierarchy, or v2's unified one.
fn cgroup_procs_of(pid: i32) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let unified = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
            let dir = if unified && ctrls.is_empty() {
                format!("/sys/fs/cgroup{path}")
            } else if ctrls.split(',').any(|c| c == "devices") {
                format!("/sys/fs/cgroup/devices{path}")
            } else {
                return None;
            };
            Some(format!("{dir}/cgroup.procs"))
        })
        .collect()
}

/// No new user namespace, where the task would hold every capability again
/// (the seccomp filter answers EPERM, so a program can fall back).
#[rstest]
#[serial]
fn user_namespaces_cannot_be_created(#[values("root", "nobody")] user: &str) {
    let out = attempt(user, &script("try userns unshare -U true"));
    assert_held(&out, &["userns"]);
    assert!(out.contains("Operation not permitted"), "{out}");
}

/// Ordinary programs still work under the filter: the shell, core tools,
/// and a dynamically linked binary from the host's /usr (on the host, GNU
/// coreutils; in the qemu guests, the dynamically linked tools shipped there).
#[test]
#[serial]
fn ordinary_programs_work_under_the_filter() {
    let dynamic = [
        "/usr/bin/env",
        "/usr/bin/ls",
        "/usr/sbin/ip",
        "/usr/bin/runc",
        "/usr/sbin/runc",
    ]
    .into_iter()
    .find(|p| is_dynamic_elf(Path::new(p)))
    .expect("no dynamically linked program on this machine to run");
    let sb = Sandbox::new();
    let mut spec = sb.spec(
        "t",
        &format!(
            "set -e; echo a b | sort -r | wc -w; ls / >/dev/null; sh -c 'exit 0'; \
             sleep 0 & wait; {dynamic} --version >/dev/null 2>&1 || {dynamic} -V >/dev/null; echo done"
        ),
    );
    // The host's tree, as the default chroot_env binds it.
    spec.chroot_env = taskgate_executor::default_chroot_env()
        .into_iter()
        .filter(|(host, _)| host.exists())
        .collect();
    spec.user = "nobody".into();
    let exec = sb.launch(&spec).expect("launch");
    let result = exec.wait().expect("wait");
    exec.shutdown().expect("shutdown");
    let out = sb.read_log("t", "stdout");
    assert!(
        result.successful(),
        "{result:?}\nstdout: {out}\nstderr: {}",
        sb.read_log("t", "stderr")
    );
    assert_eq!(out, "2\ndone\n");
    sb.assert_no_leftovers();
}

/// An ELF file with a program interpreter (`PT_INTERP`): dynamically linked.
fn is_dynamic_elf(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    bytes.starts_with(b"\x7fELF")
        && bytes
            .windows(b"ld-linux".len())
            .take(4096)
            .any(|w| w == b"ld-linux")
}

/// Set in a task's environment: the test binary, run inside the task, acts
/// as the syscall probe instead of running tests.
const PROBE_ENV: &str = "TASKGATE_ESCAPE_PROBE";

/// Every call the seccomp filter must refuse, made for real inside a task
/// by this very test binary (bound into the task's root read-only), as root
/// and as nobody: each fails with EPERM, so a program could fall back.
#[rstest]
#[serial]
fn the_filter_refuses_each_denied_call(#[values("root", "nobody")] user: &str) {
    let me = std::env::current_exe().expect("the test binary");
    let sb = Sandbox::new();
    let mut spec = sb.spec("t", "");
    spec.command = "/probe/escapes".into();
    spec.args = vec![
        "--exact".into(),
        "syscall_probe".into(),
        "--nocapture".into(),
    ];
    spec.env = [(PROBE_ENV.to_string(), "1".to_string())].into();
    spec.chroot_env = taskgate_executor::default_chroot_env()
        .into_iter()
        .filter(|(host, _)| host.exists())
        .collect();
    spec.chroot_env.insert(me.clone(), "/probe/escapes".into());
    spec.user = user.to_string();
    let exec = sb.launch(&spec).expect("launch");
    let result = exec.wait().expect("wait");
    exec.shutdown().expect("shutdown");
    let out = sb.read_log("t", "stdout");
    assert!(
        result.successful(),
        "{result:?}\nstdout: {out}\nstderr: {}",
        sb.read_log("t", "stderr")
    );
    let probed: Vec<&str> = out.lines().filter(|l| l.starts_with("probe ")).collect();
    assert_eq!(probed.len(), PROBES.len(), "{out}");
    for line in probed {
        assert!(line.ends_with(" EPERM"), "{line}\n{out}");
    }
    sb.assert_no_leftovers();
}

/// The denied calls, each with arguments that would do something harmless
/// or fail on their own merits if the filter let them through.
const PROBES: [(&str, libc::c_long, [libc::c_long; 3]); 10] = [
    ("keyctl", libc::SYS_keyctl, [0, 0, 0]),
    ("add_key", libc::SYS_add_key, [0, 0, 0]),
    ("request_key", libc::SYS_request_key, [0, 0, 0]),
    ("bpf", libc::SYS_bpf, [0, 0, 0]),
    ("perf_event_open", libc::SYS_perf_event_open, [0, 0, -1]),
    ("kexec_load", libc::SYS_kexec_load, [0, 0, 0]),
    ("init_module", libc::SYS_init_module, [0, 0, 0]),
    ("open_by_handle_at", libc::SYS_open_by_handle_at, [-1, 0, 0]),
    ("userfaultfd", libc::SYS_userfaultfd, [0, 0, 0]),
    (
        "unshare(CLONE_NEWUSER)",
        libc::SYS_unshare,
        [libc::CLONE_NEWUSER as libc::c_long, 0, 0],
    ),
];

/// Not a test of its own: the probe [`the_filter_refuses_each_denied_call`]
/// runs inside a task. Outside one it does nothing.
#[test]
fn syscall_probe() {
    if std::env::var_os(PROBE_ENV).is_none() {
        return;
    }
    for (name, call, [a, b, c]) in PROBES {
        // SAFETY: every argument is a null pointer, -1 or a flag word:
        // nothing the kernel would write through.
        let rc = unsafe { libc::syscall(call, a, b, c, 0, 0, 0) };
        let errno = std::io::Error::last_os_error().raw_os_error();
        let verdict = match (rc, errno) {
            (-1, Some(libc::EPERM)) => "EPERM".to_string(),
            (-1, Some(e)) => format!("errno {e}"),
            _ => format!("ALLOWED (returned {rc})"),
        };
        println!("probe {name} {verdict}");
    }
}
