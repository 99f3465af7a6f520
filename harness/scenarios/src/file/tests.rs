//! Scenario files that parse, and each mistake at its line and column.

use super::*;
use crate::model::{FaultCase, Host, Restore, Then};
use taskgate_faults::{Action, Fault, PointName};

const JOB: &str = r#"
job "j" {
  group "g" {
    task "web" {
      driver = "exec"
      config { command = "/bin/true" }
    }
    task "side" {
      driver = "exec"
      config { command = "/bin/true" }
    }
  }
}
"#;

fn jobs(path: &str) -> std::result::Result<(String, String), String> {
    match path {
        "jobs/j.hcl" => Ok((path.to_string(), JOB.to_string())),
        _ => Err("No such file or directory".to_string()),
    }
}

fn parse_str(src: &str) -> Result<Vec<Scenario>> {
    parse(src, "s.hcl", &jobs)
}

/// A scenario on the shared job whose `faults` block holds `faults`.
fn faults_scenario(faults: &str) -> String {
    format!(
        "scenario \"s\" {{\n  job = \"jobs/j.hcl\"\n  faults {{\n{faults}\n  }}\n  expect {{ status = \"complete\" }}\n}}\n"
    )
}

fn point(text: &str) -> PointName {
    text.parse().unwrap()
}

#[test]
fn a_known_violation_names_its_invariant_by_id() {
    let src = "scenario \"s\" {\n  job = \"jobs/j.hcl\"\n  stop_race { task = \"web\" }\n  expect {\n    status = \"complete\"\n    known_violation {\n      bug = \"B9\"\n      invariant = \"kill-order\"\n    }\n  }\n}";
    let scenario = parse_str(src).unwrap().remove(0);
    assert_eq!(
        scenario.expect.known_violation,
        Some(KnownViolation {
            bug: "B9".into(),
            invariant: Invariant::KillOrder,
            task: None,
        })
    );
    // A bug of one task's names it.
    let one_task = src.replace("kill-order\"", "kill-order\"\n      task = \"side\"");
    let scenario = parse_str(&one_task).unwrap().remove(0);
    let known = scenario.expect.known_violation.expect("the marker");
    assert_eq!(known.task.as_deref(), Some("side"));
}

#[test]
fn each_expands_wildcards_in_canonical_order_with_extra_faults() {
    let src = faults_scenario(
        "    host = \"agent\"\n    then = \"run-to-end\"\n    each {\n      points = [\"web:hook.prestart.*\", \"ar.kill_started\"]\n      action = \"error\"\n      hit = 2\n      with = [\"side:ex.after_cgroup=await(web:tr.after_driver_start@2)\"]\n    }",
    );
    let scenario = parse_str(&src).unwrap().remove(0);
    let Kind::Faults(plan) = scenario.kind else {
        panic!("not faults")
    };
    assert_eq!(
        plan.host,
        Host::Agent {
            restore: Restore::Stop
        }
    );
    assert_eq!(plan.then, Then::RunToEnd);
    assert_eq!(plan.cases.len(), 9);
    let with: Fault = "side:ex.after_cgroup=await(web:tr.after_driver_start@2)"
        .parse()
        .unwrap();
    assert_eq!(
        plan.cases[0],
        FaultCase {
            faults: vec![
                Fault {
                    point: point("web:hook.prestart.before.validate"),
                    action: Action::Error,
                    nth: 2
                },
                with.clone()
            ],
            pair: None,
            restored_kill: None,
        }
    );
    assert_eq!(
        plan.cases[1].faults[0].point,
        point("web:hook.prestart.after.validate")
    );
    assert_eq!(plan.cases[8].faults[0].point, point("ar.kill_started"));
}

/// Each point's case runs once per point the restored agent is killed at.
#[test]
fn a_restored_kill_crosses_each_point() {
    let src = faults_scenario(
        "    host = \"agent\"\n    each {\n      points = [\"web:tr.killing\", \"ar.kill_started\"]\n      action = \"kill\"\n      restored_kill = [\"web:tr.main_exited\", \"web:tr.restoring\"]\n    }",
    );
    let Kind::Faults(plan) = parse_str(&src).unwrap().remove(0).kind else {
        panic!("not faults")
    };
    let cases: Vec<(String, String)> = (plan.cases.iter())
        .map(|c| {
            let kill = c.restored_kill.as_ref().expect("a restored kill");
            (c.faults[0].point.to_string(), kill.to_string())
        })
        .collect();
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        cases,
        [
            pair("web:tr.killing", "web:tr.main_exited"),
            pair("web:tr.killing", "web:tr.restoring"),
            pair("ar.kill_started", "web:tr.main_exited"),
            pair("ar.kill_started", "web:tr.restoring"),
        ]
    );
}

#[test]
fn pairs_park_one_point_while_the_event_happens_at_another() {
    let src = faults_scenario(
        "    pairs {\n      park = [\"side:tr.before_prestart\", \"side:tr.after_prestart\"]\n      event = \"kill\"\n      at = [\"web:tr.after_driver_start\"]\n    }\n    each {\n      points = [\"ar.update_received\"]\n      action = \"delay(5)\"\n    }",
    );
    let Kind::Faults(plan) = parse_str(&src).unwrap().remove(0).kind else {
        panic!("not faults")
    };
    assert_eq!(plan.host, Host::InProcess);
    assert_eq!(plan.cases.len(), 3);
    let (p, q) = (
        point("side:tr.after_prestart"),
        point("web:tr.after_driver_start"),
    );
    assert_eq!(
        plan.cases[1],
        FaultCase {
            faults: vec![
                Fault {
                    point: p.clone(),
                    action: Action::Park,
                    nth: 1
                },
                Fault {
                    point: q.clone(),
                    action: Action::AwaitHit {
                        point: p.clone(),
                        nth: 1
                    },
                    nth: 1
                },
                Fault {
                    point: q.clone(),
                    action: Action::KillAgent,
                    nth: 1
                },
            ],
            pair: Some((p, q)),
            restored_kill: None,
        }
    );
    assert_eq!(plan.cases[2].pair, None);
}

/// The error of `src` as `line:col: message`.
fn error_of(src: &str) -> String {
    match parse_str(src) {
        Err(JobspecError::Invalid {
            file,
            line,
            col,
            message,
        }) => {
            assert_eq!(file, "s.hcl");
            format!("{line}:{col}: {message}")
        }
        other => panic!("expected an error, got {other:?}"),
    }
}

#[rstest::rstest]
#[case::unknown_attribute(
    "scenario \"s\" {\n  abut = \"x\"\n}",
    "2:3: unknown attribute `abut` in scenario \"s\"; did you mean `about`?"
)]
#[case::unknown_block(
    "scenario \"s\" {\n  job = \"jobs/j.hcl\"\n  stop_rac {}\n}",
    "3:3: unknown block `stop_rac` in scenario \"s\"; did you mean `stop_race`?"
)]
#[case::unknown_top_level(
    "scenari \"s\" {}",
    "1:1: unknown block `scenari` in a scenario file; did you mean `scenario`?"
)]
#[case::missing_job(
    "scenario \"s\" {\n  stop_race { task = \"web\" }\n}",
    "1:1: scenario \"s\" has no job: write `job = \"PATH\"` or `job \"name\" { ... }`"
)]
#[case::job_path_and_inline_job(
    "scenario \"s\" {\n  job = \"jobs/j.hcl\"\n  job \"x\" {}\n}",
    "3:3: scenario \"s\" has both `job = \"PATH\"` and an inline `job` block; keep one"
)]
#[case::unreadable_job(
    "scenario \"s\" {\n  job = \"jobs/nope.hcl\"\n}",
    "2:9: cannot read job file \"jobs/nope.hcl\": No such file or directory"
)]
#[case::neither_race_nor_faults(
    "scenario \"s\" {\n  job = \"jobs/j.hcl\"\n  expect { status = \"complete\" }\n}",
    "1:1: scenario \"s\" has neither a `stop_race` nor a `faults` block"
)]
#[case::unknown_race_task(
    "scenario \"s\" {\n  job = \"jobs/j.hcl\"\n  stop_race { task = \"wbe\" }\n}",
    "3:22: unknown task `wbe` in job \"j\"; did you mean `web`?"
)]
#[case::unknown_status(
    "scenario \"s\" {\n  job = \"jobs/j.hcl\"\n  stop_race { task = \"web\" }\n  expect { status = \"complet\" }\n}",
    "4:21: unknown status `complet` in `status`; did you mean `complete`?"
)]
#[case::duplicate_names(
    "scenario \"s\" {\n  job = \"jobs/j.hcl\"\n  stop_race { task = \"web\" }\n  expect { status = \"complete\" }\n}\nscenario \"s\" {\n  job = \"jobs/j.hcl\"\n  stop_race { task = \"web\" }\n  expect { status = \"complete\" }\n}",
    "6:10: duplicate scenario name \"s\" (first defined on line 1)"
)]
#[case::unknown_invariant(
    "scenario \"s\" {\n  job = \"jobs/j.hcl\"\n  stop_race { task = \"web\" }\n  expect {\n    status = \"complete\"\n    known_violation {\n      bug = \"B9\"\n      invariant = \"postop-once\"\n    }\n  }\n}",
    "8:19: unknown invariant `postop-once` in the oracle; did you mean `poststop-once`?"
)]
#[case::invariant_named_by_nothing_known(
    "scenario \"s\" {\n  job = \"jobs/j.hcl\"\n  stop_race { task = \"web\" }\n  expect {\n    status = \"complete\"\n    known_violation {\n      bug = \"B9\"\n      invariant = \"order\"\n    }\n  }\n}",
    "8:19: unknown invariant `order` in the oracle (expected one of: layout-before-exec, no-exec-after-terminal, one-exec-per-attempt, started-tasks-end, no-restart-after-completion, no-exec-after-kill, one-live-tree, kill-order, poststop-once, status-matches-exits, no-survivors, restarts-monotonic, start-order, attempts-within-policy, exits-observed, updates-whole, restart-order, launches-accounted, commands-take-effect, restart-windows, kill-signal, kill-grace)"
)]
#[case::invariant_named_by_its_statement(
    "scenario \"s\" {\n  job = \"jobs/j.hcl\"\n  stop_race { task = \"web\" }\n  expect {\n    status = \"complete\"\n    known_violation {\n      bug = \"B9\"\n      invariant = \"a poststop task runs exactly once\"\n    }\n  }\n}",
    "8:19: unknown invariant `a poststop task runs exactly once` in the oracle (expected one of: layout-before-exec, no-exec-after-terminal, one-exec-per-attempt, started-tasks-end, no-restart-after-completion, no-exec-after-kill, one-live-tree, kill-order, poststop-once, status-matches-exits, no-survivors, restarts-monotonic, start-order, attempts-within-policy, exits-observed, updates-whole, restart-order, launches-accounted, commands-take-effect, restart-windows, kill-signal, kill-grace) (invariants are named by id: `poststop-once`)"
)]
#[case::known_violation_of_an_unknown_task(
    "scenario \"s\" {\n  job = \"jobs/j.hcl\"\n  stop_race { task = \"web\" }\n  expect {\n    status = \"complete\"\n    known_violation {\n      bug = \"B9\"\n      invariant = \"kill-order\"\n      task = \"sied\"\n    }\n  }\n}",
    "9:14: unknown task `sied` in job \"j\"; did you mean `side`?"
)]
#[case::inline_job_error(
    "scenario \"s\" {\n  job \"x\" {\n    grop \"g\" {}\n  }\n}",
    "3:5: unknown block `grop` in job \"x\"; did you mean `group`?"
)]
fn scenario_errors_point_at_the_mistake(#[case] src: &str, #[case] expected: &str) {
    assert_eq!(error_of(src), expected);
}

#[rstest::rstest]
#[case::unknown_host(
    "    host = \"agnet\"",
    "4:12: unknown host `agnet` in `host`; did you mean `agent`?"
)]
#[case::restore_in_process(
    "    restore = \"run\"",
    "4:5: `restore` applies only with `host = \"agent\"`"
)]
#[case::restored_kill_in_process(
    "    each {\n      points = [\"web:tr.killing\"]\n      action = \"kill\"\n      restored_kill = [\"web:tr.main_exited\"]\n    }",
    "7:7: `restored_kill` applies only with `host = \"agent\"`"
)]
#[case::unknown_restore(
    "    host = \"agent\"\n    restore = \"rnu\"",
    "5:15: unknown restore `rnu` in `restore`; did you mean `run`?"
)]
#[case::unknown_then(
    "    then = \"run-to-nd\"",
    "4:12: unknown then `run-to-nd` in `then`; did you mean `run-to-end`?"
)]
#[case::no_cases(
    "    then = \"run-to-end\"",
    "3:3: `faults` has no cases: add an `each { ... }` or `pairs { ... }` block"
)]
#[case::unknown_point(
    "    each {\n      points = [\"web:tr.before_prestrat\"]\n      action = \"error\"\n    }",
    "5:17: unknown point `tr.before_prestrat` in the per-task points; did you mean `tr.before_prestart`?"
)]
#[case::unknown_task(
    "    each {\n      points = [\"ewb:tr.before_prestart\"]\n      action = \"error\"\n    }",
    "5:17: unknown task `ewb` in job \"j\"; did you mean `web`?"
)]
#[case::wildcard_matching_nothing(
    "    each {\n      points = [\"web:tr.nothing*\"]\n      action = \"error\"\n    }",
    "5:17: `tr.nothing*` matches no per-task point"
)]
#[case::alloc_point_scoped(
    "    each {\n      points = [\"web:ar.kill_started\"]\n      action = \"error\"\n    }",
    "5:17: `ar.kill_started` is alloc-wide: write it without a task, `ar.kill_started`"
)]
#[case::task_point_unscoped(
    "    each {\n      points = [\"tr.before_prestart\"]\n      action = \"error\"\n    }",
    "5:17: `tr.before_prestart` is a per-task point: scope it with a task, like `web:tr.before_prestart`"
)]
#[case::unknown_action(
    "    each {\n      points = [\"ar.*\"]\n      action = \"eror\"\n    }",
    "6:16: unknown fault action \"eror\" (expected park, delay(MS), error, panic, kill, kill-executor, kill-task-tree, sigstop-executor, sigcont-executor, stop-alloc, update-alloc, restart-alloc, restart-all-tasks, await(POINT@N)); did you mean `error`?"
)]
#[case::hit_zero(
    "    each {\n      points = [\"ar.*\"]\n      action = \"error\"\n      hit = 0\n    }",
    "7:13: `hit` counts from 1 (the first time the point is reached)"
)]
#[case::hit_not_a_number(
    "    each {\n      points = [\"ar.*\"]\n      action = \"error\"\n      hit = \"2\"\n    }",
    "7:13: `hit` must be a number, got a string"
)]
#[case::unknown_each_attribute(
    "    each {\n      point = [\"ar.*\"]\n    }",
    "5:7: unknown attribute `point` in each; did you mean `points`?"
)]
#[case::bad_with_fault(
    "    each {\n      points = [\"ar.*\"]\n      action = \"error\"\n      with = [\"web:ex.after_cgroup=await(web:tr.nope@2)\"]\n    }",
    "7:15: unknown point `tr.nope` in the per-task points (expected one of: tr.restoring, tr.start_condition_met, tr.before_prestart, tr.after_prestart, tr.before_driver_start, tr.start_committed, ex.spawned, ex.after_cgroup, ex.before_bind, ex.after_mounts, ex.before_exec, tr.after_driver_start, tr.killing, tr.restart_signaled, tr.restart_kept, tr.restart_delay, tr.restart_asked, tr.kill_asked, tr.observed_terminal, tr.main_exited, hook.prestart.before.validate, hook.prestart.after.validate, hook.prestart.before.task_dir, hook.prestart.after.task_dir, hook.prestart.before.log_files, hook.prestart.after.log_files, hook.prestart.before.task_env, hook.prestart.after.task_env, hook.poststart.before.persist_handle, hook.poststart.after.persist_handle, hook.prekill.before.shutdown_delay, hook.prekill.after.shutdown_delay, hook.update.before.task_env, hook.update.after.task_env, hook.exited.before.executor_shutdown, hook.exited.after.executor_shutdown, hook.stop.before.forget_handle, hook.stop.after.forget_handle)"
)]
#[case::pairs_event_park(
    "    pairs {\n      park = [\"web:tr.before_prestart\"]\n      event = \"park\"\n      at = [\"ar.*\"]\n    }",
    "6:15: the `event` of `pairs` cannot be `park` (the held side already parks)"
)]
fn fault_errors_point_at_the_mistake(#[case] faults: &str, #[case] expected: &str) {
    assert_eq!(error_of(&faults_scenario(faults)), expected);
}

/// A point that only records (an executor's record of its task's exit)
/// can be awaited, never acted at.
#[test]
fn a_recorded_point_is_awaited_not_faulted() {
    let awaited = "    each {\n      points = [\"ar.*\"]\n      action = \"error\"\n      with = [\"web:ex.after_cgroup=await(web:ex.task_exited@1)\"]\n    }";
    let parsed = parse_str(&faults_scenario(awaited));
    assert!(parsed.is_ok(), "{parsed:?}");
    let faulted =
        "    each {\n      points = [\"web:ex.task_exited\"]\n      action = \"error\"\n    }";
    assert!(error_of(&faults_scenario(faulted)).contains("unknown point `ex.task_exited`"));
}

#[test]
fn the_example_file_parses() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios/demo.hcl");
    let all = crate::catalogue::load_file(&path).unwrap();
    let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["leader-prestart-errors", "demo-sidecar-stop"]);
}
