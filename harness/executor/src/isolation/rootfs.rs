//! The task's root: a tmpfs holding read-only binds of `chroot_env`, the
//! task's read-write dirs, a fresh /proc and a minimal /dev, entered with
//! pivot_root so the host's tree is unmounted rather than merely hidden
//! (a chrooted process can climb out of a chroot, not out of a pivot).
//! Runs in the task's own mount namespace only.

use super::device_filter::DEV_NODES;
use crate::error::ExecutorError;
use crate::spec::TaskSpec;
use crate::validate::{Credentials, SECRETS_DIR, TASK_SUBDIRS};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::{Mode, SFlag};
use std::os::unix::fs::symlink;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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
    root_dir: &Path,
    spec: &TaskSpec,
    creds: &Credentials,
) -> Result<(), ExecutorError> {
    // Nothing below may propagate back to the host's mount namespace.
    mount_at(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )?;
    // The root holds only mount points: nothing on it is ever run.
    let tmpfs_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_at(
        Some("tmpfs"),
        root_dir,
        Some("tmpfs"),
        tmpfs_flags,
        Some("mode=755,size=1m"),
    )?;

    for (src, dst) in &spec.chroot_env {
        bind(src, &inside(root_dir, dst), true)?;
    }
    for sub in TASK_SUBDIRS.into_iter().filter(|s| *s != SECRETS_DIR) {
        bind(&spec.task_dir.join(sub), &root_dir.join(sub), false)?;
    }
    let no_exec = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let secrets = format!("{SECRETS_TMPFS},uid={},gid={}", creds.uid, creds.gid);
    let secrets_dir = mkdir(&root_dir.join(SECRETS_DIR))?;
    mount_at(
        Some("secrets"),
        &secrets_dir,
        Some("tmpfs"),
        no_exec,
        Some(&secrets),
    )?;
    bind(&spec.shared_alloc_dir, &root_dir.join("alloc"), false)?;

    let dev = mkdir(&root_dir.join("dev"))?;
    build_dev(&dev)?;
    let proc_dir = mkdir(&root_dir.join("proc"))?;
    mount_at(Some("proc"), &proc_dir, Some("proc"), no_exec, None)?;
    harden_proc(&proc_dir, &dev.join("null"))?;

    pivot(root_dir)?;
    // Read-only from here on: the task may write only to its binds. /dev
    // keeps its nodes usable (no nodev): they are the task's own.
    let ro = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
    mount_at(
        None,
        Path::new("/dev"),
        None,
        ro | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        None,
    )?;
    mount_at(None, Path::new("/"), None, ro | tmpfs_flags, None)
}

/// Makes [`PROC_READ_ONLY`] read-only and hides [`PROC_MASKED`] in the
/// task's fresh /proc. Entries this kernel lacks are skipped.
fn harden_proc(proc_dir: &Path, null: &Path) -> Result<(), ExecutorError> {
    let no_exec = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    for entry in PROC_READ_ONLY {
        let path = proc_dir.join(entry);
        if !path.exists() {
            continue;
        }
        mount_at(
            path.to_str(),
            &path,
            None,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None,
        )?;
        let ro = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | no_exec;
        mount_at(None, &path, None, ro, None)?;
    }
    for entry in PROC_MASKED {
        let path = proc_dir.join(entry);
        match std::fs::metadata(&path) {
            Err(_) => continue,
            Ok(meta) if meta.is_dir() => {
                let ro = MsFlags::MS_RDONLY | no_exec;
                mount_at(Some("masked"), &path, Some("tmpfs"), ro, None)?
            }
            Ok(_) => {
                let null = null.to_str().unwrap_or_default();
                mount_at(Some(null), &path, None, MsFlags::MS_BIND, None)?;
                let ro = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | no_exec;
                // A device must stay openable here: nodev would turn reads into EACCES.
                mount_at(None, &path, None, ro - MsFlags::MS_NODEV, None)?
            }
        }
    }
    Ok(())
}

/// A tmpfs `/dev` holding nodes made here with mknod (never binds of the
/// host's own inodes, which a root task's chmod would change for the host),
/// the usual links, and the task's own pty instance and shared memory.
fn build_dev(dev: &Path) -> Result<(), ExecutorError> {
    mount_at(
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("mode=755,size=64k"),
    )?;
    for node in DEV_NODES {
        let path = dev.join(node.name);
        let fail = |e| ExecutorError::io(format!("mknod {}", path.display()))(e);
        nix::sys::stat::mknod(
            &path,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(node.major.into(), node.minor.into()),
        )
        .map_err(fail)?;
        // Past the umask: every node is world readable and writable.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
            .map_err(ExecutorError::io(format!("chmod {}", path.display())))?;
    }
    for (link, to) in DEV_LINKS {
        let path = dev.join(link);
        symlink(to, &path).map_err(ExecutorError::io(format!("symlink {}", path.display())))?;
    }
    // The task's own pty instance and POSIX shared memory, both writable
    // after /dev itself turns read-only.
    let no_exec = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    let pts_opts = "newinstance,ptmxmode=0666,mode=0620";
    mount_at(
        Some("devpts"),
        &mkdir(&dev.join("pts"))?,
        Some("devpts"),
        no_exec,
        Some(pts_opts),
    )?;
    let shm = mkdir(&dev.join("shm"))?;
    mount_at(
        Some("shm"),
        &shm,
        Some("tmpfs"),
        no_exec | MsFlags::MS_NODEV,
        Some("mode=1777,size=64m"),
    )
}

/// `pivot_root(".", ".")` stacks the old root on the new one; detaching it
/// then leaves only the task root, with no directory for the old root needed.
fn pivot(root_dir: &Path) -> Result<(), ExecutorError> {
    let fail = |what: &str| {
        let what = what.to_string();
        move |e: nix::errno::Errno| ExecutorError::Mount {
            target: root_dir.to_path_buf(),
            message: format!("{what}: {e}"),
        }
    };
    nix::unistd::chdir(root_dir).map_err(fail("chdir"))?;
    nix::unistd::pivot_root(".", ".").map_err(fail("pivot_root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(fail("detach the old root"))?;
    nix::unistd::chdir("/").map_err(fail("chdir /"))
}

/// Bind-mounts `src` (dir or file) with everything mounted below it at
/// `target`, then makes the whole tree nosuid and nodev (and read-only if
/// asked): submounts too, which a plain remount of the top would leave
/// writable and with their suid and device files. Each mount keeps what
/// it had beyond that (a noexec source stays noexec).
fn bind(src: &Path, target: &Path, readonly: bool) -> Result<(), ExecutorError> {
    if src.is_dir() {
        mkdir(target)?;
    } else {
        touch(target)?;
    }
    let src_str = src.to_str().ok_or_else(|| ExecutorError::Mount {
        target: target.to_path_buf(),
        message: format!("source {} is not UTF-8", src.display()),
    })?;
    mount_at(
        Some(src_str),
        target,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    let mut attr_set = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
    if readonly {
        attr_set |= libc::MOUNT_ATTR_RDONLY;
    }
    set_tree_attributes(target, attr_set)
}

/// `mount_setattr(AT_RECURSIVE)`: sets `attr_set` on the mount at `target`
/// and every mount below it.
fn set_tree_attributes(target: &Path, attr_set: u64) -> Result<(), ExecutorError> {
    let fail = |message: String| ExecutorError::Mount {
        target: target.to_path_buf(),
        message,
    };
    let path = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| fail("path contains NUL".into()))?;
    let attr = libc::mount_attr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path and a mount_attr we own, with its size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if rc < 0 {
        return Err(fail(format!(
            "mount_setattr {attr_set:#x}, recursive: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

fn mount_at(
    src: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), ExecutorError> {
    mount(src, target, fstype, flags, data).map_err(|e| ExecutorError::Mount {
        target: target.to_path_buf(),
        message: format!("mount {} ({flags:?}): {e}", src.unwrap_or("-")),
    })
}

/// `dst` (absolute, validated free of `..`) under `root`.
fn inside(root: &Path, dst: &Path) -> PathBuf {
    root.join(dst.strip_prefix("/").unwrap_or(dst))
}

fn mkdir(path: &Path) -> Result<PathBuf, ExecutorError> {
    std::fs::create_dir_all(path)
        .map_err(ExecutorError::io(format!("create {}", path.display())))?;
    Ok(path.to_path_buf())
}

fn touch(path: &Path) -> Result<(), ExecutorError> {
    if let Some(parent) = path.parent() {
        mkdir(parent)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map(drop)
        .map_err(ExecutorError::io(format!("create {}", path.display())))
}
