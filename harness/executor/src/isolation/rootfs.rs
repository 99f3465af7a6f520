//! The task's root: a tmpfs holding read-only binds of `chroot_env`, the
//! task's read-write dirs, a fresh /proc and a minimal /dev, entered with
//! pivot_root so the host's tree is unmounted rather than merely hidden
//! (a chrooted process can climb out of a chroot, not out of a pivot).
//! Runs in the task's own mount namespace only, every call through
//! [`Syscalls`].

use super::device_filter::DEV_NODES;
use super::syscalls::{FileKind, MountAttrs, Syscalls};
use crate::error::ExecutorError;
use crate::spec::TaskSpec;
use crate::validate::{Credentials, SECRETS_DIR, TASK_SUBDIRS};
use nix::mount::{MntFlags, MsFlags};
use nix::sys::stat::{Mode, SFlag};
use std::path::{Path, PathBuf};

#[cfg(test)]
pub(crate) mod tests;

/// What of /proc a task may read but never write, as runc's default spec
/// has it: the kernel's tunables (core_pattern: a program run as host root
/// on the next crash), the sysrq trigger, interrupt and bus settings.
const PROC_READ_ONLY: [&str; 5] = ["sys", "sysrq-trigger", "irq", "bus", "fs"];
/// What of /proc a task may not see at all (runc's masked paths, and the
/// physical page tables): kernel memory, the keyring, timer and scheduler internals that leak host
/// activity, and hardware trees. Files are covered by the task's own
/// /dev/null (bound read-only: no chmod reaches it), directories by an
/// empty read-only tmpfs.
const PROC_MASKED: [&str; 12] = [
    "kcore",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
    "keys",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "latency_stats",
    "acpi",
    "scsi",
    "asound",
];

/// `/secrets` is a tmpfs of the task's own: never on a disk, never executable.
const SECRETS_TMPFS: &str = "mode=0700,size=1m";
const DEV_LINKS: [(&str, &str); 5] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
];

/// Builds the root on `root_dir` and pivots into it; afterwards `/` is the task root.
pub(crate) fn enter_root(
    sys: &impl Syscalls,
    root_dir: &Path,
    spec: &TaskSpec,
    creds: &Credentials,
) -> Result<(), ExecutorError> {
    // Nothing below may propagate back to the host's mount namespace.
    mount_at(
        sys,
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )?;
    // The root holds only mount points: nothing on it is ever run.
    let tmpfs_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_at(
        sys,
        Some("tmpfs"),
        root_dir,
        Some("tmpfs"),
        tmpfs_flags,
        Some("mode=755,size=1m"),
    )?;

    for (src, dst) in &spec.chroot_env {
        bind(sys, src, &inside(root_dir, dst), true)?;
    }
    for sub in TASK_SUBDIRS.into_iter().filter(|s| *s != SECRETS_DIR) {
        bind(sys, &spec.task_dir.join(sub), &root_dir.join(sub), false)?;
    }
    let no_exec = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let secrets = format!("{SECRETS_TMPFS},uid={},gid={}", creds.uid, creds.gid);
    let secrets_dir = mkdir(sys, &root_dir.join(SECRETS_DIR))?;
    mount_at(
        sys,
        Some("secrets"),
        &secrets_dir,
        Some("tmpfs"),
        no_exec,
        Some(&secrets),
    )?;
    bind(sys, &spec.shared_alloc_dir, &root_dir.join("alloc"), false)?;

    let dev = mkdir(sys, &root_dir.join("dev"))?;
    build_dev(sys, &dev)?;
    let proc_dir = mkdir(sys, &root_dir.join("proc"))?;
    mount_at(sys, Some("proc"), &proc_dir, Some("proc"), no_exec, None)?;
    harden_proc(sys, &proc_dir, &dev.join("null"))?;

    pivot(sys, root_dir)?;
    // Read-only from here on: the task may write only to its binds. /dev
    // keeps its nodes usable (no nodev): they are the task's own.
    let ro = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
    mount_at(
        sys,
        None,
        Path::new("/dev"),
        None,
        ro | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        None,
    )?;
    mount_at(sys, None, Path::new("/"), None, ro | tmpfs_flags, None)
}

/// Makes [`PROC_READ_ONLY`] read-only and hides [`PROC_MASKED`] in the
/// task's fresh /proc. Entries this kernel lacks are skipped.
fn harden_proc(sys: &impl Syscalls, proc_dir: &Path, null: &Path) -> Result<(), ExecutorError> {
    let no_exec = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    for entry in PROC_READ_ONLY {
        let path = proc_dir.join(entry);
        if sys.file_kind(&path).is_none() {
            continue;
        }
        mount_at(
            sys,
            path.to_str(),
            &path,
            None,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None,
        )?;
        let ro = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | no_exec;
        mount_at(sys, None, &path, None, ro, None)?;
    }
    for entry in PROC_MASKED {
        let path = proc_dir.join(entry);
        match sys.file_kind(&path) {
            None => continue,
            Some(FileKind::Dir) => {
                let ro = MsFlags::MS_RDONLY | no_exec;
                mount_at(sys, Some("masked"), &path, Some("tmpfs"), ro, None)?
            }
            Some(FileKind::NotDir) => {
                let null = null.to_str().unwrap_or_default();
                mount_at(sys, Some(null), &path, None, MsFlags::MS_BIND, None)?;
                let ro = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | no_exec;
                // A device must stay openable here: nodev would turn reads into EACCES.
                mount_at(sys, None, &path, None, ro - MsFlags::MS_NODEV, None)?
            }
        }
    }
    Ok(())
}

/// A tmpfs `/dev` holding nodes made here with mknod (never binds of the
/// host's own inodes, which a root task's chmod would change for the host),
/// the usual links, and the task's own pty instance and shared memory.
fn build_dev(sys: &impl Syscalls, dev: &Path) -> Result<(), ExecutorError> {
    mount_at(
        sys,
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("mode=755,size=64k"),
    )?;
    let every_one = Mode::from_bits_truncate(0o666);
    for node in DEV_NODES {
        let path = dev.join(node.name);
        let device = nix::sys::stat::makedev(node.major.into(), node.minor.into());
        sys.mknod(&path, SFlag::S_IFCHR, every_one, device)
            .map_err(ExecutorError::io(format!("mknod {}", path.display())))?;
        // Past the umask: every node is world readable and writable.
        sys.chmod(&path, every_one)
            .map_err(ExecutorError::io(format!("chmod {}", path.display())))?;
    }
    for (link, to) in DEV_LINKS {
        let path = dev.join(link);
        sys.symlink(Path::new(to), &path)
            .map_err(ExecutorError::io(format!("symlink {}", path.display())))?;
    }
    // The task's own pty instance and POSIX shared memory, both writable
    // after /dev itself turns read-only.
    let no_exec = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    let pts_opts = "newinstance,ptmxmode=0666,mode=0620";
    mount_at(
        sys,
        Some("devpts"),
        &mkdir(sys, &dev.join("pts"))?,
        Some("devpts"),
        no_exec,
        Some(pts_opts),
    )?;
    let shm = mkdir(sys, &dev.join("shm"))?;
    mount_at(
        sys,
        Some("shm"),
        &shm,
        Some("tmpfs"),
        no_exec | MsFlags::MS_NODEV,
        Some("mode=1777,size=64m"),
    )
}

/// `pivot_root(".", ".")` stacks the old root on the new one; detaching it
/// then leaves only the task root, with no directory for the old root needed.
fn pivot(sys: &impl Syscalls, root_dir: &Path) -> Result<(), ExecutorError> {
    let fail = |what: &str| {
        let what = what.to_string();
        move |e: nix::errno::Errno| ExecutorError::Mount {
            target: root_dir.to_path_buf(),
            message: format!("{what}: {e}"),
        }
    };
    let here = Path::new(".");
    sys.chdir(root_dir).map_err(fail("chdir"))?;
    sys.pivot_root(here, here).map_err(fail("pivot_root"))?;
    sys.umount2(here, MntFlags::MNT_DETACH)
        .map_err(fail("detach the old root"))?;
    sys.chdir(Path::new("/")).map_err(fail("chdir /"))
}

/// Bind-mounts `src` (dir or file) with everything mounted below it at
/// `target`, then makes the whole tree nosuid and nodev (and read-only if
/// asked): submounts too, which a plain remount of the top would leave
/// writable and with their suid and device files. Each mount keeps what
/// it had beyond that (a noexec source stays noexec).
fn bind(
    sys: &impl Syscalls,
    src: &Path,
    target: &Path,
    readonly: bool,
) -> Result<(), ExecutorError> {
    if sys.file_kind(src) == Some(FileKind::Dir) {
        mkdir(sys, target)?;
    } else {
        touch(sys, target)?;
    }
    let src_str = src.to_str().ok_or_else(|| ExecutorError::Mount {
        target: target.to_path_buf(),
        message: format!("source {} is not UTF-8", src.display()),
    })?;
    mount_at(
        sys,
        Some(src_str),
        target,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    let mut attrs = MountAttrs::NOSUID | MountAttrs::NODEV;
    if readonly {
        attrs |= MountAttrs::RDONLY;
    }
    sys.set_tree_attributes(target, attrs)
        .map_err(|e| ExecutorError::Mount {
            target: target.to_path_buf(),
            message: format!("mount_setattr {:#x}, recursive: {e}", attrs.bits()),
        })
}

fn mount_at(
    sys: &impl Syscalls,
    src: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), ExecutorError> {
    sys.mount(src, target, fstype, flags, data)
        .map_err(|e| ExecutorError::Mount {
            target: target.to_path_buf(),
            message: format!("mount {} ({flags:?}): {e}", src.unwrap_or("-")),
        })
}

/// `dst` (absolute, validated free of `..`) under `root`.
fn inside(root: &Path, dst: &Path) -> PathBuf {
    root.join(dst.strip_prefix("/").unwrap_or(dst))
}

fn mkdir(sys: &impl Syscalls, path: &Path) -> Result<PathBuf, ExecutorError> {
    sys.mkdir_all(path)
        .map_err(ExecutorError::io(format!("create {}", path.display())))?;
    Ok(path.to_path_buf())
}

fn touch(sys: &impl Syscalls, path: &Path) -> Result<(), ExecutorError> {
    if let Some(parent) = path.parent() {
        mkdir(sys, parent)?;
    }
    sys.create_file(path)
        .map_err(ExecutorError::io(format!("create {}", path.display())))
}
