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
        }
    );
    assert_eq!(
        plan.cases[1].faults[0].point,
        point("web:hook.prestart.after.validate")
    );
    assert_eq!(plan.cases[8].faults[0].point, point("ar.kill_started"));
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
                    action: Action::KillAgent,
                    nth: 1
                },
            ],
            pair: Some((p, q)),
        }
    );
    assert_eq!(plan.cases[2].pair, None);
}
