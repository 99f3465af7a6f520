//! Jobspec errors with their lines, and the examples.

use super::*;

// ---------------------------------------------------------------------------
// 7. Jobspec errors

const GOOD_TASK: &str =
    "    task \"t\" {\n      driver = \"exec\"\n      config { command = \"/bin/true\" }\n";

/// Errors surface as `file:line:col: message`, pointing at the offending line.
#[rstest]
#[case::unknown_attribute(
    format!("job \"j\" {{\n  group \"g\" {{\n{GOOD_TASK}      drivr = \"x\"\n    }}\n  }}\n}}\n"),
    6,
    "drivr"
)]
#[case::bad_duration(
    format!("job \"j\" {{\n  group \"g\" {{\n{GOOD_TASK}\n      kill_timeout = \"soon\"\n    }}\n  }}\n}}\n"),
    7,
    "soon"
)]
#[case::second_leader(
    format!("job \"j\" {{\n  group \"g\" {{\n{}      leader = true\n    }}\n{}      leader = true\n    }}\n  }}\n}}\n",
        GOOD_TASK, GOOD_TASK.replace("\"t\"", "\"u\"")),
    11,
    "already the leader"
)]
#[case::unclosed_block("job \"j\" {\n  group \"g\" {\n".to_string(), 2, "syntax error")]
fn jobspec_errors_carry_the_line(
    #[case] source: String,
    #[case] line: usize,
    #[case] needle: &str,
) {
    require_root();
    let err = jobspec::parse(&source, "web.hcl").expect_err("must not parse");
    match &err {
        JobspecError::Invalid {
            file,
            line: got,
            message,
            ..
        } => {
            assert_eq!(file, "web.hcl");
            assert_eq!(*got, line, "{err}\n{source}");
            assert!(message.contains(needle), "{err}");
        }
        other => panic!("expected an Invalid error, got {other:?}"),
    }
    assert!(
        err.to_string().starts_with(&format!("web.hcl:{line}:")),
        "{err}"
    );
}

/// The example file is the built-in job (and so parses).
#[test]
fn example_jobspec_is_the_builtin_default() {
    require_root();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sidecar.hcl");
    assert_eq!(
        jobspec::parse_file(&path).expect("examples/sidecar.hcl parses"),
        jobspec::builtin_default()
    );
}
