//! The on-disk layout of an allocation, as Nomad's allocdir package lays it out:
//!
//! ```text
//! <root>/alloc/            shared by every task (mounted at /alloc)
//! <root>/alloc/logs/       <task>.stdout.N / <task>.stderr.N
//! <root>/<task>/local/     task scratch (mounted at /local)
//! <root>/<task>/secrets/   (mounted at /secrets)
//! <root>/<task>/tmp/       (mounted at /tmp)
//! ```
//!
//! The shared dir is every task's `/alloc`, where a root task can plant a
//! link, FIFO or device node: the engine builds and opens what is below
//! the root only beneath the root's fd, never following a link (see
//! `taskgate_executor::confined`).

use std::path::{Path, PathBuf};
use taskgate_executor::confined::{ConfinedDir, ConfinedError};
use taskgate_executor::{LOGS_DIR, SHARED_ALLOC_DIR as SHARED_DIR};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocDir {
    root: PathBuf,
}

impl AllocDir {
    pub fn new(root: PathBuf) -> Self {
        AllocDir { root }
    }

    pub fn shared(&self) -> PathBuf {
        self.root.join(SHARED_DIR)
    }

    pub fn task_dir(&self, task: &str) -> PathBuf {
        self.root.join(task)
    }

    /// Creates the shared part of the layout and returns its logs dir;
    /// task dirs are each task's own prestart work.
    pub fn build_shared(&self) -> Result<ConfinedDir, ConfinedError> {
        // The root's own path is the engine's: no task can write a name in it.
        std::fs::create_dir_all(&self.root).map_err(|source| ConfinedError::Io {
            what: "create",
            path: self.root.clone(),
            source,
        })?;
        ConfinedDir::open(&self.root)?.create_dir_all(&Path::new(SHARED_DIR).join(LOGS_DIR), 0o755)
    }

    /// The existing logs dir, for readers (`taskgate logs`): opened
    /// beneath the alloc dir like everything else there.
    pub fn open_logs(&self) -> Result<ConfinedDir, ConfinedError> {
        ConfinedDir::open(&self.root)?
            .dir(SHARED_DIR)?
            .dir(LOGS_DIR)
    }

    /// Creates `task`'s own dir (not its subdirs) and returns it.
    pub fn build_task_dir(&self, task: &str) -> Result<ConfinedDir, ConfinedError> {
        ConfinedDir::open(&self.root)?.create_dir(task, 0o755)
    }
}
