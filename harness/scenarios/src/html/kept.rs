//! A run's data kept beside its page, `runs/<token>/` in the report: the
//! tasks' logs, each task's `executor.out`, the agent's log, the fault
//! log, and the state database dumped as JSON. Copied by the runner
//! before it removes the run's data dir, so a report holds what it needs
//! and nothing is left in a temp dir.
//!
//! Tasks write their logs and task dirs (a root task can plant a link in
//! the shared `alloc/`): everything below an alloc dir is read beneath the
//! alloc dir's fd, never following a link, through
//! [`taskgate_executor::confined`], and copied only up to
//! [`MAX_FILE_BYTES`].

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use taskgate_engine::state::StateDb;
use taskgate_engine::DataDir;
use taskgate_executor::confined::ConfinedDir;
use taskgate_executor::{EXECUTOR_LOG, LOGS_DIR, SHARED_ALLOC_DIR};

/// Where run pages and their data go, in the report.
pub const RUNS_DIR: &str = "runs";

/// A file copied into a report is cut at this size (the rest is noted).
pub const MAX_FILE_BYTES: u64 = 256 * 1024;

/// The state database, dumped.
pub const STATE_DUMP: &str = "state.json";

/// The name of a run's page (`.html`) and data directory: its token,
/// every character outside `[A-Za-z0-9.=,-]` written `_XX` (hex), so two
/// tokens never share a name and the name needs no escaping in a link.
pub fn dir_name(token: &str) -> String {
    let mut out = String::new();
    for b in token.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'=' | b',' | b'-' => {
                out.push(b as char)
            }
            other => out.push_str(&format!("_{other:02x}")),
        }
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Confined(#[from] taskgate_executor::confined::ConfinedError),
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> KeepError {
    let path = path.to_path_buf();
    move |source| KeepError::Io { what, path, source }
}

/// Copies what a report links of the run in `data_dir` into `dest`
/// (created; emptied first if a run of the same token left one).
pub fn copy(data_dir: &Path, dest: &Path) -> Result<(), KeepError> {
    if dest.exists() {
        std::fs::remove_dir_all(dest).map_err(io("emptying", dest))?;
    }
    std::fs::create_dir_all(dest).map_err(io("creating", dest))?;
    // The harness's own files, in the data dir's root (no task writes there).
    for name in ["faults.jsonl", "agent.log", "job.json"] {
        let from = data_dir.join(name);
        if from.is_file() {
            let file = std::fs::File::open(&from).map_err(io("reading", &from))?;
            write_capped(file, &dest.join(name))?;
        }
    }
    let data = DataDir::new(data_dir);
    if data.state_db().is_file() {
        dump_state(&data.state_db(), &dest.join(STATE_DUMP))?;
    }
    let allocs = std::fs::read_dir(data.allocs()).into_iter().flatten();
    for alloc in allocs.flatten() {
        let id = alloc.file_name().to_string_lossy().into_owned();
        copy_alloc(&alloc.path(), &dest.join("allocs").join(&id))?;
    }
    Ok(())
}

/// An alloc's logs and each task's `executor.out`, read beneath the
/// alloc dir (which only the engine names).
fn copy_alloc(alloc_dir: &Path, dest: &Path) -> Result<(), KeepError> {
    let root = ConfinedDir::open(alloc_dir)?;
    if let Ok(logs) = root.dir(SHARED_ALLOC_DIR).and_then(|d| d.dir(LOGS_DIR)) {
        copy_files(&logs, &dest.join("logs"), |_| true)?;
    }
    for name in root.names()? {
        let Some(name) = name.to_str() else { continue };
        if name == SHARED_ALLOC_DIR {
            continue;
        }
        // Not a directory, or a link: not a task dir the engine made.
        let Ok(task_dir) = root.dir(name) else {
            continue;
        };
        copy_files(&task_dir, &dest.join(name), |n| n == EXECUTOR_LOG)?;
    }
    Ok(())
}

/// Copies the regular files of `dir` that `wanted` names into `dest`;
/// anything else (a link, a FIFO, a directory) is skipped.
fn copy_files(
    dir: &ConfinedDir,
    dest: &Path,
    wanted: impl Fn(&str) -> bool,
) -> Result<(), KeepError> {
    for name in dir.names()? {
        let Some(name) = name.to_str().filter(|n| wanted(n)) else {
            continue;
        };
        let Ok(file) = dir.open_read(name) else {
            continue;
        };
        std::fs::create_dir_all(dest).map_err(io("creating", dest))?;
        write_capped(file, &dest.join(name))?;
    }
    Ok(())
}

fn write_capped(file: std::fs::File, to: &Path) -> Result<(), KeepError> {
    let mut body = Vec::new();
    let size = file.metadata().map_err(io("reading", to))?.len();
    file.take(MAX_FILE_BYTES)
        .read_to_end(&mut body)
        .map_err(io("reading", to))?;
    let mut out = std::fs::File::create(to).map_err(io("writing", to))?;
    out.write_all(&body).map_err(io("writing", to))?;
    if size > MAX_FILE_BYTES {
        writeln!(
            out,
            "\n[taskgate report: cut at {MAX_FILE_BYTES} of {size} bytes]"
        )
        .map_err(io("writing", to))?;
    }
    Ok(())
}

/// Every alloc record and its tasks' records, as JSON.
fn dump_state(db: &Path, to: &Path) -> Result<(), KeepError> {
    let dump = match StateDb::open(db) {
        Ok(state) => match state.allocs() {
            Ok(allocs) => serde_json::Value::Array(
                allocs
                    .into_iter()
                    .map(|alloc| {
                        let tasks = state.tasks(&alloc.alloc_id).map_err(|e| e.to_string());
                        serde_json::json!({
                            "alloc": alloc,
                            "tasks": tasks.map_or_else(serde_json::Value::String, |t| serde_json::json!(t)),
                        })
                    })
                    .collect(),
            ),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        },
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    };
    let text = serde_json::to_string_pretty(&dump).unwrap_or_else(|e| e.to_string());
    std::fs::write(to, text).map_err(io("writing", to))
}

/// The files kept for a run (relative to `dir`), sorted; none if it has
/// no kept data.
pub fn list(dir: &Path) -> std::io::Result<Vec<String>> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                walk(root, &entry.path(), out)?;
            } else if kind.is_file() {
                let path = entry.path();
                let relative = path.strip_prefix(root).unwrap_or(&path);
                out.push(relative.display().to_string());
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    if dir.is_dir() {
        walk(dir, dir, &mut out)?;
    }
    out.sort();
    Ok(out)
}
