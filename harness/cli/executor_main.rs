//! `taskgate-executor`: the per-task executor process, started by the engine
//! as `taskgate-executor --run-dir DIR --cgroup-parent CGROUP` with its spec
//! on fd 3.
//!
//! A binary of its own, linking only the executor: one runs per task for the
//! task's whole life, so it should stay small (no engine, CLI parser or async
//! runtime in its pages) and start fast.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use taskgate_executor::CgroupParent;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (run_dir, cgroup_parent) = match args.as_slice() {
        [run_flag, dir, parent_flag, parent]
            if run_flag == "--run-dir" && parent_flag == "--cgroup-parent" =>
        {
            match CgroupParent::new(parent) {
                Ok(parent) => (PathBuf::from(dir), parent),
                Err(err) => {
                    let _ = writeln!(std::io::stderr(), "taskgate-executor: {err}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "usage: taskgate-executor --run-dir DIR --cgroup-parent CGROUP\n\
                 (started by the taskgate engine with the task's spec on fd 3, not by hand)"
            );
            return ExitCode::from(2);
        }
    };
    // stderr is redirected to the task's executor.out once the spec is read.
    let level = std::env::var("TASKGATE_LOG")
        .ok()
        .and_then(|l| l.parse().ok())
        .unwrap_or(tracing::Level::INFO);
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        // A failed write (a full disk) is told with `eprintln!`, a panic.
        .log_internal_errors(false)
        .with_max_level(level)
        .init();
    match taskgate_executor::server::run(&run_dir, &cgroup_parent) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("executor failed: {err}");
            let _ = writeln!(std::io::stderr(), "taskgate-executor: {err}");
            ExitCode::FAILURE
        }
    }
}
