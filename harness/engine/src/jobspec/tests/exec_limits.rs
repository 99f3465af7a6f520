//! What the kernel and the executor refuse is refused here first, at its
//! line, before anything runs.

use super::*;
use rstest::rstest;

/// A job whose one task's config and task body lines are these.
fn with(config: &str, body: &str) -> String {
    format!(
        "job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"exec\"\n      config {{\n{config}\n      }}\n{body}\n    }}\n  }}\n}}\n"
    )
}

fn error_of(source: &str) -> (usize, String) {
    match parse(source, "job.hcl") {
        Err(JobspecError::Invalid { line, message, .. }) => (line, message),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[rstest]
#[case::relative_command(with("command = \"sh\"", ""), 6, "must be an absolute path")]
#[case::nul_in_command(with("command = \"/bin/s\\u0000h\"", ""), 6, "contains a NUL byte")]
#[case::nul_in_an_arg(
    with("command = \"/bin/sh\"\nargs = [\"a\\u0000\"]", ""),
    7,
    "contains a NUL byte"
)]
#[case::nul_in_env(
    with("command = \"/bin/sh\"", "env {\n  A = \"x\\u0000\"\n}"),
    9,
    "contains a NUL byte"
)]
#[case::unknown_signal(
    with("command = \"/bin/sh\"", "kill_signal = \"NOPE\""),
    8,
    "unknown kill_signal"
)]
fn refused_with_their_line(#[case] source: String, #[case] line: usize, #[case] fragment: &str) {
    let (got, message) = error_of(&source);
    assert!(message.contains(fragment), "{message}");
    assert_eq!(got, line, "{message}");
}

#[test]
fn task_names_follow_the_executors_rule() {
    let source = with("command = \"/bin/sh\"", "").replace("task \"t\"", "task \".\"");
    let (line, message) = error_of(&source);
    assert_eq!(line, 3);
    assert!(message.contains("task name \".\""), "{message}");
}

#[test]
fn unknown_users_are_named_before_the_job_runs() {
    let mut job = parse(
        &with("command = \"/bin/sh\"", "user = \"no-such-user-xyz\""),
        "j",
    )
    .unwrap();
    assert_eq!(
        unknown_users(&job.groups[0], "root"),
        ["task \"t\": user \"no-such-user-xyz\" does not exist on this host"]
    );
    job.groups[0].tasks[0].user = None;
    assert!(unknown_users(&job.groups[0], "root").is_empty());
}

#[test]
fn a_signal_is_named_with_or_without_its_prefix() {
    let job = parse(
        &with("command = \"/bin/sh\"", "kill_signal = \"TERM\""),
        "j",
    )
    .unwrap();
    assert_eq!(job.groups[0].tasks[0].kill_signal, KillSignal::SIGTERM);
}

#[test]
fn a_megabyte_argument_is_refused_before_it_runs() {
    let big = "x".repeat(1 << 20);
    let (line, message) = error_of(&with(
        &format!("command = \"/bin/sh\"\nargs = [\"{big}\"]"),
        "",
    ));
    assert_eq!(line, 7);
    assert!(message.contains("at most 131071 per string"), "{message}");
}

#[test]
fn argv_and_env_together_must_fit_arg_max() {
    let chunk = "y".repeat(100_000);
    let args: Vec<String> = (0..(limits::arg_max() / 100_000 + 1))
        .map(|_| format!("\"{chunk}\""))
        .collect();
    let (line, message) = error_of(&with(
        &format!("command = \"/bin/sh\"\nargs = [{}]", args.join(", ")),
        "",
    ));
    assert_eq!(line, 7);
    assert!(message.contains("execve takes at most"), "{message}");
}

#[test]
fn thousands_of_nested_blocks_are_an_error_not_a_crash() {
    let source = format!("{}{}", "job \"j\" {\n".repeat(5000), "}\n".repeat(5000));
    let (line, message) = error_of(&source);
    assert_eq!(line, limits::MAX_NESTING + 1);
    assert!(message.contains("nested more than 32 levels"), "{message}");
}
