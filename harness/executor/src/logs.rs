//! The task's stdout/stderr, pumped from pipes into size-rotated files named
//! like Nomad's logmon: `<task>.stdout.0`, `.1`, … with the highest index the
//! current file and the oldest deleted once more than `max_files` exist.

use crate::error::ExecutorError;
use crate::spec::LogConfig;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

pub(crate) struct RotatingWriter {
    dir: PathBuf,
    /// `<task>.stdout` or `<task>.stderr`.
    base: String,
    cfg: LogConfig,
    index: u64,
    file: File,
    written: u64,
}

impl RotatingWriter {
    /// Continues the newest existing file, so a restarted task appends to its logs.
    pub fn open(
        dir: &Path,
        base: String,
        cfg: &LogConfig,
    ) -> Result<RotatingWriter, ExecutorError> {
        let index = existing_indexes(dir, &base)?.last().copied().unwrap_or(0);
        let path = dir.join(format!("{base}.{index}"));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(ExecutorError::io(format!("open log {}", path.display())))?;
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(RotatingWriter {
            dir: dir.to_path_buf(),
            base,
            cfg: cfg.clone(),
            index,
            file,
            written,
        })
    }

    pub fn write_all(&mut self, mut buf: &[u8]) -> Result<(), ExecutorError> {
        while !buf.is_empty() {
            if self.written >= self.cfg.max_file_size_bytes {
                self.rotate()?;
            }
            let room = self.cfg.max_file_size_bytes - self.written;
            let n = buf.len().min(room.try_into().unwrap_or(usize::MAX));
            self.file
                .write_all(&buf[..n])
                .map_err(ExecutorError::io(format!(
                    "write log {}.{}",
                    self.base, self.index
                )))?;
            self.written += n as u64;
            buf = &buf[n..];
        }
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), ExecutorError> {
        self.index += 1;
        let path = self.dir.join(format!("{}.{}", self.base, self.index));
        self.file = File::create(&path)
            .map_err(ExecutorError::io(format!("open log {}", path.display())))?;
        self.written = 0;
        let indexes = existing_indexes(&self.dir, &self.base)?;
        let excess = indexes.len().saturating_sub(self.cfg.max_files as usize);
        for old in &indexes[..excess] {
            let path = self.dir.join(format!("{}.{old}", self.base));
            std::fs::remove_file(&path)
                .map_err(ExecutorError::io(format!("remove log {}", path.display())))?;
        }
        Ok(())
    }

    /// Copies `pipe` into the logs until every writer has closed it. A failing
    /// log write is reported once to the executor's log and the rest drained,
    /// so the task never blocks on a full pipe.
    pub fn pump(mut self, mut pipe: File) {
        let mut buf = vec![0u8; 64 * 1024];
        let mut failed = false;
        loop {
            let n = match pipe.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::error!("reading task output for {}: {e}", self.base);
                    return;
                }
            };
            if let (Err(e), false) = (self.write_all(&buf[..n]), failed) {
                tracing::error!(
                    "{e}; further log write errors for {} are not reported",
                    self.base
                );
                failed = true;
            }
        }
    }
}

/// Indexes of `<base>.<n>` files in `dir`, ascending.
fn existing_indexes(dir: &Path, base: &str) -> Result<Vec<u64>, ExecutorError> {
    let prefix = format!("{base}.");
    let entries =
        std::fs::read_dir(dir).map_err(ExecutorError::io(format!("list {}", dir.display())))?;
    let mut indexes: Vec<u64> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(&prefix)?.parse().ok())
        .collect();
    indexes.sort_unstable();
    Ok(indexes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(max_files: u32, max_file_size_bytes: u64) -> LogConfig {
        LogConfig {
            max_files,
            max_file_size_bytes,
        }
    }

    fn read(dir: &Path, i: u64) -> String {
        std::fs::read_to_string(dir.join(format!("t.stdout.{i}"))).unwrap()
    }

    #[test]
    fn rotates_at_the_size_and_keeps_the_newest_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = RotatingWriter::open(dir.path(), "t.stdout".into(), &cfg(2, 4)).unwrap();
        w.write_all(b"abcdefghij").unwrap();
        assert_eq!(
            existing_indexes(dir.path(), "t.stdout").unwrap(),
            vec![1, 2]
        );
        assert_eq!(
            (read(dir.path(), 1), read(dir.path(), 2)),
            ("efgh".into(), "ij".into())
        );
    }

    #[test]
    fn a_restarted_writer_appends_to_the_newest_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = RotatingWriter::open(dir.path(), "t.stdout".into(), &cfg(5, 4)).unwrap();
        w.write_all(b"abcdef").unwrap();
        drop(w);
        let mut w = RotatingWriter::open(dir.path(), "t.stdout".into(), &cfg(5, 4)).unwrap();
        w.write_all(b"gh").unwrap();
        assert_eq!(
            (read(dir.path(), 0), read(dir.path(), 1)),
            ("abcd".into(), "efgh".into())
        );
    }
}
