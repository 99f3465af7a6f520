//! Tasks reaching for the kernel and the host: tunables, masked files,
//! mounts, the host root, rlimits, /proc/self/exe, setuid, other tasks, devices.

use crate::common::{self, Sandbox};
use crate::{assert_held, attempt, script};
use rstest::rstest;
use serial_test::serial;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

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

/// Kernel memory, the keyring and the physical page tables are masked: the
/// task's own /dev/null stands in for them.
#[rstest]
#[serial]
fn kernel_memory_and_keys_are_masked(#[values("root", "nobody")] user: &str) {
    let out = attempt(
        user,
        &script(
            "for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug /proc/kpagecount /proc/kpageflags /proc/kpagecgroup; do \
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

/// The task has a cgroup namespace of its own, rooted at its cgroup: its
/// /proc/self/cgroup names no host cgroup path, on v1 and v2.
#[rstest]
#[serial]
fn the_task_sees_no_host_cgroup_path(#[values("root", "nobody")] user: &str) {
    let out = attempt(user, "cat /proc/self/cgroup");
    let lines: Vec<&str> = out.lines().collect();
    assert!(!lines.is_empty(), "{out}");
    for line in lines {
        let path = line.splitn(3, ':').nth(2).unwrap_or_default();
        assert_eq!(
            path, "/",
            "ESCAPED: the task sees a host cgroup path: {line}\n{out}"
        );
    }
}

/// A submount inside a `chroot_env` source is as read-only, nosuid and
/// nodev in the task as the bind above it: the whole tree is, not only its
/// top. The submount is a tmpfs of the test's own, unmounted at the end.
#[rstest]
#[serial]
fn chroot_env_submounts_are_read_only(#[values("root", "nobody")] user: &str) {
    let sb = Sandbox::new();
    let env = sb.path().join("env");
    let sub = env.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let _mounted = TmpfsMount::new(&sub);
    nix::sys::stat::mknod(
        &sub.join("null"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    let mut spec = sb.spec(
        "t",
        &script(
            "try write_submount touch /env/sub/x; \
             try open_device_on_submount sh -c 'echo x > /env/sub/null'; \
             grep ' /env/sub ' /proc/self/mountinfo",
        ),
    );
    spec.chroot_env.insert(env.clone(), "/env".into());
    spec.user = user.to_string();
    let exec = sb.launch(&spec).expect("launch");
    let result = exec.wait().expect("wait");
    exec.shutdown().expect("shutdown");
    let out = sb.read_log("t", "stdout");
    assert!(result.successful(), "{result:?}\n{out}");
    assert!(!out.contains("ESCAPED"), "ESCAPED as {user}: {out}");
    let options = out
        .lines()
        .find(|l| l.contains(" /env/sub "))
        .and_then(|l| l.split_whitespace().nth(5))
        .unwrap_or_else(|| panic!("no /env/sub mount in the task: {out}"));
    for flag in ["ro", "nosuid", "nodev"] {
        assert!(
            options.split(',').any(|o| o == flag),
            "ESCAPED: /env/sub is mounted {options}, not {flag}"
        );
    }
    drop(_mounted);
    sb.assert_no_leftovers();
}

/// A tmpfs the test mounts in its own temp dir, unmounted when dropped.
struct TmpfsMount(std::path::PathBuf);

impl TmpfsMount {
    fn new(at: &Path) -> TmpfsMount {
        nix::mount::mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=64k"),
        )
        .unwrap();
        TmpfsMount(at.to_path_buf())
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}
