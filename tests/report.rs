//! The HTML report in a real browser: the gate of the legacy build (the
//! zoo's `legacy-prestart-skip`, the report's own bug) writes a report,
//! and headless Chromium (Debian's `chromium`, which `.ci/run` installs)
//! loads its pages with no console error, finds in the failing run's DOM
//! the lanes, the stop, the skipped prestart and the denied exec, and
//! renders the page to PNG.
//!
//! Needs root (the gate does), `chromium` on PATH and the zoo build at
//! `target/zoo/` (`ci/zoo.sh build`; ci/test.sh's build stage makes it):
//! `cargo test --features failpoints,privileged --test report`.

mod common;

use common::scratch::Scratch;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use taskgate_scenarios::html;
use taskgate_scenarios::watchdog::Watchdog;

fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|p| p.is_file())
        .expect("chromium not found on PATH: install Debian's chromium package (.ci/run does)")
}

/// What one headless Chromium run printed.
struct Rendered {
    stdout: String,
    /// Console messages and uncaught errors of the page.
    console: Vec<String>,
}

/// Runs headless Chromium on `page` with `args` (`--dump-dom`,
/// `--screenshot=...`), its profile in `profile`, and collects what the
/// page's console said (Chromium logs each console message to stderr as
/// `INFO:CONSOLE(...)`, an uncaught error as `Uncaught ...`).
fn render(page: &Path, profile: &Path, args: &[&str]) -> Rendered {
    let child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--disable-crash-reporter",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn chromium");
    // Chromium's run ends on its own; the watchdog only turns a hang into
    // a failure, after the harness's (machine-scaled) patience.
    let watchdog = Watchdog::arm(child.id(), common::scratch::idle(), || 0);
    let out = child.wait_with_output().expect("wait for chromium");
    assert!(!watchdog.disarm(), "chromium hung on {}", page.display());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "chromium failed on {}: {}\n{stderr}",
        page.display(),
        out.status
    );
    let console = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .map(str::to_string)
        .collect();
    Rendered { stdout, console }
}

/// The console check can fail: a page with a script error is caught.
#[test]
fn a_page_with_a_script_error_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("bad.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><head><link rel=\"icon\" href=\"data:,\"></head>\
         <body><p id=\"x\">hi</p><script>noSuchFunction();</script></body></html>",
    )
    .unwrap();
    let rendered = render(&page, &dir.path().join("profile"), &["--dump-dom"]);
    assert!(
        rendered.stdout.contains("<p id=\"x\">hi</p>"),
        "{}",
        rendered.stdout
    );
    assert!(
        rendered
            .console
            .iter()
            .any(|l| l.contains("Uncaught ReferenceError")),
        "{:?}",
        rendered.console
    );
}

/// The size of everything under `dir`.
fn size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                size(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

#[test]
fn a_failing_legacy_run_renders_in_chromium() {
    let scratch = Scratch::new();
    let report = scratch.path().join("report");
    let xml = scratch.path().join("gate.xml");
    let (stdout, _) = scratch.legacy_gate(&[
        "--only",
        "sidecar-stop",
        "--random",
        "0",
        "--junit",
        xml.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    let index = report.join("index.html");
    assert!(
        stdout.contains(&format!("report: {} (", index.display())),
        "the gate did not print the report's path:\n{stdout}"
    );
    let bytes = size(&report);

    // JUnit links every failing case to its page, and only those.
    let junit = std::fs::read_to_string(&xml).unwrap();
    let links: Vec<&str> = junit
        .split("<property name=\"report-page\" value=\"")
        .skip(1)
        .map(|rest| &rest[..rest.find('"').unwrap()])
        .collect();
    let failures = junit.matches("<failure").count();
    assert!(failures > 0, "{junit}");
    assert_eq!(links.len(), failures, "{junit}");
    // What the report weighs stays in proportion to what failed: only the
    // first few failing runs keep their data (the others' pages give the
    // replay command), and a page draws each event once, lean.
    let runs = report.join(html::kept::RUNS_DIR);
    let kept = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .count();
    assert_eq!(
        kept,
        failures.min(html::kept::KEPT_RUNS_PER_SCENARIO),
        "one scenario ran: its first failing runs keep their data"
    );
    assert!(
        bytes < failures as u64 * 64 * 1024,
        "the report takes {bytes} bytes for {failures} failing runs"
    );

    // The report's own race: the sidecar parked before its prestart, the
    // stop delivered, the prestart skipped, its executor's exec denied.
    let pages: Vec<PathBuf> = links.iter().map(|l| scratch.path().join(l)).collect();
    let not_kept = pages
        .iter()
        .filter(|p| {
            let page = std::fs::read_to_string(p).unwrap();
            page.contains("<p class=\"not-kept\">") && page.contains("<code>taskgate replay ")
        })
        .count();
    assert_eq!(
        not_kept,
        failures - kept,
        "pages saying their data was not kept"
    );
    let page = pages
        .iter()
        .find(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .contains("data-kind=\"prestart-skipped\" data-lane=\"runner:sidecar\"")
        })
        .unwrap_or_else(|| panic!("no failing run skipped the sidecar's prestart: {pages:?}"));
    let profile = scratch.path().join("chromium");
    let started = Instant::now();
    let dom = render(page, &profile, &["--dump-dom"]);
    let dumped = started.elapsed();
    assert!(
        dom.console.is_empty(),
        "the page logged to its console: {:?}",
        dom.console
    );
    for lane in [
        "agent",
        "updates",
        "runner:leader",
        "executor:leader",
        "runner:sidecar",
        "kernel",
    ] {
        assert!(
            dom.stdout
                .contains(&format!("class=\"lane\" data-lane=\"{lane}\"")),
            "no {lane} lane in {}",
            page.display()
        );
    }
    for needle in [
        "data-command=\"stop\"",
        "data-kind=\"prestart-skipped\" data-lane=\"runner:sidecar\"",
        "<span class=\"inv-id\">no-exec-after-terminal</span> no exec after the task runner observed the alloc terminal",
    ] {
        assert!(
            dom.stdout.contains(needle),
            "{needle} missing in {}",
            page.display()
        );
    }
    // The kernel lane holds the denied exec, ringed as the event that
    // broke no-exec-after-terminal.
    let kernel = dom
        .stdout
        .split("<g class=\"marks\" data-lane=\"kernel\"")
        .nth(1)
        .map(|rest| &rest[..rest.find("</g>").unwrap()])
        .expect("a kernel lane of marks");
    let denied = kernel
        .split("<use ")
        .find(|mark| mark.contains("data-kind=\"exec-denied\""))
        .unwrap_or_else(|| panic!("no denied exec in the kernel lane: {kernel}"));
    let invariants = denied
        .split("data-invariant=\"")
        .nth(1)
        .map(|rest| &rest[..rest.find('"').unwrap()])
        .unwrap_or_default();
    assert!(
        denied.starts_with("class=\"broken\"")
            && invariants
                .split(' ')
                .any(|id| id == "no-exec-after-terminal"),
        "{denied}"
    );

    let png = scratch.path().join("page.png");
    let shot = render(
        page,
        &profile,
        &[
            "--window-size=1400,1400",
            &format!("--screenshot={}", png.display()),
        ],
    );
    assert!(shot.console.is_empty(), "{:?}", shot.console);
    let image = std::fs::read(&png).expect("the screenshot");
    assert!(image.starts_with(b"\x89PNG"), "not a PNG");
    assert!(image.len() > 20_000, "a blank page? {} bytes", image.len());

    let summary = render(&index, &profile, &["--dump-dom"]);
    assert!(summary.console.is_empty(), "{:?}", summary.console);
    let relative = page.strip_prefix(&report).unwrap().display().to_string();
    assert!(
        summary.stdout.contains(&format!("href=\"{relative}\"")),
        "the index does not link {relative}"
    );
    eprintln!(
        "report: {bytes} bytes, {} pages; chromium dumped the failing page's DOM in {dumped:.2?}",
        links.len() + 1
    );
    scratch.finish(&["report", "gate.xml", "chromium", "page.png"]);
}
