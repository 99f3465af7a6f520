//! The marked filesystem: a fresh tmpfs whose own superblock carries the
//! fanotify mark. `FAN_MARK_FILESYSTEM` on it catches every exec of a file on
//! it, through any bind mount and in any mount namespace (the executor
//! bind-mounts its directories into task roots), and nothing else on the host.

use crate::error::OracleError;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The source name of every marked tmpfs, as mountinfo shows it.
pub const MARKED_FS_SOURCE: &str = "taskgate-oracle";

/// Moves the calling thread into a new mount namespace in which every mount
/// is private, so that mounts made afterwards never propagate to the host.
///
/// Linux keeps mount namespaces per thread: in a multithreaded process
/// `unshare(CLONE_NEWNS)` succeeds (unlike `CLONE_NEWUSER`, which fails with
/// EINVAL there; verified on this kernel) but only moves the calling thread.
/// Threads and processes it creates afterwards inherit the namespace; threads
/// that already exist stay in the old one, and `/proc/self/mountinfo` shows
/// the main thread's view (use `/proc/thread-self/mountinfo`). So either call
/// it first thing in `main`, before any thread exists, or, robustly in a
/// multithreaded program such as a `cargo test` binary, call it from
/// [`std::os::unix::process::CommandExt::pre_exec`] so that a whole child
/// process starts in the new namespace. It makes only raw system calls and
/// does not allocate, so it is safe to call between fork and exec.
pub fn enter_private_mount_namespace() -> Result<(), OracleError> {
    unshare(CloneFlags::CLONE_NEWNS).map_err(OracleError::sys("unshare(CLONE_NEWNS)"))?;
    // A copied namespace keeps the host's shared peer groups: without this a
    // mount made here would propagate back to the host.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(OracleError::sys("mount --make-rprivate /"))
}

/// A fresh tmpfs mounted at an empty directory, unmounted on drop.
#[derive(Debug)]
pub struct MarkedFs {
    path: PathBuf,
}

impl MarkedFs {
    /// Mounts a new tmpfs at `dir`, which must be an empty directory. The
    /// calling thread must be in a private mount namespace (see
    /// [`enter_private_mount_namespace`]); this is checked against init's
    /// namespace so that a forgotten unshare cannot mount over the host.
    pub fn mount(dir: &Path) -> Result<MarkedFs, OracleError> {
        let path = dir
            .canonicalize()
            .map_err(OracleError::io("resolving", dir))?;
        let mut entries = std::fs::read_dir(&path).map_err(OracleError::io("reading", &path))?;
        if entries.next().is_some() {
            return Err(OracleError::NotEmpty(path));
        }
        if shares_init_mount_namespace()? {
            return Err(OracleError::HostNamespace);
        }
        mount(
            Some(MARKED_FS_SOURCE),
            &path,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755"),
        )
        .map_err(OracleError::sys("mount tmpfs"))?;
        Ok(MarkedFs { path })
    }

    /// The mount point (canonical, as mountinfo and `/proc/*/fd` name it).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for MarkedFs {
    fn drop(&mut self) {
        // Detach: bind mounts of it in task roots or an exec'ing process may
        // still pin the superblock; the mount point itself goes away now.
        if let Err(e) = umount2(&self.path, MntFlags::MNT_DETACH) {
            let _ = writeln!(
                std::io::stderr(),
                "taskgate-oracle: unmounting {}: {e}",
                self.path.display()
            );
        }
    }
}

/// One mount as `/proc/thread-self/mountinfo` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Unique among all mounts of the system.
    pub id: u64,
    /// The directory of the filesystem that is mounted (`/` unless a bind mount of a subtree).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub fstype: String,
    /// The mount source; [`MarkedFs`] mounts use [`MARKED_FS_SOURCE`].
    pub source: String,
}

/// The mounts of the calling thread's mount namespace.
pub fn mounts() -> Result<Vec<MountEntry>, OracleError> {
    read_mountinfo("/proc/thread-self/mountinfo")
}

fn read_mountinfo(path: &str) -> Result<Vec<MountEntry>, OracleError> {
    let info = std::fs::read_to_string(path).map_err(OracleError::io("reading", path))?;
    Ok(info.lines().filter_map(parse_mountinfo_line).collect())
}

/// Whether the calling thread is in init's mount namespace. Compared by mount
/// id, since a mount belongs to exactly one namespace and copying a namespace
/// gives every mount a new id; `/proc/1/ns/mnt` itself may not be readable
/// (it needs ptrace access to init, which sandboxes deny even to root).
fn shares_init_mount_namespace() -> Result<bool, OracleError> {
    let init = read_mountinfo("/proc/1/mountinfo")?;
    Ok(mounts()?.iter().any(|m| init.iter().any(|i| i.id == m.id)))
}

/// Whether a whole [`MarkedFs`] tmpfs (not a bind mount of part of one, nor
/// any other tmpfs such as /dev/shm) is mounted at `path` in the calling
/// thread's namespace.
pub fn is_marked_fs_root(path: &Path) -> Result<bool, OracleError> {
    Ok(mounts()?.iter().any(|m| {
        m.mount_point == path
            && m.root == Path::new("/")
            && m.fstype == "tmpfs"
            && m.source == MARKED_FS_SOURCE
    }))
}

/// Parses `id parent major:minor root mount_point options [optional...] - fstype source super_options`.
fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let (head, tail) = line.split_once(" - ")?;
    let mut tail = tail.split(' ');
    let mut head = head.split(' ');
    let id = head.next()?.parse().ok()?;
    let root = head.nth(2)?;
    let mount_point = head.next()?;
    Some(MountEntry {
        id,
        root: PathBuf::from(unescape_octal(root)),
        mount_point: PathBuf::from(unescape_octal(mount_point)),
        fstype: tail.next()?.to_string(),
        source: unescape_octal(tail.next()?),
    })
}

/// The kernel writes space, tab, newline and backslash in paths as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) => {
                out.push((d[0] - b'0') << 6 | (d[1] - b'0') << 3 | (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let l =
            "36 35 98:0 /mnt1 /mnt/par\\040ent rw,noatime master:1 shared:3 - ext3 /dev/root rw";
        assert_eq!(
            parse_mountinfo_line(l),
            Some(MountEntry {
                id: 36,
                root: "/mnt1".into(),
                mount_point: "/mnt/par ent".into(),
                fstype: "ext3".into(),
                source: "/dev/root".into(),
            })
        );
        let l = "99 27 0:60 / /tmp/x rw,nosuid,nodev,relatime - tmpfs taskgate-oracle rw,mode=755";
        let m = parse_mountinfo_line(l).unwrap();
        assert_eq!((m.root.to_str(), m.fstype.as_str()), (Some("/"), "tmpfs"));
        assert_eq!(parse_mountinfo_line("garbage"), None);
        assert_eq!(unescape_octal("a\\134b\\011\\0"), "a\\b\t\\0");
    }

    #[test]
    fn plain_directory_is_not_a_tmpfs_root() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_marked_fs_root(&dir.path().canonicalize().unwrap()).unwrap());
        assert!(mounts()
            .unwrap()
            .iter()
            .any(|m| m.mount_point == Path::new("/")));
    }
}
