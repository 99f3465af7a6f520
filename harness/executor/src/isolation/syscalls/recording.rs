//! A [`Syscalls`] that changes nothing: it records each call with its
//! arguments as typed values, answers [`Syscalls::file_kind`] from the
//! entries it was given, and fails the call it was told to fail.

use super::{FileKind, MountAttrs, Syscalls};
use crate::error::ExecutorError;
use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::stat::{Mode, SFlag};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One call made through [`Syscalls`], as made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    Mount {
        source: Option<String>,
        target: PathBuf,
        fstype: Option<String>,
        flags: MsFlags,
        data: Option<String>,
    },
    Umount2 {
        target: PathBuf,
        flags: MntFlags,
    },
    SetTreeAttributes {
        target: PathBuf,
        attrs: MountAttrs,
    },
    Mknod {
        path: PathBuf,
        kind: SFlag,
        perm: Mode,
        major: u64,
        minor: u64,
    },
    Chmod {
        path: PathBuf,
        mode: Mode,
    },
    MkdirAll {
        path: PathBuf,
    },
    CreateFile {
        path: PathBuf,
    },
    Symlink {
        target: PathBuf,
        link: PathBuf,
    },
    Chdir {
        path: PathBuf,
    },
    PivotRoot {
        new_root: PathBuf,
        put_old: PathBuf,
    },
    Unshare {
        flags: CloneFlags,
    },
    Sethostname {
        name: String,
    },
    BringUpLoopback,
}

impl Call {
    /// The path the call changes, if it names one.
    pub(crate) fn target(&self) -> Option<&Path> {
        match self {
            Call::Mount { target, .. }
            | Call::Umount2 { target, .. }
            | Call::SetTreeAttributes { target, .. } => Some(target),
            Call::Mknod { path, .. }
            | Call::Chmod { path, .. }
            | Call::MkdirAll { path }
            | Call::CreateFile { path }
            | Call::Chdir { path } => Some(path),
            Call::Symlink { link, .. } => Some(link),
            Call::PivotRoot { new_root, .. } => Some(new_root),
            Call::Unshare { .. } | Call::Sethostname { .. } | Call::BringUpLoopback => None,
        }
    }
}

/// Which call a [`RecordingSyscalls`] fails.
enum Failure {
    /// The call with this index (0 is the first call made).
    At(usize),
    /// Every call this matches.
    When(Box<dyn Fn(&Call) -> bool>),
}

/// The recording fake. A failed call is recorded too: it was attempted.
#[derive(Default)]
pub(crate) struct RecordingSyscalls {
    calls: RefCell<Vec<Call>>,
    entries: BTreeMap<PathBuf, FileKind>,
    failure: Option<(Failure, Errno)>,
}

impl RecordingSyscalls {
    pub(crate) fn new() -> RecordingSyscalls {
        RecordingSyscalls::default()
    }

    /// `path` exists and is a `kind` for [`Syscalls::file_kind`]; nothing
    /// else does.
    pub(crate) fn with_entry(mut self, path: impl Into<PathBuf>, kind: FileKind) -> Self {
        self.entries.insert(path.into(), kind);
        self
    }

    /// `path` is gone again.
    pub(crate) fn without_entry(mut self, path: &Path) -> Self {
        self.entries.remove(path);
        self
    }

    /// Fails the `index`th call (from 0) with `errno`.
    pub(crate) fn failing_at(mut self, index: usize, errno: Errno) -> Self {
        self.failure = Some((Failure::At(index), errno));
        self
    }

    /// Fails every call `matches` picks with `errno`.
    pub(crate) fn failing_when(
        mut self,
        matches: impl Fn(&Call) -> bool + 'static,
        errno: Errno,
    ) -> Self {
        self.failure = Some((Failure::When(Box::new(matches)), errno));
        self
    }

    /// Every call so far, in order.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    /// Records `call`; the error it was told to give, if this is the one.
    fn record(&self, call: Call) -> nix::Result<()> {
        let mut calls = self.calls.borrow_mut();
        let fails = match &self.failure {
            Some((Failure::At(index), errno)) => (*index == calls.len()).then_some(*errno),
            Some((Failure::When(matches), errno)) => matches(&call).then_some(*errno),
            None => None,
        };
        calls.push(call);
        fails.map_or(Ok(()), Err)
    }

    fn record_io(&self, call: Call) -> std::io::Result<()> {
        self.record(call).map_err(std::io::Error::from)
    }
}

impl Syscalls for RecordingSyscalls {
    fn mount(
        &self,
        source: Option<&str>,
        target: &Path,
        fstype: Option<&str>,
        flags: MsFlags,
        data: Option<&str>,
    ) -> nix::Result<()> {
        self.record(Call::Mount {
            source: source.map(str::to_string),
            target: target.to_path_buf(),
            fstype: fstype.map(str::to_string),
            flags,
            data: data.map(str::to_string),
        })
    }

    fn umount2(&self, target: &Path, flags: MntFlags) -> nix::Result<()> {
        self.record(Call::Umount2 {
            target: target.to_path_buf(),
            flags,
        })
    }

    fn set_tree_attributes(&self, target: &Path, attrs: MountAttrs) -> std::io::Result<()> {
        self.record_io(Call::SetTreeAttributes {
            target: target.to_path_buf(),
            attrs,
        })
    }

    fn mknod(&self, path: &Path, kind: SFlag, perm: Mode, dev: libc::dev_t) -> nix::Result<()> {
        self.record(Call::Mknod {
            path: path.to_path_buf(),
            kind,
            perm,
            major: nix::sys::stat::major(dev),
            minor: nix::sys::stat::minor(dev),
        })
    }

    fn chmod(&self, path: &Path, mode: Mode) -> std::io::Result<()> {
        self.record_io(Call::Chmod {
            path: path.to_path_buf(),
            mode,
        })
    }

    fn mkdir_all(&self, path: &Path) -> std::io::Result<()> {
        self.record_io(Call::MkdirAll {
            path: path.to_path_buf(),
        })
    }

    fn create_file(&self, path: &Path) -> std::io::Result<()> {
        self.record_io(Call::CreateFile {
            path: path.to_path_buf(),
        })
    }

    fn symlink(&self, target: &Path, link: &Path) -> std::io::Result<()> {
        self.record_io(Call::Symlink {
            target: target.to_path_buf(),
            link: link.to_path_buf(),
        })
    }

    fn chdir(&self, path: &Path) -> nix::Result<()> {
        self.record(Call::Chdir {
            path: path.to_path_buf(),
        })
    }

    fn pivot_root(&self, new_root: &Path, put_old: &Path) -> nix::Result<()> {
        self.record(Call::PivotRoot {
            new_root: new_root.to_path_buf(),
            put_old: put_old.to_path_buf(),
        })
    }

    fn unshare(&self, flags: CloneFlags) -> nix::Result<()> {
        self.record(Call::Unshare { flags })
    }

    fn sethostname(&self, name: &str) -> nix::Result<()> {
        self.record(Call::Sethostname {
            name: name.to_string(),
        })
    }

    fn bring_up_loopback(&self) -> Result<(), ExecutorError> {
        self.record(Call::BringUpLoopback)
            .map_err(|e| ExecutorError::Isolation(format!("bring up lo: {e}")))
    }

    fn file_kind(&self, path: &Path) -> Option<FileKind> {
        self.entries.get(path).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_in_order_and_fails_only_what_it_was_told() {
        let sys = RecordingSyscalls::new()
            .with_entry("/d", FileKind::Dir)
            .failing_when(|call| call.target() == Some(Path::new("/b")), Errno::EPERM);
        assert_eq!(sys.mkdir_all(Path::new("/a")).ok(), Some(()));
        let err = sys.mkdir_all(Path::new("/b")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(Errno::EPERM as i32));
        assert_eq!(sys.sethostname("web"), Ok(()));
        assert_eq!(sys.file_kind(Path::new("/d")), Some(FileKind::Dir));
        assert_eq!(
            sys.file_kind(Path::new("/a")),
            None,
            "only what it was given"
        );
        assert_eq!(
            sys.calls(),
            [
                Call::MkdirAll { path: "/a".into() },
                Call::MkdirAll { path: "/b".into() },
                Call::Sethostname { name: "web".into() },
            ]
        );

        let sys = RecordingSyscalls::new().failing_at(1, Errno::EBUSY);
        assert_eq!(sys.unshare(CloneFlags::CLONE_NEWCGROUP), Ok(()));
        assert_eq!(sys.chdir(Path::new("/")), Err(Errno::EBUSY));
        assert_eq!(sys.chdir(Path::new("/")), Ok(()));
    }
}
