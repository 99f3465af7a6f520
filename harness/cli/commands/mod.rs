#[cfg(feature = "failpoints")]
pub mod agent;
pub mod agent_config;
pub mod bench;
#[cfg(feature = "failpoints")]
pub mod explore;
#[cfg(feature = "failpoints")]
pub mod gate;
#[cfg(feature = "failpoints")]
mod lab_session;
#[cfg(feature = "failpoints")]
pub mod replay;
pub mod restart;
pub mod run;
pub mod status;

/// The engine runtime. Fault points may park a worker thread (through
/// `block_in_place`), so keep more workers than the two cores.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .enable_all()
        .build()?)
}

/// The executor binary installed next to this one (see `executor_main.rs`).
pub fn sibling_executor() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    let me = std::env::current_exe().context("locating the taskgate binary")?;
    let bin = me.with_file_name("taskgate-executor");
    anyhow::ensure!(
        bin.is_file(),
        "{} not found: build both binaries (cargo build) or pass --executor-bin",
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
