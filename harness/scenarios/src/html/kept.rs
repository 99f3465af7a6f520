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
//!
//! A gate on a broken build fails dozens of runs of one scenario, much
//! alike: a [`Keeper`] keeps the data of the first
//! [`KEPT_RUNS_PER_SCENARIO`] failing runs of each, and the other pages
//! give the replay command that reproduces theirs.

use crate::outcome::{AGENT_EVENTS, AGENT_JOB, AGENT_LOG, FAULT_LOG};
use crate::report::RunReport;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use taskgate_engine::state::StateDb;
use taskgate_engine::DataDir;
use taskgate_executor::confined::ConfinedDir;
use taskgate_executor::{EXECUTOR_LOG, LOGS_DIR, SHARED_ALLOC_DIR};

/// Where run pages and their data go, in the report.
pub const RUNS_DIR: &str = "runs";

/// A file copied into a report is cut at this size (the rest is noted).
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// How many failing runs of one scenario keep their data in a report.
pub const KEPT_RUNS_PER_SCENARIO: usize = 2;

/// The state database, dumped.
pub const STATE_DUMP: &str = "state.json";

/// The name of a run's page (`.html`) and data directory: its token,
/// every character outside `[A-Za-z0-9.=,-]` written `_XX` (hex), so two
/// tokens never share a name and the name needs no escaping in a link.
/// A token's later runs in one report (a random schedule can repeat one
/// the enumeration ran) get `~2`, `~3`...: `occurrence` counts from 0.
pub fn dir_name(token: &str, occurrence: usize) -> String {
    let mut out = String::new();
    for b in token.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'=' | b',' | b'-' => {
                out.push(b as char)
            }
            other => out.push_str(&format!("_{other:02x}")),
        }
    }
    if occurrence > 0 {
        out.push_str(&format!("~{}", occurrence + 1));
    }
    out
}

/// Counts the runs of each token, in run order, so the n-th drawn run of
/// a token and the n-th kept one share a [`dir_name`].
#[derive(Debug, Default)]
pub struct Occurrences(BTreeMap<String, usize>);

impl Occurrences {
    /// `token`'s name for its next run.
    pub fn next(&mut self, token: &str) -> String {
        let n = self.0.entry(token.to_string()).or_default();
        *n += 1;
        dir_name(token, *n - 1)
    }
}

/// Where a report keeps its runs' data, and which runs keep it: every
/// failing run up to [`KEPT_RUNS_PER_SCENARIO`] per scenario, and with
/// `passing` (a replay, which draws its run whatever it did) every run.
/// Runners copy as their runs end ([`Keeper::keep`]), in whatever order
/// a parallel gate's workers finish them; [`Keeper::settle`] then picks
/// and names the kept runs in plan order, as a serial gate would.
#[derive(Debug)]
pub struct Keeper {
    dir: PathBuf,
    passing: bool,
    /// Runs copied so far, each under a name of its own until settled.
    copied: AtomicUsize,
}

/// The prefix of a run's data copied but not yet settled.
const UNSETTLED: &str = "unsettled-";

impl Keeper {
    pub fn new(report_dir: &Path, passing: bool) -> Keeper {
        Keeper {
            dir: report_dir.to_path_buf(),
            passing,
            copied: AtomicUsize::new(0),
        }
    }

    /// Copies the data of `report`'s run, in `data_dir`, if it may be one
    /// to keep; the report holds where, until [`Keeper::settle`].
    pub fn keep(&self, data_dir: &Path, report: &mut RunReport) {
        let failed = !report.passed();
        if !failed && !self.passing {
            return;
        }
        let n = self.copied.fetch_add(1, Ordering::SeqCst);
        let copy_dir = self.dir.join(RUNS_DIR).join(format!("{UNSETTLED}{n}"));
        match copy(data_dir, &copy_dir) {
            Ok(()) => report.kept = Some(copy_dir),
            Err(err) if failed => report
                .problems
                .push(format!("keeping the run's data for the report: {err}")),
            Err(err) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "keeping the run's data for the report: {err}"
                );
            }
        }
    }

    /// Goes through `reports` in plan order: names each kept run's data as
    /// its page is named, removes what a scenario's cap leaves out, and
    /// says on each failing report what became of its data.
    pub fn settle(&self, reports: &mut [RunReport]) {
        let mut names = Occurrences::default();
        let mut per_scenario: BTreeMap<String, usize> = BTreeMap::new();
        for report in reports {
            let failed = !report.passed();
            if !failed && !self.passing {
                continue;
            }
            let token = report.token.to_string();
            let name = names.next(&token);
            let Some(copied) = report.kept.take() else {
                continue;
            };
            if failed && !self.passing {
                let n = per_scenario
                    .entry(report.token.scenario.clone())
                    .or_default();
                if *n >= KEPT_RUNS_PER_SCENARIO {
                    let _ = std::fs::remove_dir_all(&copied);
                    report.problems.push(format!(
                        "data not kept (a report keeps {KEPT_RUNS_PER_SCENARIO} failing runs' of \
                         each scenario): `{} --report DIR` reproduces it",
                        report.token.replay_command()
                    ));
                    continue;
                }
                *n += 1;
            }
            let dest = self.dir.join(RUNS_DIR).join(name);
            let _ = std::fs::remove_dir_all(&dest);
            match std::fs::rename(&copied, &dest) {
                // A replay's page (every run of it drawn) shows its data; a
                // note only on the run that kept it would set apart one
                // repetition's verdict from the others'.
                Ok(()) if failed && !self.passing => {
                    report
                        .problems
                        .push(format!("data kept in {}", dest.display()));
                    report.kept = Some(dest);
                }
                Ok(()) => report.kept = Some(dest),
                Err(err) => {
                    let _ = std::fs::remove_dir_all(&copied);
                    let said = format!("keeping the run's data for the report: {err}");
                    if failed {
                        report.problems.push(said);
                    } else {
                        let _ = writeln!(std::io::stderr(), "{said}");
                    }
                }
            }
        }
    }
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
    for name in [FAULT_LOG, AGENT_LOG, AGENT_JOB, AGENT_EVENTS] {
        let from = data_dir.join(name);
        if from.is_file() {
            let file = std::fs::File::open(&from).map_err(io("reading", &from))?;
            copy_capped(file, &dest.join(name))?;
        }
    }
    let data = DataDir::new(data_dir);
    if data.state_db().is_file() {
        dump_state(&data.state_db(), &dest.join(STATE_DUMP))?;
    }
    let allocs = std::fs::read_dir(data.allocs()).into_iter().flatten();
    for alloc in allocs.flatten() {
        let id = alloc.file_name().to_string_lossy().into_owned();
        copy_alloc(&alloc.path(), &dest.join(&id))?;
    }
    Ok(())
}

/// An alloc's logs and each task's `executor.out` (as
/// `<task>.executor.out`), read beneath the alloc dir (which only the
/// engine names), side by side in `dest`: one directory per alloc, as a
/// directory costs a report more than a small file.
fn copy_alloc(alloc_dir: &Path, dest: &Path) -> Result<(), KeepError> {
    let root = ConfinedDir::open(alloc_dir)?;
    if let Ok(logs) = root.dir(SHARED_ALLOC_DIR).and_then(|d| d.dir(LOGS_DIR)) {
        // Log files are named `<task>.stdout.N`, `<task>.stderr.N`: never
        // `<task>.executor.out`.
        copy_files(&logs, dest, |n| Some(n.to_string()))?;
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
        copy_files(&task_dir, dest, |n| {
            (n == EXECUTOR_LOG).then(|| format!("{name}.{EXECUTOR_LOG}"))
        })?;
    }
    Ok(())
}

/// Copies the regular files of `dir` that `named` gives a name into
/// `dest`, under that name; anything else (a link, a FIFO, a directory)
/// is skipped.
fn copy_files(
    dir: &ConfinedDir,
    dest: &Path,
    named: impl Fn(&str) -> Option<String>,
) -> Result<(), KeepError> {
    for name in dir.names()? {
        let Some((name, as_name)) = name.to_str().and_then(|n| Some((n, named(n)?))) else {
            continue;
        };
        let Ok(file) = dir.open_read(name) else {
            continue;
        };
        std::fs::create_dir_all(dest).map_err(io("creating", dest))?;
        copy_capped(file, &dest.join(as_name))?;
    }
    Ok(())
}

/// Copies `file` into `to`, cut at [`MAX_FILE_BYTES`].
fn copy_capped(file: std::fs::File, to: &Path) -> Result<(), KeepError> {
    let size = file.metadata().map_err(io("reading", to))?.len();
    write_capped(file, size, to)
}

/// Writes what `from` reads (`size` bytes) into `to`, cut at
/// [`MAX_FILE_BYTES`] with a note of how much more there was.
fn write_capped(from: impl Read, size: u64, to: &Path) -> Result<(), KeepError> {
    let mut body = Vec::new();
    from.take(MAX_FILE_BYTES)
        .read_to_end(&mut body)
        .map_err(io("reading", to))?;
    let mut out = std::fs::File::create(to).map_err(io("writing", to))?;
    out.write_all(&body).map_err(io("writing", to))?;
    if size > body.len() as u64 {
        writeln!(
            out,
            "\n[taskgate report: truncated, {} bytes more]",
            size - body.len() as u64
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
    write_capped(text.as_bytes(), text.len() as u64, to)
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
