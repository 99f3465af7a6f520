//! The seam between the task process's set-up and the kernel: every call
//! that builds the task's namespaces and root ([`super::rootfs`],
//! [`super::namespaces`]) goes through [`Syscalls`], so the sequence can be
//! checked call by call without root against a recording fake.

mod linux;
#[cfg(test)]
pub(crate) mod recording;

pub(crate) use linux::LinuxSyscalls;

use crate::error::ExecutorError;
use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::stat::{Mode, SFlag};
use std::path::Path;

/// What the task process does to the system while it enters its namespaces
/// and builds its root, one method per call.
///
/// The contract:
/// - **One call, as given.** Each method makes exactly the one call it is
///   named after (or the one `std::fs` operation), with the arguments it is
///   given: no retries, no fallbacks, no checks, no rewriting of paths
///   (a relative path resolves against the current directory). Every
///   decision (which flags, which order, what to skip) belongs to the caller,
///   so a fake sees the same decisions the kernel does.
/// - **Only in the task's own namespaces.** Only the task process calls
///   these, after it was cloned into a new mount namespace
///   ([`super::namespaces::clone_task`]); the first mount it makes turns `/`
///   recursively private, so no later mount propagates to the host. Nothing
///   here checks where it runs: the executor and the agent never call it.
/// - **Errors are the kernel's.** An `Err` is the error of that one call,
///   unchanged. The caller says what it was doing and on which path, and
///   stops: no call follows a failed one (the half-built root goes with the
///   task process and its mount namespace, which then exit).
/// - **Queries change nothing.** [`Syscalls::file_kind`] only looks.
pub(crate) trait Syscalls {
    /// `mount(2)`.
    fn mount(
        &self,
        source: Option<&str>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> nix::Result<()>;
    /// `umount2(2)`.
    fn umount2(&self, target: &Path, flags: MntFlags) -> nix::Result<()>;
    /// `mount_setattr(2)` with `AT_RECURSIVE`: sets `attrs` on the mount at
    /// `target` and on every mount below it, clearing nothing.
    fn set_tree_attributes(&self, target: &Path, attrs: MountAttrs) -> std::io::Result<()>;
    /// `mknod(2)`.
    fn mknod(&self, path: &Path, kind: SFlag, perm: Mode, dev: libc::dev_t) -> nix::Result<()>;
    /// `chmod(2)`: sets `mode` exactly, whatever the umask.
    fn chmod(&self, path: &Path, mode: Mode) -> std::io::Result<()>;
    /// `mkdir -p`: creates `path` and its missing parents; an existing
    /// directory is not an error.
    fn mkdir_all(&self, path: &Path) -> std::io::Result<()>;
    /// Creates an empty file at `path` (an existing one is kept as it is,
    /// never truncated); its parent must exist.
    fn create_file(&self, path: &Path) -> std::io::Result<()>;
    /// `symlink(2)`: a link at `link` pointing to `target`.
    fn symlink(&self, target: &Path, link: &Path) -> std::io::Result<()>;
    /// `chdir(2)`.
    fn chdir(&self, path: &Path) -> nix::Result<()>;
    /// `pivot_root(2)`.
    fn pivot_root(&self, new_root: &Path, put_old: &Path) -> nix::Result<()>;
    /// `unshare(2)`.
    fn unshare(&self, flags: CloneFlags) -> nix::Result<()>;
    /// `sethostname(2)`.
    fn sethostname(&self, name: &str) -> nix::Result<()>;
    /// Brings up `lo` in the current network namespace (two `ioctl`s on a
    /// datagram socket); the error already says which step failed.
    fn bring_up_loopback(&self) -> Result<(), ExecutorError>;
    /// What is at `path`, following links (`stat(2)`); `None` when nothing
    /// is there or it cannot be looked at, as for [`Path::exists`].
    fn file_kind(&self, path: &Path) -> Option<FileKind>;
}

/// What [`Syscalls::file_kind`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    Dir,
    /// A file, device, socket or anything else that is not a directory.
    NotDir,
}

/// The `MOUNT_ATTR_*` attributes [`Syscalls::set_tree_attributes`] sets
/// (those the task's binds use).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct MountAttrs(u64);

impl MountAttrs {
    pub(crate) const RDONLY: MountAttrs = MountAttrs(libc::MOUNT_ATTR_RDONLY);
    pub(crate) const NOSUID: MountAttrs = MountAttrs(libc::MOUNT_ATTR_NOSUID);
    pub(crate) const NODEV: MountAttrs = MountAttrs(libc::MOUNT_ATTR_NODEV);
    const NAMED: [(MountAttrs, &'static str); 3] = [
        (MountAttrs::RDONLY, "RDONLY"),
        (MountAttrs::NOSUID, "NOSUID"),
        (MountAttrs::NODEV, "NODEV"),
    ];

    /// The `attr_set` word of `struct mount_attr`.
    pub(crate) const fn bits(self) -> u64 {
        self.0
    }

    pub(crate) const fn contains(self, other: MountAttrs) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for MountAttrs {
    type Output = MountAttrs;

    fn bitor(self, other: MountAttrs) -> MountAttrs {
        MountAttrs(self.0 | other.0)
    }
}

impl std::ops::BitOrAssign for MountAttrs {
    fn bitor_assign(&mut self, other: MountAttrs) {
        self.0 |= other.0;
    }
}

impl std::fmt::Debug for MountAttrs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = MountAttrs::NAMED
            .iter()
            .filter(|(attr, _)| self.contains(*attr))
            .map(|(_, name)| *name)
            .collect();
        write!(f, "MountAttrs({})", names.join(" | "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_attrs_are_the_kernels_bits_and_print_by_name() {
        let attrs = MountAttrs::NOSUID | MountAttrs::NODEV;
        assert_eq!(
            attrs.bits(),
            libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV
        );
        assert!(attrs.contains(MountAttrs::NODEV));
        assert!(!attrs.contains(MountAttrs::RDONLY));
        assert_eq!(format!("{attrs:?}"), "MountAttrs(NOSUID | NODEV)");
    }
}
