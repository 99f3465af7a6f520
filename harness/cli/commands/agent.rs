//! `taskgate agent`: the daemon. It restores every allocation an earlier
//! agent left (the restore rules in docs/lifecycle.md), then serves the
//! control socket (`run`, `stop`, `status`, `logs`, `restart`, `drain`)
//! until it is told to go. On SIGTERM, SIGINT or SIGHUP it exits and leaves
//! every task running, as Nomad's client does: the next agent reattaches to
//! them. `taskgate drain` stops every allocation first, then the agent
//! exits. It stays in the foreground: systemd
//! (dist/systemd/taskgate.service) supervises it.

use super::agent_config::AgentArgs;
use anyhow::Context;
use std::sync::Arc;
use taskgate_engine::agent::{Agent, ControlServer};
use taskgate_engine::control;
use tokio::signal::unix::{signal, Signal, SignalKind};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub agent: AgentArgs,
    #[cfg(feature = "failpoints")]
    #[command(flatten)]
    pub harness: super::agent_harness::HarnessArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    #[cfg(feature = "failpoints")]
    let (faults, harness) = args.harness.prepare(&args.agent)?;
    #[cfg(not(feature = "failpoints"))]
    let faults = taskgate_faults::Faults::default();
    let data_dir = args.agent.data_dir();
    anyhow::ensure!(
        !control::agent_serves(data_dir)?,
        "another agent already serves {} (its socket: {})",
        data_dir.display(),
        data_dir.control_socket().display()
    );
    let agent = Agent::new(args.agent.open_engine(faults)?);
    let runtime = super::runtime()?;
    let served = runtime.block_on(async {
        // Bound first: a second agent of this data dir fails here, having
        // restored nothing; served once all is restored.
        let socket = ControlServer::bind(data_dir)?;
        let (restored, skipped) = agent.restore()?;
        let server = socket.serve(agent.clone());
        // The others run on; each one left behind is said, with why.
        for skipped in &skipped {
            super::say_err!("error: {skipped}");
        }
        let serving = |restored: usize| {
            tracing::info!(
                restored,
                socket = %data_dir.control_socket().display(),
                "agent serving"
            );
            tell_systemd_ready()
        };
        #[cfg(feature = "failpoints")]
        if let Some(harness) = harness {
            serving(restored.len())?;
            return harness.run(&agent, restored).await;
        }
        // Caught before the agent says it serves: a signal from then on is
        // its orderly exit, never the default death.
        let signals = EndSignals::catch()?;
        serving(restored.len())?;
        drop(restored);
        wait_for_the_end(&agent, server, signals).await
    });
    // Executor calls still under way are not waited for: the executors and
    // their tasks outlive this process, for the next agent.
    runtime.shutdown_background();
    let left = agent.live_count();
    if left > 0 {
        tracing::info!(
            allocs = left,
            "exiting; their tasks run on for the next agent"
        );
    }
    // The cgroup parent is given back, unless tasks live on for the next
    // agent; nothing launches any more.
    agent.engine().give_back_cgroups();
    served
}

/// Under systemd (`Type=notify`, dist/systemd/taskgate.service): the
/// agent serves, so its unit has started; a `run` right after `systemctl
/// start` finds the socket instead of racing the agent for the data dir.
fn tell_systemd_ready() -> anyhow::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let name = path.as_bytes();
    // A name starting with '@' is in the abstract namespace.
    let addr = match name.strip_prefix(b"@") {
        Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name),
        None => SocketAddr::from_pathname(&path),
    }
    .with_context(|| format!("NOTIFY_SOCKET {}", path.to_string_lossy()))?;
    UnixDatagram::unbound()
        .and_then(|socket| socket.send_to_addr(b"READY=1", &addr))
        .with_context(|| {
            format!(
                "telling systemd at {} the agent is ready",
                path.to_string_lossy()
            )
        })?;
    Ok(())
}

/// The signals that end an agent, leaving its tasks running.
struct EndSignals {
    terminate: Signal,
    interrupt: Signal,
    hangup: Signal,
}

impl EndSignals {
    fn catch() -> std::io::Result<EndSignals> {
        Ok(EndSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }
}

/// Serves until a signal (tasks left running) or a finished drain, after
/// which every request already taken is answered: a `run` asking for its
/// allocation's status as the drain finished it; after a signal, a
/// restart under way is told it was left unfinished.
async fn wait_for_the_end(
    agent: &Arc<Agent>,
    server: ControlServer,
    signals: EndSignals,
) -> anyhow::Result<()> {
    let EndSignals {
        mut terminate,
        mut interrupt,
        mut hangup,
    } = signals;
    let why = tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
        _ = hangup.recv() => "SIGHUP",
        () = server.drained() => {
            tracing::info!("drained: the agent answers what it took, and exits");
            server.close().await;
            return Ok(());
        }
    };
    tracing::info!(
        allocs = agent.live_count(),
        "{why}: the agent answers what it took, and exits"
    );
    server.leave(why).await;
    Ok(())
}
