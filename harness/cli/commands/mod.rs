/// `println!` that never panics: a reader that went away (a closed pipe, a
/// closed terminal) must not take down an agent whose tasks still run.
macro_rules! say {
    () => {
        crate::commands::say_to!(&mut std::io::stdout())
    };
    ($($arg:tt)*) => {
        crate::commands::say_to!(&mut std::io::stdout(), $($arg)*)
    };
}
pub(crate) use say;

/// [`say!`] on stderr: `eprintln!` panics when stderr is gone (a closed
/// pipe), which turned an error's exit 1 into a panic's 101.
macro_rules! say_err {
    ($($arg:tt)*) => {
        crate::commands::say_to!(&mut std::io::stderr(), $($arg)*)
    };
}
pub(crate) use say_err;

/// [`say!`] without the newline: `print!` that never panics.
macro_rules! say_part {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}
pub(crate) use say_part;

/// [`say!`] into the caller's writer (a table on stderr beside a JSON
/// report on stdout); `say!` is this on stdout.
macro_rules! say_to {
    ($out:expr) => {{
        let _ = std::io::Write::write_fmt(&mut *$out, format_args!("\n"));
    }};
    ($out:expr, $($arg:tt)*) => {{
        let _ = std::io::Write::write_fmt(
            &mut *$out,
            format_args!("{}\n", format_args!($($arg)*)),
        );
    }};
}
pub(crate) use say_to;

pub mod agent;
pub mod agent_config;
#[cfg(feature = "failpoints")]
pub mod agent_harness;
pub mod bench;
pub mod drain;
#[cfg(feature = "failpoints")]
pub mod explore;
#[cfg(feature = "failpoints")]
pub mod gate;
#[cfg(feature = "failpoints")]
mod html_report;
mod interrupt;
#[cfg(feature = "failpoints")]
mod lab_session;
pub mod logs;
#[cfg(feature = "failpoints")]
pub mod replay;
pub mod restart;
pub mod run;
pub mod status;
pub mod stop;

/// A reply that only says the request was carried out.
pub fn expect_done(answer: taskgate_engine::control::ControlAnswer) -> anyhow::Result<()> {
    match answer {
        taskgate_engine::control::ControlAnswer::Done => Ok(()),
        other => Err(taskgate_engine::control::RequestError::Unexpected(Box::new(other)).into()),
    }
}

/// The engine runtime (see [`taskgate_engine::engine_runtime`]).
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(taskgate_engine::engine_runtime()?)
}

/// The executor binary installed next to this one (see `executor_main.rs`).
pub fn sibling_executor() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    let me = std::env::current_exe().context("locating the taskgate binary")?;
    let bin = me.with_file_name("taskgate-executor");
    anyhow::ensure!(
        bin.is_file(),
        "{} not found: build both binaries (cargo build)",
        bin.display()
    );
    Ok(bin)
}

/// Namespaces, mounts and cgroups need root; say so plainly.
pub fn require_root() -> anyhow::Result<()> {
    anyhow::ensure!(
        nix::unistd::geteuid().is_root(),
        "taskgate needs root to isolate tasks (namespaces, mounts, cgroups): run it with sudo"
    );
    Ok(())
}
