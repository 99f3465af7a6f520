//! The root's sequence, call by call, against the recording fake: no root
//! needed, nothing on this machine touched (the fake changes nothing, so
//! the paths below need not exist).

use super::*;
use crate::isolation::syscalls::recording::{Call, RecordingSyscalls};
use crate::spec::{default_chroot_env, LogConfig, Resources, Rlimits};
use crate::KillSignal;
use nix::errno::Errno;
use nix::unistd::{Gid, Uid};
use rstest::rstest;
use std::collections::BTreeMap;
use std::time::Duration;

/// Where the root is built.
pub(crate) const ROOT: &str = "/run/taskgate/a1.web/root";
const TASK_DIR: &str = "/srv/allocs/a1/web";
const SHARED_DIR: &str = "/srv/allocs/a1/alloc";
/// The /proc entries the fake's kernel has as directories; the others of
/// [`PROC_READ_ONLY`] and [`PROC_MASKED`] are files.
const PROC_DIRS: [&str; 7] = ["sys", "irq", "bus", "fs", "acpi", "scsi", "asound"];

pub(crate) fn root(path: &str) -> PathBuf {
    Path::new(ROOT).join(path)
}

/// The task `web`: Nomad's default `chroot_env`, a file, and a dir bound
/// under another name.
pub(crate) fn spec() -> TaskSpec {
    let mut chroot_env = default_chroot_env();
    chroot_env.insert("/srv/config/app.conf".into(), "/config/app.conf".into());
    chroot_env.insert("/opt/tools".into(), "/tools".into());
    TaskSpec {
        alloc_id: "a1".into(),
        task_name: "web".into(),
        task_dir: TASK_DIR.into(),
        shared_alloc_dir: SHARED_DIR.into(),
        chroot_env,
        command: "/bin/true".into(),
        args: Vec::new(),
        env: BTreeMap::new(),
        user: "nobody".into(),
        resources: Resources {
            cpu_shares: 100,
            memory_mb: 64,
            pids_max: 64,
        },
        network_isolation: false,
        logs: LogConfig {
            max_files: 1,
            max_file_size_bytes: 1 << 20,
        },
        kill_signal: KillSignal::SIGTERM,
        kill_timeout: Duration::from_secs(5),
        rlimits: Rlimits::default(),
        oom_score_adj: 0,
    }
}

pub(crate) fn creds(uid: u32, gid: u32) -> Credentials {
    Credentials {
        uid: Uid::from_raw(uid),
        gid: Gid::from_raw(gid),
    }
}

/// The host as the fake shows it: the binds' sources, and a /proc with
/// every entry the root hardens.
pub(crate) fn host() -> RecordingSyscalls {
    let mut sys = RecordingSyscalls::new();
    for (src, _) in spec().chroot_env {
        let kind = if src.ends_with("app.conf") {
            FileKind::NotDir
        } else {
            FileKind::Dir
        };
        sys = sys.with_entry(src, kind);
    }
    for sub in ["local", "secrets", "tmp"] {
        sys = sys.with_entry(Path::new(TASK_DIR).join(sub), FileKind::Dir);
    }
    sys = sys.with_entry(SHARED_DIR, FileKind::Dir);
    for entry in PROC_READ_ONLY.into_iter().chain(PROC_MASKED) {
        sys = sys.with_entry(root("proc").join(entry), proc_kind(entry));
    }
    sys
}

fn proc_kind(entry: &str) -> FileKind {
    if PROC_DIRS.contains(&entry) {
        FileKind::Dir
    } else {
        FileKind::NotDir
    }
}

/// Builds the root of [`spec`] as uid 1234, gid 2345.
fn enter(sys: &RecordingSyscalls) -> Result<(), ExecutorError> {
    enter_root(sys, Path::new(ROOT), &spec(), &creds(1234, 2345))
}

/// The calls of a root built without a failure.
fn sequence() -> Vec<Call> {
    let sys = host();
    enter(&sys).expect("the fake fails nothing");
    sys.calls()
}

fn mount(
    source: Option<&str>,
    target: impl Into<PathBuf>,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Call {
    Call::Mount {
        source: source.map(str::to_string),
        target: target.into(),
        fstype: fstype.map(str::to_string),
        flags,
        data: data.map(str::to_string),
    }
}

fn remount(target: impl Into<PathBuf>, flags: MsFlags) -> Call {
    mount(None, target, None, MsFlags::MS_REMOUNT | flags, None)
}

fn mkdir_call(path: impl Into<PathBuf>) -> Call {
    Call::MkdirAll { path: path.into() }
}

/// Where `run` sits in `calls`, one call after the other.
fn find_run(calls: &[Call], run: &[Call]) -> usize {
    calls
        .windows(run.len())
        .position(|window| window == run)
        .unwrap_or_else(|| panic!("{run:#?}\nnot in a row in\n{calls:#?}"))
}

fn index_of(calls: &[Call], call: &Call) -> usize {
    find_run(calls, std::slice::from_ref(call))
}

const NOSUID_NODEV_NOEXEC: MsFlags = MsFlags::MS_NOSUID
    .union(MsFlags::MS_NODEV)
    .union(MsFlags::MS_NOEXEC);
const READ_ONLY_BIND: MsFlags = MsFlags::MS_BIND.union(MsFlags::MS_RDONLY);

#[test]
fn the_host_root_turns_private_first_so_nothing_propagates_back() {
    let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
    assert_eq!(sequence()[0], mount(None, "/", None, private, None));
}

#[test]
fn the_root_is_a_tmpfs_nothing_on_it_runs_from() {
    let tmpfs = mount(
        Some("tmpfs"),
        ROOT,
        Some("tmpfs"),
        NOSUID_NODEV_NOEXEC,
        Some("mode=755,size=1m"),
    );
    assert_eq!(sequence()[1], tmpfs);
}

/// Until the pivot, every change is below the root: the host's tree gets
/// only the private propagation of the first call.
#[test]
fn nothing_outside_the_root_changes_before_the_pivot() {
    let calls = sequence();
    let pivot = index_of(
        &calls,
        &Call::PivotRoot {
            new_root: ".".into(),
            put_old: ".".into(),
        },
    );
    for call in &calls[1..pivot] {
        let target = call.target().expect("every call names its path");
        assert!(target.starts_with(ROOT), "{call:?} is outside the root");
    }
}

/// How a bind's mount point is made.
enum MountPoint {
    Dir,
    File,
}

fn bind_run(src: &str, target: PathBuf, point: MountPoint, attrs: MountAttrs) -> Vec<Call> {
    let mut run = match point {
        MountPoint::Dir => vec![mkdir_call(&target)],
        MountPoint::File => vec![
            mkdir_call(target.parent().unwrap()),
            Call::CreateFile {
                path: target.clone(),
            },
        ],
    };
    let rec_bind = MsFlags::MS_BIND | MsFlags::MS_REC;
    run.push(mount(Some(src), &target, None, rec_bind, None));
    run.push(Call::SetTreeAttributes { target, attrs });
    run
}

/// Each bind takes its submounts (MS_REC), and the same target then turns
/// read-only, nosuid and nodev down the whole tree (mount_setattr).
#[rstest]
#[case::a_dir("/bin", "bin", MountPoint::Dir)]
#[case::a_nested_dir("/usr", "usr", MountPoint::Dir)]
#[case::a_file("/srv/config/app.conf", "config/app.conf", MountPoint::File)]
#[case::a_dir_bound_elsewhere("/opt/tools", "tools", MountPoint::Dir)]
fn each_chroot_env_bind_turns_read_only_with_its_submounts(
    #[case] src: &str,
    #[case] inside: &str,
    #[case] point: MountPoint,
) {
    let attrs = MountAttrs::RDONLY | MountAttrs::NOSUID | MountAttrs::NODEV;
    find_run(&sequence(), &bind_run(src, root(inside), point, attrs));
}

/// The task's own dirs are writable, but hold no suid program or device
/// a task could use, submounts included.
#[rstest]
#[case::local("/srv/allocs/a1/web/local", "local")]
#[case::tmp("/srv/allocs/a1/web/tmp", "tmp")]
#[case::the_shared_alloc_dir(SHARED_DIR, "alloc")]
fn the_task_dirs_are_bound_nosuid_nodev_and_writable(#[case] src: &str, #[case] inside: &str) {
    let attrs = MountAttrs::NOSUID | MountAttrs::NODEV;
    find_run(
        &sequence(),
        &bind_run(src, root(inside), MountPoint::Dir, attrs),
    );
}

#[rstest]
#[case::a_user(1234, 2345)]
#[case::root(0, 0)]
#[case::nobody(65534, 65534)]
fn secrets_are_a_noexec_tmpfs_owned_by_the_task_user(#[case] uid: u32, #[case] gid: u32) {
    let sys = host();
    enter_root(&sys, Path::new(ROOT), &spec(), &creds(uid, gid)).unwrap();
    let calls = sys.calls();
    let options = format!("mode=0700,size=1m,uid={uid},gid={gid}");
    let tmpfs = mount(
        Some("secrets"),
        root("secrets"),
        Some("tmpfs"),
        NOSUID_NODEV_NOEXEC,
        Some(&options),
    );
    find_run(&calls, &[mkdir_call(root("secrets")), tmpfs]);
    let task_secrets = Path::new(TASK_DIR).join("secrets");
    let from_task_dir = |call: &Call| match call {
        Call::Mount { source, .. } => source.as_deref() == task_secrets.to_str(),
        _ => false,
    };
    assert!(
        !calls.iter().any(from_task_dir),
        "the disk's secrets/ is never bound"
    );
}

/// /dev is a tmpfs of the task's own: every node made with mknod, so a
/// root task's chmod changes no inode of the host's /dev; no host device
/// is ever bound.
#[test]
fn dev_holds_nodes_made_for_the_task_never_binds_of_the_hosts() {
    let calls = sequence();
    let tmpfs = mount(
        Some("tmpfs"),
        root("dev"),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("mode=755,size=64k"),
    );
    let dev_mounted = find_run(&calls, &[mkdir_call(root("dev")), tmpfs]) + 1;
    let every_one = Mode::from_bits_truncate(0o666);
    for node in DEV_NODES {
        let path = root("dev").join(node.name);
        let made = Call::Mknod {
            path: path.clone(),
            kind: SFlag::S_IFCHR,
            perm: every_one,
            major: node.major.into(),
            minor: node.minor.into(),
        };
        let chmod = Call::Chmod {
            path,
            mode: every_one,
        };
        assert!(
            find_run(&calls, &[made, chmod]) > dev_mounted,
            "{}",
            node.name
        );
    }
    let nodes = calls.iter().filter(|c| matches!(c, Call::Mknod { .. }));
    assert_eq!(nodes.count(), DEV_NODES.len(), "no other node is made");
    for call in &calls {
        if let Call::Mount { source, flags, .. } = call {
            let from_host_dev = source.as_deref().is_some_and(|s| s.starts_with("/dev"));
            assert!(
                !(flags.contains(MsFlags::MS_BIND) && from_host_dev),
                "{call:?}"
            );
        }
    }
}

#[test]
fn dev_has_its_links_its_own_pty_instance_and_shared_memory() {
    let calls = sequence();
    for (link, to) in DEV_LINKS {
        let link = Call::Symlink {
            target: to.into(),
            link: root("dev").join(link),
        };
        index_of(&calls, &link);
    }
    let no_exec = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    let pts = root("dev/pts");
    let pts_options = Some("newinstance,ptmxmode=0666,mode=0620");
    let devpts = mount(Some("devpts"), &pts, Some("devpts"), no_exec, pts_options);
    find_run(&calls, &[mkdir_call(&pts), devpts]);
    let shm = root("dev/shm");
    let shm_options = Some("mode=1777,size=64m");
    let tmpfs = mount(
        Some("shm"),
        &shm,
        Some("tmpfs"),
        NOSUID_NODEV_NOEXEC,
        shm_options,
    );
    find_run(&calls, &[mkdir_call(&shm), tmpfs]);
}

/// A fresh /proc, hardened before the pivot.
fn proc_mounted(calls: &[Call]) -> usize {
    let proc = mount(
        Some("proc"),
        root("proc"),
        Some("proc"),
        NOSUID_NODEV_NOEXEC,
        None,
    );
    find_run(calls, &[mkdir_call(root("proc")), proc]) + 1
}

fn pivoted(calls: &[Call]) -> usize {
    index_of(calls, &Call::Chdir { path: ROOT.into() })
}

/// A masked file is covered by the task's own /dev/null (made before it
/// is bound), remounted read-only and still a device; a masked directory
/// by an empty read-only tmpfs.
#[rstest]
#[case::files(FileKind::NotDir)]
#[case::dirs(FileKind::Dir)]
fn masked_proc_entries_are_covered_read_only(#[case] kind: FileKind) {
    let calls = sequence();
    let task_null = root("dev/null");
    let null_made = calls
        .iter()
        .position(|c| matches!(c, Call::Mknod { path, .. } if *path == task_null))
        .expect("/dev/null is made");
    let no_exec = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    let entries = PROC_MASKED.into_iter().filter(|e| proc_kind(e) == kind);
    let mut masked = 0;
    for entry in entries {
        let path = root("proc").join(entry);
        let run = match kind {
            FileKind::NotDir => vec![
                mount(task_null.to_str(), &path, None, MsFlags::MS_BIND, None),
                remount(&path, READ_ONLY_BIND | no_exec),
            ],
            FileKind::Dir => {
                let ro = MsFlags::MS_RDONLY | NOSUID_NODEV_NOEXEC;
                vec![mount(Some("masked"), &path, Some("tmpfs"), ro, None)]
            }
        };
        let at = find_run(&calls, &run);
        assert!(at > proc_mounted(&calls) && at > null_made, "{entry}");
        assert!(at < pivoted(&calls), "{entry}");
        masked += 1;
    }
    assert!(masked > 1, "the fixture has masked entries of this kind");
}

#[test]
fn read_only_proc_entries_are_bound_onto_themselves_and_remounted_read_only() {
    let calls = sequence();
    for entry in PROC_READ_ONLY {
        let path = root("proc").join(entry);
        let rec_bind = MsFlags::MS_BIND | MsFlags::MS_REC;
        let run = [
            mount(path.to_str(), &path, None, rec_bind, None),
            remount(&path, READ_ONLY_BIND | NOSUID_NODEV_NOEXEC),
        ];
        let at = find_run(&calls, &run);
        assert!(at > proc_mounted(&calls) && at < pivoted(&calls), "{entry}");
    }
}

/// What this kernel lacks is skipped, not created: its mounts (`fewer`)
/// are all the sequence loses.
#[rstest]
#[case::a_masked_file("kcore", 2)]
#[case::a_masked_dir("asound", 1)]
#[case::a_read_only_file("sysrq-trigger", 2)]
#[case::a_read_only_dir("bus", 2)]
fn a_proc_entry_this_kernel_lacks_is_skipped(#[case] entry: &str, #[case] fewer: usize) {
    let path = root("proc").join(entry);
    let sys = host().without_entry(&path);
    enter(&sys).unwrap();
    let calls = sys.calls();
    let mut expected = sequence();
    expected.retain(|c| c.target() != Some(&path));
    assert_eq!(calls, expected);
    assert_eq!(calls.len(), sequence().len() - fewer);
}

/// `pivot_root(".", ".")` from inside the root, the old root detached;
/// then /dev (its nodes still usable) and / turn read-only, last.
#[test]
fn the_pivot_detaches_the_old_root_then_dev_and_root_turn_read_only() {
    let here = PathBuf::from(".");
    let ending = [
        Call::Chdir { path: ROOT.into() },
        Call::PivotRoot {
            new_root: here.clone(),
            put_old: here.clone(),
        },
        Call::Umount2 {
            target: here,
            flags: MntFlags::MNT_DETACH,
        },
        Call::Chdir { path: "/".into() },
        remount(
            "/dev",
            READ_ONLY_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        ),
        remount("/", READ_ONLY_BIND | NOSUID_NODEV_NOEXEC),
    ];
    let calls = sequence();
    assert!(calls.ends_with(&ending), "{calls:#?}");
    assert_eq!(calls.iter().filter(|c| **c == ending[0]).count(), 1);
}

/// Whichever call fails, it is the last one made, and the root's
/// building stops with an error.
#[test]
fn every_failing_call_stops_the_sequence_where_it_failed() {
    let full = sequence();
    for at in 0..full.len() {
        let sys = host().failing_at(at, Errno::EPERM);
        let result = enter(&sys);
        assert!(
            result.is_err(),
            "call {at} failed unnoticed: {:?}",
            full[at]
        );
        assert_eq!(sys.calls(), full[..=at], "after call {at}: {:?}", full[at]);
    }
}

fn is_mount_on(call: &Call, path: &Path, remount: bool) -> bool {
    matches!(call, Call::Mount { target, flags, .. }
        if target == path && flags.contains(MsFlags::MS_REMOUNT) == remount)
}

/// A failure names its path and what was being done, with the kernel's error.
#[rstest]
#[case::the_private_remount(|c: &Call| is_mount_on(c, Path::new("/"), false), "mount /: mount - ")]
#[case::the_root_tmpfs(
    |c: &Call| is_mount_on(c, Path::new(ROOT), false),
    "mount /run/taskgate/a1.web/root: mount tmpfs "
)]
#[case::a_chroot_env_bind(
    |c: &Call| is_mount_on(c, &root("bin"), false),
    "mount /run/taskgate/a1.web/root/bin: mount /bin "
)]
#[case::a_read_only_tree(
    |c: &Call| matches!(c, Call::SetTreeAttributes { target, .. } if *target == root("config/app.conf")),
    "mount /run/taskgate/a1.web/root/config/app.conf: mount_setattr 0x7, recursive: "
)]
#[case::a_mount_point(
    |c: &Call| *c == Call::MkdirAll { path: root("local") },
    "create /run/taskgate/a1.web/root/local: "
)]
#[case::a_dev_node(
    |c: &Call| matches!(c, Call::Mknod { path, .. } if *path == root("dev/zero")),
    "mknod /run/taskgate/a1.web/root/dev/zero: "
)]
#[case::a_proc_mask(
    |c: &Call| is_mount_on(c, &root("proc/kcore"), true),
    "mount /run/taskgate/a1.web/root/proc/kcore: mount - "
)]
#[case::the_pivot(
    |c: &Call| matches!(c, Call::PivotRoot { .. }),
    "mount /run/taskgate/a1.web/root: pivot_root: "
)]
#[case::the_detach(
    |c: &Call| matches!(c, Call::Umount2 { .. }),
    "mount /run/taskgate/a1.web/root: detach the old root: "
)]
#[case::the_last_remount(|c: &Call| is_mount_on(c, Path::new("/"), true), "mount /: mount - ")]
fn a_failure_names_its_path_and_nothing_follows_it(
    #[case] fails: fn(&Call) -> bool,
    #[case] message: &str,
) {
    let sys = host().failing_when(fails, Errno::EACCES);
    let err = enter(&sys).unwrap_err().to_string();
    assert!(err.starts_with(message), "{err:?} should start {message:?}");
    assert!(
        err.contains("Permission denied"),
        "the kernel's error: {err}"
    );
    let calls = sys.calls();
    assert!(fails(calls.last().unwrap()), "{calls:#?}");
    assert_eq!(calls.iter().filter(|c| fails(c)).count(), 1);
}

#[test]
fn a_source_that_is_not_utf8_is_refused_before_it_is_mounted() {
    use std::os::unix::ffi::OsStrExt;
    let mut spec = spec();
    let src = PathBuf::from(std::ffi::OsStr::from_bytes(b"/opt/t\xff"));
    spec.chroot_env = [(src, PathBuf::from("/t"))].into();
    let sys = host();
    let err = enter_root(&sys, Path::new(ROOT), &spec, &creds(1, 1)).unwrap_err();
    assert!(matches!(&err, ExecutorError::Mount { target, .. } if *target == root("t")));
    let calls = sys.calls();
    assert_eq!(
        calls[2..],
        [mkdir_call(ROOT), Call::CreateFile { path: root("t") }]
    );
}
