//! The escape catalogue: attempts to reach the host from inside a real task,
//! each run as root and as nobody, each expected to fail in a named way.
//! Nothing here damages the host: kernel tunables and triggers are opened
//! for writing, never written. Run as root:
//! `cargo test --features failpoints --test escapes -- --test-threads=1`.

#[path = "../common/mod.rs"]
mod common;
mod devices;
mod host_paths;
mod kernel;
mod limits;
mod seccomp;

use common::Sandbox;

/// Runs `script` (busybox sh) as `user` in a fresh task and returns what it
/// printed. Every attempt prints `ESCAPED` if it got through, else `held`
/// and what stopped it; the task itself must exit 0.
pub(crate) fn attempt(user: &str, script: &str) -> String {
    let sb = Sandbox::new();
    let mut spec = sb.spec("t", script);
    spec.user = user.to_string();
    let exec = sb.launch(&spec).expect("launch");
    let result = exec.wait().expect("wait");
    exec.shutdown().expect("shutdown");
    let out = sb.read_log("t", "stdout");
    let err = sb.read_log("t", "stderr");
    assert!(
        result.successful(),
        "{result:?}\nstdout: {out}\nstderr: {err}"
    );
    assert!(!out.contains("ESCAPED"), "as {user}: {out}\nstderr: {err}");
    sb.assert_no_leftovers();
    out
}

/// `try WHAT CMD...`: runs CMD; prints `ESCAPED: WHAT` if it succeeded,
/// else `held: WHAT: <its error>`.
pub(crate) const TRY: &str = r#"try() { what=$1; shift; if out=$("$@" 2>&1); then echo "ESCAPED: $what"; else echo "held: $what: $out"; fi; }; "#;

/// Each of `attempts` was tried and held.
pub(crate) fn assert_held(out: &str, attempts: &[&str]) {
    for what in attempts {
        assert!(out.contains(&format!("held: {what}")), "{what}: {out}");
    }
}

pub(crate) fn script(body: &str) -> String {
    format!("{TRY}{body}")
}
