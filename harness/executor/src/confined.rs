//! File work the host side (engine hooks, the executor, running as host
//! root in the host's mount namespace) does inside an alloc dir, where a
//! task may have planted anything: the shared `alloc/` is every task's
//! `/alloc`, writable by a root task. Nothing here follows a link there.
//!
//! A [`ConfinedDir`] is an open directory. Each step resolves one name
//! beneath it with `openat2` (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), and
//! what it finds must be what is asked for: a symlink, FIFO, socket or
//! device where a log file or a directory belongs is refused, with the path
//! named, and never opened. An existing file is first opened `O_PATH`
//! (which opens nothing), checked to be a regular file, and only then
//! reopened for reading or writing through its own fd.

use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// What was found where something else belongs: refused, never opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("refusing {path}: it is {found}, where {expected} belongs (never followed or opened)")]
pub struct Refusal {
    pub path: PathBuf,
    pub found: String,
    pub expected: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfinedError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ConfinedError {
    fn io(what: &'static str, path: PathBuf) -> impl FnOnce(Errno) -> ConfinedError {
        move |e| ConfinedError::Io {
            what,
            path,
            source: e.into(),
        }
    }
}

/// An open directory that names are resolved beneath, one at a time.
#[derive(Debug)]
pub struct ConfinedDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// How an existing regular file is reopened.
#[derive(Clone, Copy)]
enum Access {
    Read,
    Append,
    Truncate,
}

impl ConfinedDir {
    /// Opens `path`, a directory no task can write the name of (the alloc
    /// dir, a task dir), as the root of everything resolved beneath it. A
    /// symlink as its last component is refused too.
    pub fn open(path: &Path) -> Result<ConfinedDir, ConfinedError> {
        match open_dir_at(None, path.as_os_str()) {
            Ok(fd) => Ok(ConfinedDir {
                fd,
                path: path.to_path_buf(),
            }),
            Err(Errno::ELOOP | Errno::ENOTDIR) => Err(refused(path, "a directory")),
            Err(e) => Err(ConfinedError::io("open", path.to_path_buf())(e)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory `name` beneath this one.
    pub fn dir(&self, name: &str) -> Result<ConfinedDir, ConfinedError> {
        let path = self.child(name)?;
        match self.resolve(name, DIR_NO_LINK, Mode::empty()) {
            Ok(fd) => Ok(ConfinedDir { fd, path }),
            Err(Errno::ELOOP | Errno::ENOTDIR) => Err(refused(&path, "a directory")),
            Err(e) => Err(ConfinedError::io("open", path)(e)),
        }
    }

    /// The directory `name` beneath this one, made with `mode` (less the
    /// umask) if it is not there.
    pub fn create_dir(&self, name: &str, mode: u32) -> Result<ConfinedDir, ConfinedError> {
        let path = self.child(name)?;
        match mkdirat(
            Some(self.fd.as_raw_fd()),
            name,
            Mode::from_bits_truncate(mode),
        ) {
            Ok(()) | Err(Errno::EEXIST) => self.dir(name),
            Err(e) => Err(ConfinedError::io("create", path)(e)),
        }
    }

    /// [`ConfinedDir::create_dir`] for each component of `relative`.
    pub fn create_dir_all(&self, relative: &Path, mode: u32) -> Result<ConfinedDir, ConfinedError> {
        let mut names = relative.components().map(|c| match c {
            Component::Normal(name) => name.to_str().ok_or_else(|| unsafe_name(self, relative)),
            _ => Err(unsafe_name(self, relative)),
        });
        let first = names.next().ok_or_else(|| unsafe_name(self, relative))??;
        let mut dir = self.create_dir(first, mode)?;
        for name in names {
            dir = dir.create_dir(name?, mode)?;
        }
        Ok(dir)
    }

    /// The regular file `name`, created (mode 0644 less the umask) if it is
    /// not there, opened for appending.
    pub fn open_append(&self, name: &str) -> Result<File, ConfinedError> {
        self.open_regular(name, Access::Append)
    }

    /// The regular file `name`, created if it is not there, emptied.
    pub fn create_truncate(&self, name: &str) -> Result<File, ConfinedError> {
        self.open_regular(name, Access::Truncate)
    }

    /// The existing regular file `name`, opened for reading.
    pub fn open_read(&self, name: &str) -> Result<File, ConfinedError> {
        self.open_regular(name, Access::Read)
    }

    /// Removes the entry `name`, whatever it is but a directory: unlinking
    /// a link removes the link, never what it points to.
    pub fn remove_file(&self, name: &str) -> Result<(), ConfinedError> {
        let path = self.child(name)?;
        nix::unistd::unlinkat(
            Some(self.fd.as_raw_fd()),
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )
        .map_err(ConfinedError::io("remove", path))
    }

    /// The names in this directory (`.` and `..` aside), listed whole
    /// whatever other listing is under way (see [`entries`]).
    pub fn names(&self) -> Result<Vec<OsString>, ConfinedError> {
        let listed = entries(&self.fd).map_err(ConfinedError::io("list", self.path.clone()))?;
        Ok(listed.into_iter().map(|(name, _)| name).collect())
    }

    /// Gives this directory to `uid:gid`, through its fd.
    pub fn chown(&self, uid: u32, gid: u32) -> Result<(), ConfinedError> {
        nix::unistd::fchown(
            self.fd.as_raw_fd(),
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )
        .map_err(ConfinedError::io("chown", self.path.clone()))
    }

    /// Sets this directory's mode, through its fd.
    pub fn chmod(&self, mode: u32) -> Result<(), ConfinedError> {
        nix::sys::stat::fchmod(self.fd.as_raw_fd(), Mode::from_bits_truncate(mode))
            .map_err(ConfinedError::io("chmod", self.path.clone()))
    }

    fn open_regular(&self, name: &str, access: Access) -> Result<File, ConfinedError> {
        let path = self.child(name)?;
        if !matches!(access, Access::Read) {
            // A new file is a regular file: nothing to check.
            let mut flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC;
            if matches!(access, Access::Append) {
                flags |= OFlag::O_APPEND;
            }
            match self.resolve(name, flags, Mode::from_bits_truncate(0o644)) {
                Ok(fd) => return Ok(File::from(fd)),
                Err(Errno::EEXIST) => {}
                Err(e) => return Err(ConfinedError::io("create", path)(e)),
            }
        }
        let pinned = match self.resolve(
            name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ELOOP) => return Err(refused(&path, "a regular file")),
            Err(e) => return Err(ConfinedError::io("open", path)(e)),
        };
        let stat = fstat(pinned.as_raw_fd()).map_err(ConfinedError::io("stat", path.clone()))?;
        let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
        if kind != SFlag::S_IFREG {
            return Err(refusal(path, kind_name(kind), "a regular file"));
        }
        // Another name for the same inode would be written through this one.
        if stat.st_nlink > 1 && !matches!(access, Access::Read) {
            return Err(refusal(
                path,
                "a file with other names (hard links)",
                "a file of its own",
            ));
        }
        // The O_PATH fd holds this very inode: reopening through it cannot
        // land anywhere else, whatever is renamed meanwhile. Non-blocking:
        // an open that breaks another's lease on the file is refused at
        // once, never held for the kernel's lease-break time (a regular
        // file's reads and writes ignore the flag).
        let flags = match access {
            Access::Read => OFlag::O_RDONLY,
            Access::Append => OFlag::O_WRONLY | OFlag::O_APPEND,
            Access::Truncate => OFlag::O_WRONLY | OFlag::O_TRUNC,
        } | OFlag::O_CLOEXEC
            | OFlag::O_NONBLOCK;
        let fd_path = format!("/proc/self/fd/{}", pinned.as_raw_fd());
        match nix::fcntl::open(fd_path.as_str(), flags, Mode::empty()) {
            // SAFETY: open just returned this fd and nothing else owns it.
            Ok(fd) => Ok(unsafe { File::from_raw_fd(fd) }),
            Err(Errno::EWOULDBLOCK) => Err(refusal(
                path,
                "a file another process holds a lease on",
                "a file of its own",
            )),
            Err(e) => Err(ConfinedError::io("open", path)(e)),
        }
    }

    fn resolve(&self, name: &str, flags: OFlag, mode: Mode) -> Result<OwnedFd, Errno> {
        let how = OpenHow::new().flags(flags).mode(mode).resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
        let fd = loop {
            match openat2(self.fd.as_raw_fd(), name, how) {
                Err(Errno::EAGAIN | Errno::EINTR) => continue,
                other => break other?,
            }
        };
        // SAFETY: openat2 just returned this fd and nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// `name` must be one plain path component.
    fn child(&self, name: &str) -> Result<PathBuf, ConfinedError> {
        let mut parts = Path::new(name).components();
        match (parts.next(), parts.next()) {
            (Some(Component::Normal(_)), None) => Ok(self.path.join(name)),
            _ => Err(unsafe_name(self, Path::new(name))),
        }
    }
}

/// Removes the directory `path` and everything beneath it, whatever a
/// task left there (a missing `path` is already removed). No link is
/// followed, and however deep the tree, the walk holds at most three
/// directories open and never recurses: the standard library's
/// `remove_dir_all` holds one open per level and recurses, so a tree
/// deeper than the fd limit, or than a thread's stack, stopped it (or
/// crashed the process). It goes back up through `..`, checked to be the
/// very directory it came down from.
pub fn remove_tree(path: &Path) -> Result<(), ConfinedError> {
    let fail = |what| ConfinedError::io(what, path.to_path_buf());
    let mut here = match open_dir_at(None, path.as_os_str()) {
        Err(Errno::ENOENT) => return Ok(()),
        Err(Errno::ELOOP | Errno::ENOTDIR) => return Err(refused(path, "a directory")),
        opened => opened.map_err(fail("open"))?,
    };
    // The directories walked down through: each one's name in its parent,
    // the parent's identity, and the parent's subdirectories still to go.
    struct Level {
        name: OsString,
        parent: (u64, u64),
        rest: Vec<OsString>,
    }
    let mut down: Vec<Level> = Vec::new();
    let mut subdirs = remove_all_but_subdirs(&here).map_err(fail("empty"))?;
    loop {
        if let Some(name) = subdirs.pop() {
            let child = match open_dir_at(Some(&here), &name) {
                Err(Errno::ENOENT) => continue,
                opened => opened.map_err(fail("open beneath"))?,
            };
            down.push(Level {
                name,
                parent: identity(&here).map_err(fail("stat beneath"))?,
                rest: std::mem::take(&mut subdirs),
            });
            here = child;
            subdirs = remove_all_but_subdirs(&here).map_err(fail("empty beneath"))?;
            continue;
        }
        let Some(level) = down.pop() else { break };
        let parent = open_dir_at(Some(&here), std::ffi::OsStr::new("..")).map_err(fail("go up"))?;
        if identity(&parent).map_err(fail("stat beneath"))? != level.parent {
            return Err(refusal(
                path.to_path_buf(),
                "a tree that moved as it was removed",
                "a tree nothing else changes",
            ));
        }
        nix::unistd::unlinkat(
            Some(parent.as_raw_fd()),
            level.name.as_os_str(),
            nix::unistd::UnlinkatFlags::RemoveDir,
        )
        .map_err(fail("remove beneath"))?;
        here = parent;
        subdirs = level.rest;
    }
    drop(here);
    std::fs::remove_dir(path).map_err(|source| ConfinedError::Io {
        what: "remove",
        path: path.to_path_buf(),
        source,
    })
}

/// How a directory is opened: never through a link as its last name.
const DIR_NO_LINK: OFlag = OFlag::O_DIRECTORY
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_RDONLY)
    .union(OFlag::O_CLOEXEC);

/// The directory `name` beneath `dir` (or `name` itself), never a link.
fn open_dir_at(dir: Option<&OwnedFd>, name: &std::ffi::OsStr) -> Result<OwnedFd, Errno> {
    let fd = nix::fcntl::openat(
        dir.map(AsRawFd::as_raw_fd),
        name,
        DIR_NO_LINK,
        Mode::empty(),
    )?;
    // SAFETY: openat just returned this fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A directory's device and inode.
fn identity(dir: &OwnedFd) -> Result<(u64, u64), Errno> {
    let stat = fstat(dir.as_raw_fd())?;
    Ok((stat.st_dev, stat.st_ino))
}

/// The entries of `dir` (`.` and `..` aside), each with its kind if the
/// listing says it. Read through a new open of `.` beneath the fd, not a
/// `dup` of it: a dup shares the fd's directory offset, so two listings at
/// once (the stdout and stderr pumps rotating) would each read part of it.
fn entries(dir: &OwnedFd) -> Result<Vec<(OsString, Option<nix::dir::Type>)>, Errno> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut listing = nix::dir::Dir::openat(Some(dir.as_raw_fd()), ".", flags, Mode::empty())?;
    let mut entries = Vec::new();
    for entry in listing.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            let name = std::ffi::OsStr::from_bytes(name).to_os_string();
            entries.push((name, entry.file_type()));
        }
    }
    Ok(entries)
}

/// Unlinks every entry of `dir` but its subdirectories, and names those.
fn remove_all_but_subdirs(dir: &OwnedFd) -> Result<Vec<OsString>, Errno> {
    let mut subdirs = Vec::new();
    for (name, kind) in entries(dir)? {
        let is_dir = match kind {
            Some(kind) => kind == nix::dir::Type::Directory,
            None => {
                let at = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
                let stat = nix::sys::stat::fstatat(Some(dir.as_raw_fd()), name.as_os_str(), at)?;
                stat.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits()
            }
        };
        if is_dir {
            subdirs.push(name);
            continue;
        }
        let unlinked = nix::unistd::unlinkat(
            Some(dir.as_raw_fd()),
            name.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        match unlinked {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(subdirs)
}

fn refused(path: &Path, expected: &'static str) -> ConfinedError {
    let found = match std::fs::symlink_metadata(path) {
        Ok(meta) => kind_name(SFlag::from_bits_truncate(
            std::os::unix::fs::MetadataExt::mode(&meta) & SFlag::S_IFMT.bits(),
        )),
        Err(_) => "something that changed under it",
    };
    refusal(path.to_path_buf(), found, expected)
}

fn refusal(path: PathBuf, found: &str, expected: &str) -> ConfinedError {
    ConfinedError::Refused(Refusal {
        path,
        found: found.into(),
        expected: expected.into(),
    })
}

fn unsafe_name(dir: &ConfinedDir, name: &Path) -> ConfinedError {
    refusal(
        dir.path.join(name),
        "not a plain name",
        "a name without `..`, `/` or `.`",
    )
}

fn kind_name(kind: SFlag) -> &'static str {
    match kind {
        SFlag::S_IFLNK => "a symlink",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFBLK => "a block device",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFREG => "a regular file",
        _ => "of an unknown kind",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn home() -> (tempfile::TempDir, ConfinedDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = ConfinedDir::open(tmp.path()).unwrap();
        (tmp, dir)
    }

    #[test]
    fn files_are_created_appended_truncated_and_read() {
        let (_tmp, dir) = home();
        dir.open_append("log").unwrap().write_all(b"ab").unwrap();
        dir.open_append("log").unwrap().write_all(b"cd").unwrap();
        let mut text = String::new();
        dir.open_read("log")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "abcd");
        dir.create_truncate("log").unwrap().write_all(b"e").unwrap();
        text.clear();
        dir.open_read("log")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "e");
        assert_eq!(dir.names().unwrap(), vec![OsString::from("log")]);
    }

    /// A file its writer holds a lease on (a root task may take one on a
    /// sibling's log in `/alloc`) is refused at once: an open that breaks
    /// the lease would wait out the kernel's lease-break time (45 s), a
    /// thread of the agent's held for each.
    #[test]
    fn a_file_under_a_lease_is_refused_at_once() {
        let (tmp, dir) = home();
        dir.open_append("log").unwrap();
        // The lease's break is told to its holder, here this process, by
        // SIGIO: ignored, not the end of the test binary.
        // SAFETY: sets SIGIO's disposition to ignore; no handler runs.
        unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) };
        let held = File::open(tmp.path().join("log")).unwrap();
        // SAFETY: fcntl on an fd this test owns.
        let leased = unsafe { libc::fcntl(held.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) };
        assert_eq!(leased, 0, "{}", std::io::Error::last_os_error());
        let opened = dir.open_append("log");
        assert!(
            opened
                .as_ref()
                .is_err_and(|e| e.to_string().contains("lease")),
            "{opened:?}"
        );
    }

    #[test]
    fn a_symlink_is_refused_wherever_it_stands() {
        let (tmp, dir) = home();
        let victim = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(victim.path(), tmp.path().join("logs")).unwrap();
        std::os::unix::fs::symlink(victim.path().join("f"), tmp.path().join("f")).unwrap();
        for result in [
            dir.create_dir("logs", 0o755).map(drop),
            dir.dir("logs").map(drop),
            dir.open_append("f").map(drop),
            dir.create_truncate("f").map(drop),
            dir.open_read("f").map(drop),
        ] {
            let err = result.unwrap_err().to_string();
            assert!(err.contains("it is a symlink"), "{err}");
        }
        assert_eq!(std::fs::read_dir(victim.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_hard_linked_file_is_not_written() {
        let (tmp, dir) = home();
        std::fs::write(tmp.path().join("other"), "theirs").unwrap();
        std::fs::hard_link(tmp.path().join("other"), tmp.path().join("log")).unwrap();
        for result in [dir.open_append("log"), dir.create_truncate("log")] {
            let err = result.unwrap_err().to_string();
            assert!(err.contains("hard links"), "{err}");
        }
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("other")).unwrap(),
            "theirs"
        );
        assert!(dir.open_read("log").is_ok());
    }

    #[test]
    fn a_fifo_is_refused_without_being_opened() {
        let (tmp, dir) = home();
        nix::unistd::mkfifo(&tmp.path().join("f"), Mode::from_bits_truncate(0o600)).unwrap();
        // Opening a FIFO with no reader for writing would block: refusing it returns.
        let err = dir.open_append("f").unwrap_err().to_string();
        assert!(err.contains("it is a FIFO"), "{err}");
        let err = dir.dir("f").unwrap_err().to_string();
        assert!(
            err.contains("it is a FIFO, where a directory belongs"),
            "{err}"
        );
    }

    /// The stdout and stderr pumps each list the logs dir to rotate: a
    /// listing of one must not start where the other's has got to, or it
    /// misses files (and its pruning keeps too many, or the wrong ones).
    #[test]
    fn a_listing_is_whole_while_another_is_under_way() {
        let (_tmp, dir) = home();
        let all: Vec<OsString> = (0..5).map(|n| OsString::from(format!("f{n}"))).collect();
        for name in &all {
            dir.open_append(name.to_str().unwrap()).unwrap();
        }
        // Another listing of the same dir, part read (and not dropped).
        let other = nix::unistd::dup(dir.fd.as_raw_fd()).unwrap();
        let mut other = nix::dir::Dir::from_fd(other).unwrap();
        let mut under_way = other.iter();
        under_way.next();
        let mut listed = dir.names().unwrap();
        listed.sort();
        assert_eq!(listed, all);
    }

    #[test]
    fn names_that_climb_or_nest_are_refused() {
        let (_tmp, dir) = home();
        for name in ["..", "a/b", "/etc", ".", ""] {
            assert!(dir.open_append(name).is_err(), "{name:?}");
        }
        assert!(dir.create_dir_all(Path::new("a/../b"), 0o755).is_err());
        let nested = dir.create_dir_all(Path::new("a/b"), 0o755).unwrap();
        assert!(nested.path().ends_with("a/b"));
    }

    /// Everything a task can leave goes, and nothing a link points at.
    #[test]
    fn a_tree_goes_whole_and_no_link_is_followed() {
        let (tmp, _) = home();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "kept").unwrap();
        let tree = tmp.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b/c")).unwrap();
        std::fs::write(tree.join("a/file"), "x").unwrap();
        std::fs::write(tree.join("a/b/c/deep"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("a/b/to-outside")).unwrap();
        std::os::unix::fs::symlink(outside.join("keep"), tree.join("to-keep")).unwrap();
        nix::unistd::mkfifo(&tree.join("a/fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        let odd = std::ffi::OsStr::from_bytes(b"not-utf8-\xff");
        std::fs::create_dir(tree.join(odd)).unwrap();
        std::fs::write(tree.join(odd).join("f"), "x").unwrap();
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).unwrap(),
            "kept"
        );
        // Gone already: nothing to do.
        remove_tree(&tree).unwrap();
        // A link where the tree belongs is refused, its target untouched.
        std::os::unix::fs::symlink(&outside, &tree).unwrap();
        assert!(matches!(remove_tree(&tree), Err(ConfinedError::Refused(_))));
        assert!(outside.join("keep").exists());
    }

    /// A tree deeper than the fd limit would allow one fd per level, and
    /// than a small stack would allow one frame per level, goes: the walk
    /// holds a few fds and does not recurse.
    #[test]
    fn a_tree_deeper_than_fds_or_stack_allow_goes() {
        const DEPTH: usize = 3_000;
        let (tmp, _) = home();
        let tree = tmp.path().join("tree");
        std::fs::create_dir(&tree).unwrap();
        let mut dir = open_dir_at(None, tree.as_os_str()).unwrap();
        for _ in 0..DEPTH {
            mkdirat(Some(dir.as_raw_fd()), "d", Mode::from_bits_truncate(0o755)).unwrap();
            dir = open_dir_at(Some(&dir), std::ffi::OsStr::new("d")).unwrap();
        }
        drop(dir);
        let removing = tree.clone();
        let removed = std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || remove_tree(&removing).map_err(|e| e.to_string()))
            .unwrap()
            .join()
            .unwrap();
        removed.unwrap();
        assert!(!tree.exists());
    }
}
