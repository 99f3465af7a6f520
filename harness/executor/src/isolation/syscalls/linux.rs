//! The real [`Syscalls`]: thin wrappers over nix, libc and `std::fs`, each
//! one call.

use super::{FileKind, MountAttrs, Syscalls};
use crate::error::ExecutorError;
use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::stat::{Mode, SFlag};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The kernel itself: what the task process uses.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LinuxSyscalls;

impl Syscalls for LinuxSyscalls {
    fn mount(
        &self,
        source: Option<&str>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> nix::Result<()> {
        nix::mount::mount(source, target, fstype, flags, data)
    }

    fn umount2(&self, target: &Path, flags: MntFlags) -> nix::Result<()> {
        nix::mount::umount2(target, flags)
    }

    fn set_tree_attributes(&self, target: &Path, attrs: MountAttrs) -> std::io::Result<()> {
        let path = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains NUL")
        })?;
        let attr = libc::mount_attr {
            attr_set: attrs.bits(),
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
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn mknod(&self, path: &Path, kind: SFlag, perm: Mode, dev: libc::dev_t) -> nix::Result<()> {
        nix::sys::stat::mknod(path, kind, perm, dev)
    }

    fn chmod(&self, path: &Path, mode: Mode) -> std::io::Result<()> {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode.bits()))
    }

    fn mkdir_all(&self, path: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn create_file(&self, path: &Path) -> std::io::Result<()> {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map(drop)
    }

    fn symlink(&self, target: &Path, link: &Path) -> std::io::Result<()> {
        std::os::unix::fs::symlink(target, link)
    }

    fn chdir(&self, path: &Path) -> nix::Result<()> {
        nix::unistd::chdir(path)
    }

    fn pivot_root(&self, new_root: &Path, put_old: &Path) -> nix::Result<()> {
        nix::unistd::pivot_root(new_root, put_old)
    }

    fn unshare(&self, flags: CloneFlags) -> nix::Result<()> {
        nix::sched::unshare(flags)
    }

    fn sethostname(&self, name: &str) -> nix::Result<()> {
        nix::unistd::sethostname(name)
    }

    fn bring_up_loopback(&self) -> Result<(), ExecutorError> {
        super::super::namespaces::bring_up_loopback()
    }

    fn file_kind(&self, path: &Path) -> Option<FileKind> {
        let meta = std::fs::metadata(path).ok()?;
        Some(if meta.is_dir() {
            FileKind::Dir
        } else {
            FileKind::NotDir
        })
    }
}

/// The wrappers reach the kernel with what they are given. Only calls that
/// change nothing outside a temp dir, whoever runs them: the mount family
/// aims at a path that does not exist, so even as root nothing is mounted.
#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn file_calls_do_what_the_contract_says() {
        let dir = tempfile::tempdir().unwrap();
        let sys = LinuxSyscalls;
        let nested = dir.path().join("a/b");
        sys.mkdir_all(&nested).unwrap();
        sys.mkdir_all(&nested).expect("an existing dir is no error");
        assert_eq!(sys.file_kind(&nested), Some(FileKind::Dir));

        let file = nested.join("f");
        std::fs::write(&file, "kept").unwrap();
        sys.create_file(&file).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept");
        assert_eq!(sys.file_kind(&file), Some(FileKind::NotDir));
        sys.chmod(&file, Mode::from_bits_truncate(0o666)).unwrap();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o666, "past the umask");

        let link = dir.path().join("link");
        sys.symlink(Path::new("a/b"), &link).unwrap();
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("a/b"));
        assert_eq!(sys.file_kind(&link), Some(FileKind::Dir), "links followed");
        assert_eq!(sys.file_kind(&dir.path().join("missing")), None);

        let fifo = dir.path().join("fifo");
        sys.mknod(&fifo, SFlag::S_IFIFO, Mode::from_bits_truncate(0o600), 0)
            .unwrap();
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    }

    #[test]
    fn mount_calls_reach_the_kernel_with_their_target() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let sys = LinuxSyscalls;
        let bind = MsFlags::MS_BIND | MsFlags::MS_REC;
        let mounted = sys.mount(Some("/"), &missing, None, bind, None);
        assert_eq!(mounted, Err(Errno::ENOENT), "the target is looked up first");
        assert_eq!(
            sys.umount2(&missing, MntFlags::MNT_DETACH),
            Err(Errno::ENOENT)
        );
        // Unprivileged, mount_setattr refuses before it looks the path up; a
        // malformed call (size, flags) would be EINVAL or E2BIG instead.
        let attrs = MountAttrs::NOSUID | MountAttrs::NODEV | MountAttrs::RDONLY;
        let err = sys.set_tree_attributes(&missing, attrs).unwrap_err();
        let errno = Errno::from_raw(err.raw_os_error().unwrap());
        assert!(matches!(errno, Errno::ENOENT | Errno::EPERM), "{err}");
    }
}
