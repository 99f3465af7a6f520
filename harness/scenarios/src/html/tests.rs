use super::timeline::{layout, BarKind, Lane, MarkKind};
use super::*;
use crate::plan::Token;
use taskgate_faults::{Action, Hit};
use taskgate_oracle::{Answer, ExecIdentity, ExecRecord};

fn hit(point: &str, action: Option<Action>, at_ms: u64) -> Event {
    Event::FaultHit(Hit {
        seq: 0,
        point: point.parse().unwrap(),
        action,
        detail: None,
        at_us: 1_000_000 + at_ms * 1000,
    })
}

fn exec(seq: u64, task: &str, verdict: Answer, reason: &str) -> Event {
    Event::Exec(ExecRecord {
        seq,
        pid: 4242,
        exe: format!("/marked/{task}/bin").into(),
        identity: ExecIdentity::Executor {
            alloc_id: "a1".into(),
            task: task.into(),
        },
        verdict,
        reason: reason.into(),
        judged: true,
        cgroup_peers: Vec::new(),
        executor_peers: Vec::new(),
        started_version: None,
    })
}

/// The report's race as the legacy build runs it: the sidecar parked
/// before prestart, the stop lands, prestart runs no hook, and its
/// executor's exec is denied.
fn legacy(task: &str) -> Vec<Event> {
    let p = |point: &str| format!("{task}:{point}");
    vec![
        hit("ar.started", None, 0),
        hit(&p("tr.start_condition_met"), None, 1),
        hit(&p("tr.before_prestart"), Some(Action::Park), 2),
        Event::StopDelivered { seq: 4 },
        hit("ar.update_received", None, 4),
        hit("ar.alloc_terminal", None, 5),
        hit(&p("tr.before_prestart"), None, 6),
        hit(&p("tr.observed_terminal"), None, 7),
        hit(&p("tr.after_prestart"), None, 8),
        hit(&p("tr.before_driver_start"), None, 9),
        exec(1, task, Answer::Deny, "layout missing: <script>x</script>"),
        Event::TaskEvent {
            task: task.into(),
            kind: taskgate_oracle::TaskEventKind::DriverFailure,
            attempt: 1,
            failed: true,
            message: "layout missing".into(),
        },
    ]
}

fn report(task: &str) -> RunReport {
    RunReport {
        token: Token::of_fault_case("sidecar-stop", 3),
        description: format!("park {task} before prestart"),
        violations: vec![
            Violation {
                invariant: taskgate_oracle::Invariant::LayoutBeforeExec,
                task: Some(task.into()),
                detail: format!("exec #1 of /marked/{task}/bin denied: layout missing"),
            },
            Violation {
                invariant: taskgate_oracle::Invariant::NoExecAfterTerminal,
                task: Some(task.into()),
                detail: "exec #1 of x at #10: its start decision at #9 came after the alloc \
                         became terminal at #5"
                    .into(),
            },
        ],
        problems: vec![format!("log line <script>alert('{task}')</script>")],
        expected: Vec::new(),
        history: legacy(task),
        duration: Duration::from_millis(12),
        kept: None,
    }
}

#[test]
fn the_legacy_race_is_laid_out_in_lanes() {
    let t = layout(&legacy("sidecar"));
    assert_eq!(
        t.lanes,
        [
            Lane::Agent,
            Lane::Updates,
            Lane::Runner("sidecar".into()),
            Lane::Kernel
        ]
    );
    let denied: Vec<_> = t
        .marks
        .iter()
        .filter(|m| m.kind == MarkKind::ExecDenied)
        .collect();
    assert_eq!(denied.len(), 1);
    assert_eq!((denied[0].index, &denied[0].lane), (10, &Lane::Kernel));
    assert_eq!(t.commands.len(), 1);
    assert_eq!((t.commands[0].what, t.commands[0].index), ("stop", 3));
    let kinds: Vec<_> = t.bars.iter().map(|b| (b.kind, b.from, b.to)).collect();
    assert_eq!(
        kinds,
        [
            (BarKind::Park, 2, 6),
            (BarKind::PrestartSkipped, 6, 8),
            (BarKind::AgentAlive, 0, 10)
        ]
    );
    // The engine's task events (order unknown against the hits) are not drawn.
    assert!(!t.columns.contains(&11));
    assert_eq!(t.times[&2], 2000);
}

#[test]
fn a_prestart_whose_hooks_ran_is_no_skip() {
    let history = vec![
        hit("web:tr.before_prestart", None, 0),
        hit("web:hook.prestart.before.task_dir", None, 1),
        hit("web:hook.prestart.after.task_dir", None, 2),
        hit("web:tr.after_prestart", None, 3),
    ];
    let kinds: Vec<_> = layout(&history).bars.iter().map(|b| b.kind).collect();
    assert_eq!(kinds, [BarKind::Prestart { hooks: 1 }, BarKind::AgentAlive]);
}

#[test]
fn a_park_never_released_reaches_the_end() {
    let history = vec![
        hit("ar.update_received", Some(Action::Park), 0),
        hit("web:tr.killing", None, 1),
    ];
    let t = layout(&history);
    assert_eq!(t.bars[0].kind, BarKind::ParkUnreleased);
    assert_eq!((t.bars[0].from, t.bars[0].to), (0, 1));
}

#[test]
fn a_violation_is_placed_on_the_latest_event_it_cites() {
    let r = report("sidecar");
    let view = RunView::of(&r);
    // "exec #1" is the exec's own number; the denied exec is #10.
    assert_eq!(view.broken[0].at, Some(10));
    assert_eq!(view.broken[0].id, "layout-before-exec");
    assert_eq!(view.broken[1].cites, [10, 9, 5]);
    assert_eq!(view.broken[1].at, Some(10));
    assert_eq!(view.broken[1].id, "no-exec-after-terminal");
    // An index past the history is no citation.
    assert!(cited("at #99", 12).is_empty());
}

#[test]
fn hostile_names_and_log_lines_are_escaped() {
    let task = "<script>alert(1)</script>";
    let r = report(task);
    let view = RunView::of(&r);
    let page = pages::run_page(&view, "x", &[format!("{task}/executor.out")]);
    // The report's own script is the page's only script.
    assert_eq!(page.matches("<script").count(), 1, "{page}");
    assert!(page.contains("<script src=\"../report.js\"></script>"));
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("data-lane=\"runner:&lt;script&gt;"));
}

#[test]
fn a_failing_run_page_carries_what_a_reader_looks_for() {
    let view = RunView::of(&report("sidecar"));
    let page = pages::run_page(&view, "x", &[]);
    for needle in [
        "data-lane=\"runner:sidecar\"",
        "data-lane=\"kernel\"",
        "data-kind=\"exec-denied\"",
        "data-kind=\"prestart-skipped\"",
        "data-command=\"stop\"",
        "data-invariant=\"layout-before-exec no-exec-after-terminal\"",
        "<button type=\"button\" data-copy=\"token\">",
        "value=\"sidecar-stop#3\"",
    ] {
        assert!(page.contains(needle), "{needle} missing");
    }
}

#[test]
fn page_names_are_distinct_and_need_no_escaping() {
    let names = [
        "a#1",
        "a@1",
        "a_1",
        "a/1",
        "s@tr=1.4/up=2/stop=0/first=tr/swaps=",
    ]
    .map(|t| kept::dir_name(t, 0));
    for (i, a) in names.iter().enumerate() {
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._=,-".contains(c)));
        assert!(names[i + 1..].iter().all(|b| a != b), "{names:?}");
    }
}

#[test]
fn junit_links_are_relative_to_the_xml() {
    assert_eq!(
        relative_to(Path::new("/a/b/report"), Path::new("/a/b")),
        Path::new("report")
    );
    assert_eq!(
        relative_to(Path::new("/a/report"), Path::new("/a/b")),
        Path::new("../report")
    );
}

#[test]
fn a_report_is_written_and_linked_from_junit() {
    let dir = tempfile::tempdir().unwrap();
    let failing = report("sidecar");
    let mut passing = report("web");
    passing.violations.clear();
    passing.problems.clear();
    passing.token = Token::of_fault_case("sidecar-stop", 0);
    let all = [failing.clone(), passing];
    let summary = Summary {
        command: "gate --report r".into(),
        scenarios: Vec::new(),
        coverage: None,
        elapsed: Duration::from_secs(1),
        host: host::Host::detect("test build".into()),
    };
    let drawn = [RunView::of(&failing)];
    let written = write(&dir.path().join("r"), &summary, &all, &drawn).unwrap();
    let page = &written.pages["sidecar-stop#3"];
    assert_eq!(page, "runs/sidecar-stop_233.html");
    let index = std::fs::read_to_string(&written.index).unwrap();
    assert!(
        index.contains("href=\"runs/sidecar-stop_233.html\""),
        "{index}"
    );
    assert!(index.contains("2 runs, 1 failed"), "{index}");
    assert!(dir.path().join("r").join(page).is_file());
    for shared in ["report.css", "report.js"] {
        assert!(dir.path().join("r").join(shared).is_file(), "{shared}");
        assert!(is_report_file(shared));
    }
    let mut xml = crate::report::junit(&all, "t");
    link_junit(&mut xml, &written, &dir.path().join("gate.xml"));
    let text = xml.to_string().unwrap();
    assert!(
        text.contains("name=\"report-page\" value=\"r/runs/sidecar-stop_233.html\""),
        "{text}"
    );
    assert_eq!(text.matches("report-page").count(), 1, "{text}");
}

#[test]
fn a_killed_agent_is_down_until_restored() {
    let history = vec![
        hit("ar.started", None, 0),
        hit("web:tr.after_prestart", Some(Action::KillAgent), 1),
        Event::AgentRestarted { stop: true },
        hit("ar.started", None, 3),
    ];
    let t = layout(&history);
    let agent: Vec<_> = t
        .marks
        .iter()
        .filter(|m| m.lane == Lane::Agent)
        .map(|m| (m.index, m.kind))
        .collect();
    assert_eq!(
        agent,
        [(1, MarkKind::AgentKilled), (2, MarkKind::AgentRestored)]
    );
    let lives: Vec<_> = t
        .bars
        .iter()
        .filter(|b| b.kind == BarKind::AgentAlive)
        .map(|b| (b.from, b.to))
        .collect();
    assert_eq!(lives, [(0, 1), (2, 3)]);
}

#[test]
fn a_report_keeps_a_few_failing_runs_per_scenario_each_file_capped() {
    let data = tempfile::tempdir().unwrap();
    let big = kept::MAX_FILE_BYTES as usize + 1000;
    std::fs::write(data.path().join("faults.jsonl"), "x".repeat(big)).unwrap();
    let report_dir = tempfile::tempdir().unwrap();
    let keeper = kept::Keeper::new(report_dir.path(), false);
    let runs_dir = report_dir.path().join(kept::RUNS_DIR);
    // One case twice (a random schedule can repeat an enumerated one),
    // then more failing runs than a scenario keeps.
    let keep = kept::KEPT_RUNS_PER_SCENARIO;
    let cases: Vec<usize> = [0].into_iter().chain(0..keep + 2).collect();
    let mut reports: Vec<RunReport> = (cases.iter())
        .map(|&case| RunReport {
            token: Token::of_fault_case("sidecar-stop", case),
            ..report("sidecar")
        })
        .collect();
    // Copied as a parallel gate's workers may finish them, last first;
    // settled in plan order.
    for r in reports.iter_mut().rev() {
        keeper.keep(data.path(), r);
    }
    keeper.settle(&mut reports);
    let mut names = kept::Occurrences::default();
    let mut expected = Vec::new();
    for r in &reports {
        let name = names.next(&r.token.to_string());
        let note = r.problems.last().unwrap().clone();
        if expected.len() < keep {
            assert!(note.starts_with("data kept in "), "{note}");
            assert!(note.ends_with(&name), "{note} is not {name}");
            expected.push(name);
        } else {
            assert!(note.starts_with("data not kept"), "{note}");
            assert!(
                note.contains(&format!("taskgate replay '{}' --report", r.token)),
                "{note}"
            );
        }
    }
    let mut kept: Vec<String> = std::fs::read_dir(&runs_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    expected.sort();
    assert_eq!(kept, expected);
    assert_eq!(
        names.next("sidecar-stop#0"),
        kept::dir_name("sidecar-stop#0", 2)
    );
    assert!(kept::dir_name("sidecar-stop#0", 1).ends_with("~2"));
    let copied = std::fs::read_to_string(runs_dir.join(&kept[0]).join("faults.jsonl")).unwrap();
    assert!(
        copied.len() < kept::MAX_FILE_BYTES as usize + 100,
        "{}",
        copied.len()
    );
    assert!(
        copied.ends_with("[taskgate report: truncated, 1000 bytes more]\n"),
        "{}",
        &copied[copied.len() - 80..]
    );
    // A passing run keeps nothing unless the report draws passing runs.
    let mut passing = report("web");
    passing.violations.clear();
    passing.problems.clear();
    keeper.keep(data.path(), &mut passing);
    keeper.settle(std::slice::from_mut(&mut passing));
    assert!(passing.problems.is_empty());
    assert_eq!(std::fs::read_dir(&runs_dir).unwrap().count(), keep);
}
