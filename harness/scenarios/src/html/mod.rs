//! The HTML report of a gate, an exploration or a replay: a
//! self-contained `index.html` (what ran, what failed, the coverage, the
//! build and host) and one page per drawn run, with its history as a
//! swimlane timeline. No request leaves the report: the drawing is
//! inline SVG, and the style and the one small script (the copy buttons,
//! the marks' tooltips and links) are written once beside `index.html`.
//!
//! The report reads only the structs defined here ([`RunView`],
//! [`Summary`]), which [`RunView::of`] and the commands fill from their
//! run results.
//!
//! - [`timeline`]: the history laid out in lanes; [`svg`]: drawn.
//! - [`kept`]: a run's data (logs, `executor.out`, the state database)
//!   copied beside its page.
//! - [`host`]: the build, kernel and cgroup mode the summary names.

pub mod host;
pub mod kept;
mod markup;
mod pages;
pub mod svg;
pub mod timeline;

use crate::coverage::Coverage;
use crate::report::{RunReport, RunVerdict};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use taskgate_oracle::{Event, Violation};

/// An invariant a run broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// Short, as `docs/invariants.md` numbers it (`#2`).
    pub id: String,
    /// The invariant as a sentence.
    pub sentence: String,
    pub task: Option<String>,
    pub detail: String,
    /// The history index of the event that broke it, if it names one.
    pub at: Option<usize>,
    /// Every history index its detail cites.
    pub cites: Vec<usize>,
}

/// One run, as its page draws it.
#[derive(Debug, Clone)]
pub struct RunView {
    pub token: String,
    /// The command line that runs it again.
    pub replay: String,
    pub scenario: String,
    /// What the case did.
    pub case: String,
    pub verdict: RunVerdict,
    pub broken: Vec<Broken>,
    pub problems: Vec<String>,
    pub expected: Vec<String>,
    pub history: Vec<Event>,
    pub duration: Duration,
}

impl RunView {
    pub fn of(report: &RunReport) -> RunView {
        RunView {
            token: report.token.to_string(),
            replay: report.token.replay_command(),
            scenario: report.token.scenario.clone(),
            case: report.description.clone(),
            verdict: report.verdict(),
            broken: report
                .violations
                .iter()
                .map(|v| broken(v, &report.history))
                .collect(),
            problems: report.problems.clone(),
            expected: report.expected.clone(),
            history: report.history.clone(),
            duration: report.duration,
        }
    }
}

/// One scenario's line of the summary.
#[derive(Debug, Clone)]
pub struct ScenarioRow {
    pub name: String,
    pub about: String,
    pub runs: usize,
    pub failed: usize,
    /// The open bug a known violation names, if any.
    pub known_bug: Option<String>,
}

/// What the summary page says besides the runs.
#[derive(Debug)]
pub struct Summary<'a> {
    /// The command that produced the report (`gate`, `explore sidecar-stop`).
    pub command: String,
    pub scenarios: Vec<ScenarioRow>,
    pub coverage: Option<&'a Coverage>,
    pub elapsed: Duration,
    pub host: host::Host,
}

/// Whether `name`, in a report's directory, is one of the report's own
/// files (which writing a report again replaces).
pub fn is_report_file(name: &str) -> bool {
    name == "index.html" || name == kept::RUNS_DIR || markup::SHARED.iter().any(|(n, _)| *n == name)
}

/// What [`write`] wrote.
#[derive(Debug, Clone)]
pub struct Written {
    pub index: PathBuf,
    /// Each drawn run's page, by token, relative to the report's directory.
    pub pages: BTreeMap<String, String>,
    /// Bytes written, the kept data aside.
    pub bytes: u64,
}

/// Writes `index.html` and one page per run of `drawn` into `dir`
/// (created if missing); every run counts in the summary, whether drawn or
/// not. A run's kept data, if [`kept::copy`] put it under `dir`, is linked
/// from its page.
pub fn write(
    dir: &Path,
    summary: &Summary<'_>,
    all: &[RunReport],
    drawn: &[RunView],
) -> std::io::Result<Written> {
    std::fs::create_dir_all(dir.join(kept::RUNS_DIR))?;
    let mut bytes = 0;
    for (name, text) in markup::SHARED {
        bytes += text.len() as u64;
        std::fs::write(dir.join(name), text)?;
    }
    let mut pages = BTreeMap::new();
    let mut names = kept::Occurrences::default();
    for run in drawn {
        let name = names.next(&run.token);
        let relative = format!("{}/{name}.html", kept::RUNS_DIR);
        let data = kept::list(&dir.join(kept::RUNS_DIR).join(&name))?;
        let html = pages::run_page(run, &name, &data);
        bytes += html.len() as u64;
        std::fs::write(dir.join(&relative), html)?;
        // A repeated token's JUnit case and summary row link its first page.
        pages.entry(run.token.clone()).or_insert(relative);
    }
    let index = dir.join("index.html");
    let html = pages::index(summary, all, &pages);
    bytes += html.len() as u64;
    std::fs::write(&index, html)?;
    Ok(Written {
        index,
        pages,
        bytes,
    })
}

/// Links each failing test case of `xml` to its page: a `report-page`
/// property and a line of `system-out`, relative to the XML's directory.
pub fn link_junit(xml: &mut quick_junit::Report, written: &Written, junit_path: &Path) {
    let report_dir = written.index.parent().unwrap_or(Path::new("."));
    let base = relative_to(report_dir, junit_path.parent().unwrap_or(Path::new(".")));
    for suite in &mut xml.test_suites {
        for case in &mut suite.test_cases {
            let Some(page) = written.pages.get(case.name.as_str()) else {
                continue;
            };
            let link = base.join(page).display().to_string();
            case.add_property(quick_junit::Property::new("report-page", link.clone()));
            case.set_system_out(format!("report page: {link}\n"));
        }
    }
}

/// `path` as seen from `from`: relative when both resolve (`../r` for a
/// sibling), `path` made absolute otherwise.
fn relative_to(path: &Path, from: &Path) -> PathBuf {
    let absolute = |p: &Path| {
        std::path::absolute(if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        })
    };
    let (Ok(path), Ok(from)) = (absolute(path), absolute(from)) else {
        return path.to_path_buf();
    };
    let (a, b): (Vec<_>, Vec<_>) = (path.components().collect(), from.components().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &a[common..] {
        out.push(c);
    }
    out
}

/// A violation as the page shows it: its id and the events it names.
fn broken(v: &Violation, history: &[Event]) -> Broken {
    let cites = cited(&v.detail, history.len());
    let at = cites
        .iter()
        .max()
        .copied()
        .or_else(|| exec_named(&v.detail, history));
    Broken {
        id: v.invariant.id().to_string(),
        sentence: v.invariant.statement().to_string(),
        task: v.task.clone(),
        detail: v.detail.clone(),
        at,
        cites,
    }
}

/// The history indices a violation's detail cites: the oracle writes them
/// `#N` ("exec #3" and "fault #N" are an exec's and a hit's own numbers,
/// not indices). The latest is where the invariant broke: the history
/// before it was still consistent.
fn cited(detail: &str, len: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for (pos, _) in detail.match_indices('#') {
        let before = detail[..pos].trim_end();
        if before.ends_with("exec") || before.ends_with("fault") {
            continue;
        }
        let digits: String = detail[pos + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(n) = digits.parse::<usize>() {
            if n < len && !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

/// The history index of the exec a detail names as `exec #SEQ`, for the
/// invariants that cite no index (a denied exec's layout).
fn exec_named(detail: &str, history: &[Event]) -> Option<usize> {
    let rest = &detail[detail.find("exec #")? + "exec #".len()..];
    let seq: u64 = rest
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()?;
    history
        .iter()
        .position(|e| matches!(e, Event::Exec(r) if r.seq == seq))
}

#[cfg(test)]
mod tests;
