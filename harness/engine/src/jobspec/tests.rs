//! The parser against examples, typos and every kind of bad input.

use super::suggest::closest;
use super::*;
use rstest::rstest;
use std::time::Duration;
use taskgate_executor::KillSignal;

const SIDECAR_HCL: &str = include_str!("../../../../examples/sidecar.hcl");
const LIFECYCLE_HCL: &str = include_str!("../../../../examples/lifecycle.hcl");

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn task<'a>(job: &'a Job, name: &str) -> &'a Task {
    job.groups[0]
        .tasks
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no task {name:?}"))
}

/// Wraps `extra` in a valid task whose `driver` is on line 4 and whose
/// `config` is on line 5, so `extra` starts on line 6.
fn with_task(extra: &str) -> String {
    format!(
        "job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"exec\"\n      config {{ command = \"/bin/true\" }}\n{extra}\n    }}\n  }}\n}}\n"
    )
}

fn expect_error(source: &str) -> (usize, usize, String) {
    match parse(source, "job.hcl") {
        Err(JobspecError::Invalid {
            file,
            line,
            col,
            message,
        }) => {
            assert_eq!(file, "job.hcl");
            (line, col, message)
        }
        other => panic!("expected a validation error, got {other:?}\n{source}"),
    }
}

#[test]
fn sidecar_example_is_the_builtin_default() {
    assert_eq!(
        parse(SIDECAR_HCL, "sidecar.hcl").unwrap(),
        builtin_default()
    );
}

#[test]
fn builtin_default_is_a_leader_with_a_poststart_sidecar() {
    let job = builtin_default();
    let tasks = &job.groups[0].tasks;
    assert_eq!(tasks.len(), 2);
    let leader = task(&job, "leader");
    assert!(leader.leader && leader.is_main() && !leader.is_sidecar());
    let sidecar = task(&job, "sidecar");
    assert!(sidecar.is_poststart() && sidecar.is_sidecar() && !sidecar.is_main());
    assert!(!sidecar.leader);
}

#[test]
fn lifecycle_example_parses_every_hook() {
    let job = parse_file(&examples_dir().join("lifecycle.hcl")).unwrap();
    assert_eq!(job.name, "lifecycle");
    let names: Vec<&str> = job.groups[0]
        .tasks
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["init", "log-shipper", "server", "announce", "cleanup"]
    );

    let init = task(&job, "init");
    assert!(init.is_prestart() && !init.is_sidecar());
    assert_eq!(init.env["DATA_DIR"], "/tmp/taskgate-data");
    let shipper = task(&job, "log-shipper");
    assert!(shipper.is_prestart() && shipper.is_sidecar());
    assert_eq!(shipper.kill_signal, KillSignal::SIGTERM);
    assert_eq!(shipper.kill_timeout, Duration::from_secs(1));
    assert_eq!(
        shipper.resources,
        Resources {
            cpu: 50,
            memory_mb: 32
        }
    );
    assert!(task(&job, "announce").is_poststart());
    assert_eq!(task(&job, "announce").args, ["announce: server started"]);
    let cleanup = task(&job, "cleanup");
    assert!(cleanup.is_poststop() && !cleanup.is_sidecar());
    assert_eq!(cleanup.kill_timeout, Duration::from_secs(90));

    let server = task(&job, "server");
    assert!(server.is_main() && server.leader);
    assert_eq!(server.user.as_deref(), Some("nobody"));
    assert_eq!(server.command, "/bin/sh");
    assert_eq!(server.args[0], "-c");
    assert_eq!(
        server.logs,
        Logs {
            max_files: 3,
            max_file_size_mb: 5
        }
    );
    // The task's restart block overrides the group's field by field.
    assert_eq!(
        server.restart,
        RestartPolicy {
            attempts: 1,
            interval: Duration::from_secs(600),
            delay: Duration::from_millis(250),
            mode: RestartMode::Delay,
        }
    );
    assert_eq!(
        init.restart,
        RestartPolicy {
            attempts: 3,
            interval: Duration::from_secs(600),
            delay: Duration::from_millis(250),
            mode: RestartMode::Fail,
        }
    );
}

#[test]
fn minimal_task_gets_nomad_defaults() {
    let job = parse(&with_task(""), "job.hcl").unwrap();
    let t = task(&job, "t");
    assert_eq!(*t, Task::new("t", "/bin/true", Vec::new()));
    assert_eq!(
        t.resources,
        Resources {
            cpu: 100,
            memory_mb: 300
        }
    );
    assert_eq!(t.kill_timeout, Duration::from_secs(5));
    assert_eq!(t.kill_signal, KillSignal::SIGINT);
    assert_eq!(
        t.restart,
        RestartPolicy {
            attempts: 2,
            interval: Duration::from_secs(30 * 60),
            delay: Duration::from_secs(15),
            mode: RestartMode::Fail,
        }
    );
    assert_eq!(
        t.logs,
        Logs {
            max_files: 10,
            max_file_size_mb: 10
        }
    );
    assert!(t.is_main() && !t.leader && t.user.is_none() && t.env.is_empty());
}

/// A job with `type` on line 2 and one task with the given lifecycle.
fn typed_job(job_type: &str, lifecycle: &str) -> String {
    format!(
        "job \"j\" {{\n  {job_type}\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"exec\"\n      config {{ command = \"/bin/true\" }}\n      {lifecycle}\n    }}\n  }}\n}}\n"
    )
}

/// Nomad's defaults per type, and whether a success is restarted:
/// sidecars always, poststop never, the rest as the type says.
#[rstest]
#[case::default_is_service("", JobType::Service, 2, 30 * 60, true)]
#[case::service("type = \"service\"", JobType::Service, 2, 30 * 60, true)]
#[case::batch("type = \"batch\"", JobType::Batch, 3, 24 * 3600, false)]
fn job_type_sets_restart_defaults_and_success(
    #[case] line: &str,
    #[case] expected: JobType,
    #[case] attempts: u32,
    #[case] interval_secs: u64,
    #[case] main_restarts_on_success: bool,
) {
    let job = parse(&typed_job(line, ""), "job.hcl").unwrap();
    assert_eq!(job.job_type, expected);
    let t = task(&job, "t");
    assert_eq!(
        t.restart,
        RestartPolicy {
            attempts,
            interval: Duration::from_secs(interval_secs),
            delay: Duration::from_secs(15),
            mode: RestartMode::Fail,
        }
    );
    assert_eq!(
        job.job_type.restarts_on_success(t),
        main_restarts_on_success
    );
    for (lifecycle, restarts) in [
        ("lifecycle { hook = \"prestart\" }", false),
        (
            "lifecycle {\n hook = \"prestart\"\n sidecar = true\n }",
            true,
        ),
        (
            "lifecycle {\n hook = \"poststart\"\n sidecar = true\n }",
            true,
        ),
        ("lifecycle { hook = \"poststop\" }", false),
    ] {
        let job = parse(&typed_job(line, lifecycle), "job.hcl").unwrap();
        assert_eq!(
            job.job_type.restarts_on_success(task(&job, "t")),
            restarts,
            "{line} {lifecycle}"
        );
    }
}

#[rstest]
#[case::system(
    "type = \"system\"",
    "invalid job type \"system\": expected \"service\" or \"batch\""
)]
#[case::number("type = 1", "`type` must be a string, got a number")]
fn bad_job_types_are_errors_at_their_value(#[case] line: &str, #[case] message: &str) {
    let (row, col, got) = expect_error(&typed_job(line, ""));
    assert_eq!((row, col), (2, 10), "{got}");
    assert!(got.contains(message), "{got}");
}

/// A record written before jobs had a type keeps the batch semantics it
/// ran with.
#[test]
fn a_record_without_a_type_is_batch() {
    let mut json = serde_json::to_value(builtin_default()).unwrap();
    json.as_object_mut().unwrap().remove("job_type");
    let job: Job = serde_json::from_value(json).unwrap();
    assert_eq!(job.job_type, JobType::Batch);
}

#[test]
fn shutdown_delay_is_a_duration() {
    let job = parse(&with_task("      shutdown_delay = \"3s\""), "job.hcl").unwrap();
    assert_eq!(task(&job, "t").shutdown_delay, Duration::from_secs(3));
    let (line, _, message) = expect_error(&with_task("      shutdown_delay = \"soon\""));
    assert_eq!(line, 6);
    assert!(message.contains("soon"), "{message}");
}

#[test]
fn env_numbers_and_booleans_become_strings() {
    let job = parse(
        &with_task("      env {\n        PORT = 8080\n        DEBUG = true\n      }"),
        "job.hcl",
    )
    .unwrap();
    let env = &task(&job, "t").env;
    assert_eq!(env["PORT"], "8080");
    assert_eq!(env["DEBUG"], "true");
}

#[test]
fn meta_is_read_like_env() {
    let job = parse(
        &with_task("      meta {\n        owner = \"web-team\"\n        shard = 3\n      }"),
        "job.hcl",
    )
    .unwrap();
    let meta = &task(&job, "t").meta;
    assert_eq!(meta["owner"], "web-team");
    assert_eq!(meta["shard"], "3");
    let (line, _, message) = expect_error(&with_task(
        "      meta {\n        nested {\n        }\n      }",
    ));
    assert_eq!(line, 7);
    assert!(
        message.contains("unexpected block `nested` in meta; meta holds"),
        "{message}"
    );
}

#[test]
fn jobs_round_trip_through_serde() {
    let job = parse(LIFECYCLE_HCL, "lifecycle.hcl").unwrap();
    let json = serde_json::to_string(&job).unwrap();
    assert_eq!(serde_json::from_str::<Job>(&json).unwrap(), job);
}

#[test]
fn error_display_is_file_line_col_message() {
    let err = parse(&with_task("      drivr = \"exec\""), "web.hcl").unwrap_err();
    assert_eq!(
        err.to_string(),
        "web.hcl:6:7: unknown attribute `drivr` in task \"t\"; did you mean `driver`?"
    );
}

#[test]
fn parse_file_labels_errors_with_the_path() {
    let dir = std::env::temp_dir().join(format!("taskgate-jobspec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.hcl");
    std::fs::write(&path, "job \"j\" {}\n").unwrap();
    let err = parse_file(&path).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        err.starts_with(&format!("{}:1:1: ", path.display())),
        "{err}"
    );
}

#[test]
fn missing_file_is_an_io_error() {
    let path = examples_dir().join("does-not-exist.hcl");
    let err = parse_file(&path).unwrap_err();
    assert!(matches!(err, JobspecError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("does-not-exist.hcl"), "{err}");
}

#[rstest]
#[case::unknown_task_attribute(
    "      drivr = \"exec\"",
    6,
    "unknown attribute `drivr` in task \"t\"; did you mean `driver`?"
)]
#[case::unknown_block(
    "      network {\n      }",
    6,
    "unknown block `network` in task \"t\" (expected one of: config, env"
)]
#[case::duplicate_attribute(
    "      driver = \"exec\"",
    6,
    "syntax error: invalid attribute; expected unique attribute key"
)]
#[case::duplicate_block(
    "      config { command = \"/bin/false\" }",
    6,
    "duplicate `config` block in task \"t\" (first on line 5)"
)]
#[case::block_as_attribute(
    "      resources = { cpu = 1 }",
    6,
    "`resources` is a block, not an attribute"
)]
#[case::attribute_as_block("      leader {\n      }", 6, "`leader` is an attribute, not a block")]
#[case::labeled_singleton("      restart \"x\" {\n      }", 6, "`restart` block takes no labels")]
#[case::memory_string(
    "      resources {\n        memory = \"64\"\n      }",
    7,
    "`memory` must be a number, got a string"
)]
#[case::memory_zero(
    "      resources {\n        cpu = 10\n        memory = 0\n      }",
    8,
    "`memory` must be at least 1 (MB)"
)]
#[case::memory_negative(
    "      resources {\n        memory = -5\n      }",
    7,
    "`memory` must be a non-negative whole number"
)]
#[case::memory_float(
    "      resources {\n        memory = 1.5\n      }",
    7,
    "`memory` must be a non-negative whole number"
)]
#[case::memory_abbreviated(
    "      resources {\n        mem = 64\n      }",
    7,
    "unknown attribute `mem` in resources; did you mean `memory`?"
)]
#[case::restart_mode(
    "      restart {\n        mode = \"retry\"\n      }",
    7,
    "invalid restart mode \"retry\": expected \"fail\" or \"delay\""
)]
#[case::restart_attempts_overflow(
    "      restart {\n        attempts = 5000000000\n      }",
    7,
    "`attempts` is too large"
)]
#[case::restart_interval(
    "      restart {\n        interval = \"30 minutes\"\n      }",
    7,
    "invalid duration \"30 minutes\" for `interval`"
)]
#[case::lifecycle_hook(
    "      lifecycle {\n        hook = \"prestrat\"\n      }",
    7,
    "invalid lifecycle hook \"prestrat\""
)]
#[case::lifecycle_without_hook(
    "      lifecycle {\n        sidecar = true\n      }",
    6,
    "missing required attribute `hook` in lifecycle"
)]
#[case::lifecycle_sidecar_string(
    "      lifecycle {\n        hook = \"prestart\"\n        sidecar = \"yes\"\n      }",
    8,
    "`sidecar` must be a boolean"
)]
#[case::kill_timeout_garbage(
    "      kill_timeout = \"5 seconds\"",
    6,
    "invalid duration \"5 seconds\" for `kill_timeout`: unknown unit"
)]
#[case::kill_timeout_number(
    "      kill_timeout = 5",
    6,
    "`kill_timeout` must be a duration string like \"5s\", got a number"
)]
#[case::kill_signal("      kill_signal = \"SIGFOO\"", 6, "unknown kill_signal \"SIGFOO\"")]
#[case::leader_string(
    "      leader = \"true\"",
    6,
    "`leader` must be a boolean (true or false), got a string"
)]
#[case::user_empty("      user = \"\"", 6, "`user` must not be empty")]
#[case::user_unquoted("      user = nobody", 6, "got a bare identifier (missing quotes?)")]
#[case::env_list(
    "      env {\n        FOO = [\"a\"]\n      }",
    7,
    "env `FOO` must be a string, number or boolean, got a list"
)]
#[case::env_template(
    "      env {\n        FOO = \"${bar}\"\n      }",
    7,
    "interpolation is not supported"
)]
#[case::env_block(
    "      env {\n        nested {\n        }\n      }",
    7,
    "unexpected block `nested` in env"
)]
#[case::logs_zero(
    "      logs {\n        max_files = 0\n      }",
    7,
    "`max_files` must be at least 1"
)]
// Beyond what a cgroup takes, or what a byte count holds: each launch of
// the task failed, a restart at a time, when these were taken here.
#[case::memory_beyond_a_cgroup(
    "      resources {\n        memory = 9000000000000\n      }",
    7,
    "`memory` is too large"
)]
#[case::log_size_beyond_a_byte_count(
    "      logs {\n        max_file_size = 20000000000000\n      }",
    7,
    "`max_file_size` is too large"
)]
#[case::logs_size_zero(
    "      logs {\n        max_file_size = 0\n      }",
    7,
    "`max_file_size` must be at least 1 (MB)"
)]
fn task_errors_point_at_the_offending_line(
    #[case] extra: &str,
    #[case] line: usize,
    #[case] fragment: &str,
) {
    let (got_line, _, message) = expect_error(&with_task(extra));
    assert!(message.contains(fragment), "{message:?} lacks {fragment:?}");
    assert_eq!(got_line, line, "{message}");
}

#[rstest]
#[case::empty_file("", 1, "no `job` block found")]
#[case::two_jobs(
    "job \"a\" {\n}\njob \"b\" {\n}\n",
    3,
    "only one `job` block is allowed (the first is on line 1)"
)]
#[case::top_level_attribute(
    "name = \"x\"\n",
    1,
    "unknown attribute `name` in the top level; no attributes are allowed here"
)]
#[case::unlabeled_job("job {\n}\n", 1, "`job` block needs exactly one name label")]
#[case::no_groups("job \"j\" {\n}\n", 1, "job \"j\" has no `group` blocks")]
#[case::no_tasks(
    "job \"j\" {\n  group \"g\" {\n  }\n}\n",
    2,
    "group \"g\" has no `task` blocks"
)]
#[case::syntax_error(
    "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver \"exec\"\n",
    4,
    "syntax error"
)]
#[case::unclosed_block("job \"j\" {\n  group \"g\" {\n", 2, "syntax error")]
#[case::driver_missing(
    "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      config { command = \"/x\" }\n    }\n  }\n}\n",
    3,
    "task \"t\" is missing required attribute `driver`"
)]
#[case::driver_docker(
    "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"docker\"\n      config { command = \"/x\" }\n    }\n  }\n}\n",
    4,
    "unsupported driver \"docker\": only \"exec\" is supported"
)]
#[case::config_missing(
    "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n    }\n  }\n}\n",
    3,
    "task \"t\" is missing its `config` block"
)]
#[case::command_missing(
    "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        args = []\n      }\n    }\n  }\n}\n",
    5,
    "missing required attribute `command` in config"
)]
#[case::command_typo(
    "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        comand = \"/bin/sh\"\n      }\n    }\n  }\n}\n",
    6,
    "unknown attribute `comand` in config; did you mean `command`?"
)]
#[case::command_empty(
    "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        command = \"\"\n      }\n    }\n  }\n}\n",
    6,
    "`command` must not be empty"
)]
#[case::args_not_a_list(
    "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        command = \"/bin/echo\"\n        args = \"hi\"\n      }\n    }\n  }\n}\n",
    7,
    "`args` must be a list of strings, got a string"
)]
#[case::args_element(
    "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config {\n        command = \"/bin/echo\"\n        args = [\n          \"a\",\n          1,\n        ]\n      }\n    }\n  }\n}\n",
    9,
    "`args` must be a list of strings, but element 1 is a number"
)]
#[case::task_name_slash(
    "job \"j\" {\n  group \"g\" {\n    task \"a/b\" {\n    }\n  }\n}\n",
    3,
    "task name \"a/b\" must not contain `/`"
)]
#[case::task_name_dotdot(
    "job \"j\" {\n  group \"g\" {\n    task \"..\" {\n    }\n  }\n}\n",
    3,
    "task name \"..\" must not contain `..`"
)]
#[case::task_name_empty(
    "job \"j\" {\n  group \"g\" {\n    task \"\" {\n    }\n  }\n}\n",
    3,
    "task name \"\" must not be empty"
)]
#[case::duplicate_task(
    "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n    }\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n    }\n  }\n}\n",
    7,
    "duplicate task name \"t\" in group \"g\" (first defined on line 3)"
)]
#[case::duplicate_group(
    "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n    }\n  }\n  group \"g\" {\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n    }\n  }\n}\n",
    8,
    "duplicate group name \"g\" in job \"j\" (first defined on line 2)"
)]
#[case::two_leaders(
    "job \"j\" {\n  group \"g\" {\n    task \"a\" {\n      driver = \"exec\"\n      leader = true\n      config { command = \"/x\" }\n    }\n    task \"b\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n      leader = true\n    }\n  }\n}\n",
    11,
    "task \"b\" sets `leader = true` but task \"a\" is already the leader of group \"g\""
)]
#[case::group_restart_mode(
    "job \"j\" {\n  group \"g\" {\n    restart {\n      mode = \"never\"\n    }\n    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n    }\n  }\n}\n",
    4,
    "invalid restart mode \"never\""
)]
#[case::group_attribute(
    "job \"j\" {\n  group \"g\" {\n    count = 2\n  }\n}\n",
    3,
    "unknown attribute `count` in group \"g\"; no attributes are allowed here"
)]
fn structure_errors_point_at_the_offending_line(
    #[case] source: &str,
    #[case] line: usize,
    #[case] fragment: &str,
) {
    let (got_line, _, message) = expect_error(source);
    assert!(message.contains(fragment), "{message:?} lacks {fragment:?}");
    assert_eq!(got_line, line, "{message}");
}

#[test]
fn semantic_errors_report_the_column_of_the_value() {
    let source = with_task("      kill_timeout = \"soon\"");
    assert_eq!(expect_error(&source).1, 22);
}

#[rstest]
#[case("comand", &["command", "args"], Some("command"))]
#[case("mem", &["cpu", "memory"], Some("memory"))]
#[case("drvier", &["driver", "leader"], Some("driver"))]
#[case("xyz", &["cpu", "memory"], None)]
#[case("a", &["args"], None)]
fn suggests_close_names(
    #[case] name: &str,
    #[case] candidates: &[&'static str],
    #[case] expected: Option<&str>,
) {
    assert_eq!(closest(name, candidates), expected);
}

mod exec_limits;

/// A task named `alloc` would have the alloc's shared dir as its task dir.
#[test]
fn the_shared_dirs_name_is_no_task_name() {
    let src = "job \"j\" {\n  group \"g\" {\n    task \"alloc\" {\n      driver = \"exec\"\n      config { command = \"/x\" }\n    }\n  }\n}\n";
    let err = crate::jobspec::parse(src, "j.hcl").err();
    let err = err.expect("ESCAPED: a task named alloc was accepted");
    assert!(err.to_string().contains("task name \"alloc\""), "{err}");
}
