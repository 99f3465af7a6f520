pub mod agent_config;
pub mod bench;
pub mod executor;
#[cfg(feature = "failpoints")]
pub mod agent;
#[cfg(feature = "failpoints")]
pub mod explore;
#[cfg(feature = "failpoints")]
pub mod gate;
#[cfg(feature = "failpoints")]
mod lab_session;
#[cfg(feature = "failpoints")]
pub mod replay;
pub mod run;
pub mod status;

/// The engine runtime. Fault points may park a worker thread (through
/// `block_in_place`), so keep more workers than the two cores.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(8).enable_all().build()?)
}

/// Namespaces, mounts and cgroups need root; say so plainly.
pub fn require_root() -> anyhow::Result<()> {
    anyhow::ensure!(
        nix::unistd::geteuid().is_root(),
        "taskgate needs root to isolate tasks (namespaces, mounts, cgroups): run it with sudo"
    );
    Ok(())
}
