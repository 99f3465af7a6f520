//! The on-disk layout of an allocation, as Nomad's allocdir package lays it out:
//!
//! ```text
//! <root>/alloc/            shared by every task (mounted at /alloc)
//! <root>/alloc/logs/       <task>.stdout.N / <task>.stderr.N
//! <root>/<task>/local/     task scratch (mounted at /local)
//! <root>/<task>/secrets/   (mounted at /secrets)
//! <root>/<task>/tmp/       (mounted at /tmp)
//! ```

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocDir {
    root: PathBuf,
}

impl AllocDir {
    pub fn new(root: PathBuf) -> Self {
        AllocDir { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn shared(&self) -> PathBuf {
        self.root.join("alloc")
    }

    pub fn logs(&self) -> PathBuf {
        self.shared().join("logs")
    }

    pub fn task_dir(&self, task: &str) -> PathBuf {
        self.root.join(task)
    }

    /// First generation of a task's log file, e.g. `web.stdout.0`.
    pub fn log_file(&self, task: &str, stream: &str) -> PathBuf {
        self.logs().join(format!("{task}.{stream}.0"))
    }

    /// Creates the shared part of the layout; task dirs are each task's own
    /// prestart work.
    pub fn build_shared(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(self.logs())
    }
}
