//! The two kinds of page: a run's (its verdict, what broke, the timeline,
//! its kept data, its whole history) and the summary (`index.html`).

use super::kept::KEPT_RUNS_PER_SCENARIO;
use super::markup::{copy_field, esc, page, pre};
use super::svg::{draw, Highlights};
use super::timeline::{layout, MarkKind};
use super::{RunView, Summary};
use crate::report::{describe, RunReport, RunVerdict};
use std::collections::BTreeMap;
use std::fmt::Write;
use taskgate_oracle::{Answer, Event};

fn verdict_badge(verdict: RunVerdict) -> String {
    let (class, text) = match verdict {
        RunVerdict::Pass => ("pass", "PASS"),
        RunVerdict::Fail => ("fail", "FAIL"),
        RunVerdict::Known => ("known", "KNOWN BUG"),
    };
    format!("<span class=\"verdict {class}\">{text}</span>")
}

/// A run's page; `name` is its data directory's (see
/// [`super::kept::dir_name`]), `data` the files kept in it.
pub fn run_page(run: &RunView, name: &str, data: &[String]) -> String {
    let timeline = layout(&run.history);
    let mut hl = Highlights::default();
    for b in &run.broken {
        if let Some(at) = b.at {
            hl.broken.entry(at).or_default().push(b.id.clone());
        }
        hl.cited.extend(b.cites.iter().copied());
    }
    let mut s = String::new();
    let _ = write!(
        s,
        "<nav><a href=\"../index.html\">\u{2190} the report</a></nav>\
         <h1>{badge} {scenario}</h1><p class=\"case\">{case}</p>\
         <p class=\"facts\">{events} events, ran in {duration:.2?}</p>\
         <p class=\"token\">replay token {token}</p>\
         <p class=\"token\">command {command}</p>",
        badge = verdict_badge(run.verdict),
        scenario = esc(&run.scenario),
        case = esc(&run.case),
        events = run.history.len(),
        duration = run.duration,
        token = copy_field("token", &run.token),
        command = copy_field("command", &replay_command(run)),
    );
    s += "<h2>Timeline</h2>";
    s += LEGEND;
    let _ = write!(s, "<div class=\"scroll\">{}</div>", draw(&timeline, &hl));
    if !run.broken.is_empty() {
        s += "<section class=\"broken\"><h2>Broken invariants</h2>";
        for b in &run.broken {
            let _ = write!(
                s,
                "<div class=\"invariant\" data-invariant=\"{id}\"><p><span class=\"inv-id\">{id}</span> \
                 {sentence}{task}</p><p class=\"detail\">{detail}</p>{at}</div>",
                id = esc(&b.id),
                sentence = esc(&b.sentence),
                task = b
                    .task
                    .as_ref()
                    .map_or(String::new(), |t| format!(" <span class=\"task\">[{}]</span>", esc(t))),
                detail = esc(&b.detail),
                at = b.at.map_or(String::new(), |i| format!(
                    "<p>broken at <a href=\"#e{i}\">event #{i}</a> (ringed in the timeline)</p>"
                )),
            );
        }
        s += "</section>";
    }
    list(&mut s, "Problems", "problems", &run.problems);
    list(
        &mut s,
        "Expected (a known, open bug)",
        "expected",
        &run.expected,
    );
    s += "<h2>Kept data</h2>";
    if data.is_empty() {
        let _ = write!(
            s,
            "<p class=\"not-kept\">Not kept: a report keeps the data (task logs, \
             <code>executor.out</code>, the state database) of the first \
             {KEPT_RUNS_PER_SCENARIO} failing runs of each scenario. The replay \
             command above runs this case again and keeps its data in its own report: \
             <code>{}</code></p>",
            esc(&replay_command(run))
        );
    } else {
        s += "<ul class=\"kept\">";
        for file in data {
            let _ = write!(
                s,
                "<li><a href=\"{name}/{href}\">{file}</a></li>",
                href = esc(file),
                file = esc(file)
            );
        }
        s += "</ul>";
    }
    s += "<h2>History</h2><table class=\"history\"><tr><th>#</th><th>ms</th><th>event</th></tr>";
    for (i, event) in run.history.iter().enumerate() {
        let mut class = String::new();
        if hl.broken.contains_key(&i) {
            class += " broken";
        } else if hl.cited.contains(&i) {
            class += " cited";
        }
        if matches!(event, Event::Exec(r) if r.verdict == Answer::Deny) {
            class += " denied";
        }
        if timeline.commands.iter().any(|c| c.index == i) {
            class += " command";
        }
        let time = timeline
            .times
            .get(&i)
            .map_or(String::new(), |us| format!("{:.1}", *us as f64 / 1000.0));
        let class = match class.trim() {
            "" => String::new(),
            class => format!(" class=\"{class}\""),
        };
        // Hundreds of rows: the closing tags HTML lets a row leave out
        // are left out.
        let _ = write!(
            s,
            "<tr id=\"e{i}\"{class}><td>{i}<td>{time}<td>{}",
            esc(&describe(event))
        );
    }
    s += "</table>";
    let denied = timeline
        .marks
        .iter()
        .filter(|m| m.kind == MarkKind::ExecDenied)
        .count();
    let title = format!(
        "{} {}{}",
        run.verdict,
        run.token,
        if denied > 0 { " (exec denied)" } else { "" }
    );
    page(&title, &s, "../")
}

/// The command that runs `run`'s case again and draws it.
fn replay_command(run: &RunView) -> String {
    format!("{} --report report", run.replay)
}

const LEGEND: &str = "<p class=\"legend\">\
<svg width=\"14\" height=\"14\"><circle cx=\"7\" cy=\"7\" r=\"4\" class=\"lg point\"/></svg> point passed \
<svg width=\"14\" height=\"14\"><polygon points=\"7,1 13,7 7,13 1,7\" class=\"lg fault\"/></svg> fault acted \
<svg width=\"30\" height=\"14\"><rect x=\"1\" y=\"3\" width=\"28\" height=\"8\" class=\"lg park\"/></svg> parked \
<svg width=\"30\" height=\"14\"><rect x=\"1\" y=\"3\" width=\"28\" height=\"8\" class=\"lg prestart\"/></svg> prestart hooks \
<svg width=\"30\" height=\"14\"><rect x=\"1\" y=\"3\" width=\"28\" height=\"8\" class=\"lg prestart-skipped\"/></svg> prestart skipped \
<svg width=\"14\" height=\"14\"><rect x=\"2\" y=\"2\" width=\"10\" height=\"10\" class=\"lg exec-allowed\"/></svg> exec allowed \
<svg width=\"14\" height=\"14\"><rect x=\"2\" y=\"2\" width=\"10\" height=\"10\" class=\"lg exec-denied\"/></svg> exec denied \
<svg width=\"14\" height=\"14\"><line x1=\"7\" y1=\"0\" x2=\"7\" y2=\"14\" class=\"lg command-line\"/></svg> user command (stop, update, restart) \
<svg width=\"24\" height=\"24\"><circle cx=\"12\" cy=\"12\" r=\"10\" class=\"lg halo\"/></svg> broke an invariant\
</p>";

fn list(s: &mut String, title: &str, class: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let _ = write!(s, "<section class=\"{class}\"><h2>{title}</h2><ul>");
    for item in items {
        let _ = write!(s, "<li>{}</li>", esc(item));
    }
    s.push_str("</ul></section>");
}

/// The summary: what ran and how it went, the failing runs with links to
/// their pages, the scenarios, the coverage, and where it ran.
pub fn index(summary: &Summary<'_>, all: &[RunReport], pages: &BTreeMap<String, String>) -> String {
    let failed: Vec<&RunReport> = all.iter().filter(|r| !r.passed()).collect();
    let verdict = if failed.is_empty() {
        RunVerdict::Pass
    } else {
        RunVerdict::Fail
    };
    let mut s = String::new();
    let _ = write!(
        s,
        "<h1>{badge} taskgate {command}</h1>\
         <p class=\"facts\">{runs} runs, {nfailed} failed, in {elapsed:.1?}</p>\
         <table class=\"facts\"><tr><th>engine build</th><td>{build}</td></tr>\
         <tr><th>kernel</th><td>{kernel}</td></tr><tr><th>cgroups</th><td>{cgroups}</td></tr></table>",
        badge = verdict_badge(verdict),
        command = esc(&summary.command),
        runs = all.len(),
        nfailed = failed.len(),
        elapsed = summary.elapsed,
        build = esc(&summary.host.build),
        kernel = esc(&summary.host.kernel),
        cgroups = esc(&summary.host.cgroups),
    );
    if !pages.is_empty() {
        s += "<h2>Runs drawn</h2><table class=\"runs\"><tr><th>run</th><th>verdict</th><th>what broke</th></tr>";
        for r in all
            .iter()
            .filter(|r| pages.contains_key(&r.token.to_string()))
        {
            let token = r.token.to_string();
            let what = r
                .violations
                .first()
                .map(|v| v.invariant.to_string())
                .or_else(|| r.problems.first().cloned())
                .unwrap_or_default();
            let _ = write!(
                s,
                "<tr><td><a class=\"run-link\" href=\"{href}\">{token}</a></td><td>{badge}</td><td>{what}</td></tr>",
                href = esc(&pages[&token]),
                token = esc(&token),
                badge = verdict_badge(r.verdict()),
                what = esc(&what),
            );
        }
        s += "</table>";
    }
    s += "<h2>Scenarios</h2><table class=\"scenarios\"><tr><th>scenario</th><th>runs</th>\
          <th>failed</th><th>known bug</th><th>what it does</th></tr>";
    for row in &summary.scenarios {
        let _ = write!(
            s,
            "<tr class=\"{class}\"><td>{name}</td><td>{runs}</td><td>{failed}</td><td>{known}</td><td>{about}</td></tr>",
            class = if row.failed > 0 { "failing" } else { "" },
            name = esc(&row.name),
            runs = row.runs,
            failed = row.failed,
            known = esc(row.known_bug.as_deref().unwrap_or("")),
            about = esc(&row.about),
        );
    }
    s += "</table>";
    if let Some(coverage) = summary.coverage {
        coverage_section(&mut s, coverage);
    }
    page(&format!("taskgate {} report", summary.command), &s, "")
}

fn coverage_section(s: &mut String, coverage: &crate::coverage::Coverage) {
    let ran = coverage.pairs.values().filter(|t| t.runs > 0).count();
    let _ = write!(
        s,
        "<h2>Coverage</h2><p>{ran} of {} declared depth-2 pairs (an actor held at one \
         boundary while an event happens at another) ran.</p>",
        coverage.pairs.len()
    );
    for (scenario, rows) in coverage.by_scenario() {
        let ran = rows.iter().filter(|(_, t)| t.runs > 0).count();
        let failing = rows.iter().any(|(_, t)| t.failed > 0);
        let _ = write!(
            s,
            "<details class=\"coverage\"{open}><summary>{scenario}: {ran} of {total} pairs ran{fail}</summary>\
             <table><tr><th>held</th><th>event</th><th>runs</th></tr>",
            open = if failing || ran < rows.len() { " open" } else { "" },
            scenario = esc(scenario),
            total = rows.len(),
            fail = if failing { ", some failing" } else { "" },
        );
        for (pair, tally) in rows {
            let (class, text) = match (tally.runs, tally.failed) {
                (0, _) => ("not-run", "NOT RUN".to_string()),
                (n, 0) => ("pass", format!("{n} pass")),
                (n, f) => ("fail", format!("{n} run, {f} FAIL")),
            };
            let _ = write!(
                s,
                "<tr class=\"{class}\"><td>{}</td><td>{}</td><td>{text}</td></tr>",
                esc(&pair.held),
                esc(&pair.event)
            );
        }
        s.push_str("</table></details>");
    }
    let _ = write!(
        s,
        "<h3>Boundaries no scenario names ({})</h3>{}",
        coverage.unreached.len(),
        if coverage.unreached.is_empty() {
            "<p>none</p>".to_string()
        } else {
            pre(&coverage.unreached.join("\n"))
        }
    );
}
