//! The agent's data dir: the one home of its layout. Every path under it is
//! named here, so the engine, the CLI, the harness and the tests agree on
//! where the state database, the allocs and the sockets are.

use std::path::{Path, PathBuf};

/// A data dir: `state.db`, `allocs/<id>/`, `run/` (executor sockets and
/// the agent's control socket) and `cgroup-parent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir(PathBuf);

impl DataDir {
    pub fn new(path: impl Into<PathBuf>) -> DataDir {
        DataDir(path.into())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// For messages, as [`Path::display`].
    pub fn display(&self) -> std::path::Display<'_> {
        self.0.display()
    }

    /// The state database: root only, it holds every job's environment.
    pub fn state_db(&self) -> PathBuf {
        self.0.join("state.db")
    }

    /// Where every alloc's dir lives.
    pub fn allocs(&self) -> PathBuf {
        self.0.join("allocs")
    }

    /// The alloc dir of `alloc_id`.
    pub fn alloc(&self, alloc_id: &str) -> PathBuf {
        self.allocs().join(alloc_id)
    }

    /// Executor sockets and the agent's control socket: root only, since
    /// whoever reaches them can stop a task.
    pub fn run(&self) -> PathBuf {
        self.0.join("run")
    }

    /// Where the agent with this data dir listens.
    pub fn control_socket(&self) -> PathBuf {
        self.run().join("control.sock")
    }

    /// Names the cgroup parent this data dir's tasks live under.
    pub fn cgroup_parent_file(&self) -> PathBuf {
        self.0.join("cgroup-parent")
    }
}

impl From<&Path> for DataDir {
    fn from(path: &Path) -> DataDir {
        DataDir::new(path)
    }
}

/// A `--data-dir` argument.
impl From<std::ffi::OsString> for DataDir {
    fn from(path: std::ffi::OsString) -> DataDir {
        DataDir::new(path)
    }
}
