//! `taskgate run [JOB]`: places one allocation and prints its task events
//! as they happen, then each task's logs. With an agent serving the data
//! dir, the job is submitted to it; without one, this process is the agent
//! while it runs (it restores what an earlier agent left, and serves the
//! control socket). Ctrl-C sends the allocation a stop, and the run fails
//! as interrupted once it ended; a second Ctrl-C ends a submitted run at
//! once (the agent goes on with the stop). A SIGTERM or SIGHUP leaves the
//! allocation running for the agent (the next one, in the foreground case).

use super::agent_config::{AgentArgs, DEFAULT_DATA_DIR};
use super::logs::{logs_dir, LogFiles};
use anyhow::Context;
use nix::sys::signal::{SigHandler, SigSet, Signal};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use taskgate_engine::agent::{Agent, AllocEntry, ControlServer, Followed};
use taskgate_engine::alloc::AllocStatus;
use taskgate_engine::control::{
    self, ControlAnswer, ControlError, ControlRequest, Replies, RequestError,
};
use taskgate_engine::jobspec::{self, Job};
use taskgate_engine::task_state::TaskEvent;
use taskgate_engine::{ClientStatus, DataDir};
use taskgate_executor::LogStream;
use tokio::signal::unix::{signal, SignalKind};

#[derive(clap::Args)]
pub struct Args {
    /// Nomad-style HCL job file; without it the built-in default job runs
    /// (the leader + sidecar alloc of docs/nomad-prestart-race-report.txt).
    pub job: Option<PathBuf>,
    /// Task group to place (default: the first).
    #[arg(long)]
    pub group: Option<String>,
    /// With an agent running: return once the allocation is placed.
    #[arg(long)]
    pub detach: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Whether Ctrl-C cut a run short: its stop was sent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    No,
    ByInterrupt,
}

/// How a foreground run ended.
enum Ended {
    Finished {
        alloc_id: String,
        status: AllocStatus,
        cut: Cut,
    },
    /// SIGTERM or SIGHUP: the allocation runs on for the next agent.
    Left { alloc_id: String, signal: Signal },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let job = match &args.job {
        Some(path) => jobspec::parse_file(path)?,
        None => jobspec::builtin_default(),
    };
    // The job file is read here in either mode: a group it lacks is
    // refused before anything of an agent starts or is asked.
    let group = job.group(args.group.as_deref())?;
    if let (None, [first, _, ..]) = (&args.group, job.groups.as_slice()) {
        super::say_err!(
            "warning: job {:?} has {} groups; this run places the first, {:?} (choose one with --group)",
            job.name,
            job.groups.len(),
            first.name
        );
    }
    if control::agent_serves(args.agent.data_dir())? {
        let ignored = args.agent.agents_own_given();
        if !ignored.is_empty() {
            super::say_err!(
                "warning: {} ignored: the running agent keeps the options it was started with",
                ignored.join(", ")
            );
        }
        return submit(&args, job);
    }
    anyhow::ensure!(
        !args.detach,
        "--detach needs a running agent (taskgate agent) with this --data-dir"
    );
    // Named before this run becomes the agent (a submitted job is checked
    // by the agent, against its own default user).
    let unknown = jobspec::unknown_users(group, args.agent.user());
    anyhow::ensure!(unknown.is_empty(), "{}", unknown.join("\n"));
    foreground(&args, &job)
}

/// Submits the job to the agent serving the data dir and follows it.
fn submit(args: &Args, job: Job) -> anyhow::Result<()> {
    let data_dir = args.agent.data_dir();
    let name = job.name.clone();
    let request = ControlRequest::Submit {
        job,
        group: args.group.clone(),
        follow: !args.detach,
    };
    let mut replies = control::send(data_dir, &request)?;
    let alloc_id = match replies.next_answer() {
        Ok(ControlAnswer::Placed { alloc_id }) => alloc_id,
        Ok(other) => return Err(control::RequestError::Unexpected(Box::new(other)).into()),
        // An agent that exits as it places a job (told to, or crashing)
        // may have recorded it, for the next agent to run.
        Err(hung_up @ control::RequestError::NoReply(_)) => anyhow::bail!(
            "{hung_up}; the job may have been placed all the same: see `taskgate status` before you submit it again"
        ),
        Err(err) => return Err(err.into()),
    };
    print_placed(data_dir, &alloc_id, &name);
    if args.detach {
        return Ok(());
    }
    // Until now a Ctrl-C ended the run as it ends any command (a job the
    // agent took is placed all the same). From here the signal thread
    // takes them: blocked before any thread starts, so each inherits the
    // mask and that thread is the only one to take them.
    let signals = SigSet::from_iter([Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP]);
    signals.thread_block().context("blocking signals")?;
    let (dir, id) = (data_dir.clone(), alloc_id.clone());
    let stop = Arc::new(Mutex::new(StopState::NotSent));
    let state = stop.clone();
    std::thread::spawn(move || stop_on_interrupt(signals, dir, id, state));
    let followed = follow_remote(replies)?;
    let entries = super::status::read_status(&args.agent.client)?;
    let entry = super::status::find_alloc(&entries, &alloc_id, data_dir)?;
    let status = match followed {
        Some(status) => status,
        None => recorded_end(entry)?,
    };
    let cut = match *lock(&stop) {
        StopState::Sent => Cut::ByInterrupt,
        StopState::NotSent | StopState::Sending => Cut::No,
    };
    finish(data_dir, entry, status, cut)
}

/// Where a submitted run's Ctrl-C stop stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopState {
    NotSent,
    /// Asked of the agent, not yet answered: a second Ctrl-C exits.
    Sending,
    /// The agent took it: the run ends as interrupted.
    Sent,
}

fn lock(stop: &Mutex<StopState>) -> std::sync::MutexGuard<'_, StopState> {
    stop.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes the blocked signals: Ctrl-C stops the allocation, a second one
/// (or one once it has finished, as its logs print) ends the run at once;
/// SIGTERM or SIGHUP detaches, leaving it to the agent. The stop is asked
/// on a thread of its own: an agent that never answers must not keep this
/// one from the next signal.
fn stop_on_interrupt(
    signals: SigSet,
    data_dir: DataDir,
    alloc_id: String,
    stop: Arc<Mutex<StopState>>,
) {
    loop {
        let signal = match signals.wait() {
            Ok(signal) => signal,
            Err(_) => return,
        };
        let first_interrupt = signal == Signal::SIGINT && {
            let mut state = lock(&stop);
            let first = *state == StopState::NotSent;
            if first {
                *state = StopState::Sending;
            }
            first
        };
        match signal {
            Signal::SIGINT if first_interrupt => {
                // Asked before it is said: a stalled stdout (a paused
                // terminal) may block the saying, never the stop.
                let (data_dir, alloc_id, stop) = (data_dir.clone(), alloc_id.clone(), stop.clone());
                std::thread::spawn(move || ask_agent_to_stop(&data_dir, &alloc_id, &stop));
                super::say!("==> interrupt: sending stop update");
            }
            Signal::SIGINT => {
                super::say!(
                    "==> interrupted again: exiting; the agent goes on stopping alloc {alloc_id}"
                );
                std::process::exit(130);
            }
            signal => {
                super::say!("==> {signal}: detached; alloc {alloc_id} runs on in the agent");
                std::process::exit(0);
            }
        }
    }
}

/// Asks the agent to stop the allocation, and records how it went.
fn ask_agent_to_stop(data_dir: &DataDir, alloc_id: &str, stop: &Mutex<StopState>) {
    let request = ControlRequest::Stop {
        alloc: alloc_id.to_string(),
        follow: false,
    };
    match control::request(data_dir, &request) {
        Ok(_) => *lock(stop) = StopState::Sent,
        // Finished already: what is left is its end's print.
        Err(RequestError::Control(ControlError::Finished { .. })) => std::process::exit(130),
        // Not sent: the next Ctrl-C tries again.
        Err(err) => {
            *lock(stop) = StopState::NotSent;
            super::say_err!("Error: sending the stop (Ctrl-C to try again): {err}");
        }
    }
}

/// The end of an allocation whose follow stream the agent hung up before
/// its last line (it exited as the allocation finished, a drain's end):
/// the record says how it ended, once it has.
pub fn recorded_end(entry: &AllocEntry) -> anyhow::Result<AllocStatus> {
    anyhow::ensure!(entry.alloc.client.is_terminal(), AGENT_GONE);
    Ok(AllocStatus {
        desired: entry.alloc.desired,
        client: entry.alloc.client,
    })
}

/// What a follower is told when the agent hung up before the end.
pub const AGENT_GONE: &str =
    "the agent exited before the allocation finished: its tasks run on, and the next agent restores them";

/// Prints each event the agent streams until the allocation's end; `None`
/// if the agent hung up before it.
pub fn follow_remote(mut replies: Replies) -> anyhow::Result<Option<AllocStatus>> {
    loop {
        let answer = match replies.next_answer() {
            Err(control::RequestError::NoReply(_)) => return Ok(None),
            answer => answer?,
        };
        match answer {
            ControlAnswer::Event(event) => print_event(&event),
            ControlAnswer::Missed(n) => print_missed(n),
            ControlAnswer::Finished(status) => return Ok(Some(status)),
            other => return Err(control::RequestError::Unexpected(Box::new(other)).into()),
        }
    }
}

/// No agent runs: this process is the agent until the allocation ends.
fn foreground(args: &Args, job: &Job) -> anyhow::Result<()> {
    let data_dir = args.agent.data_dir();
    let agent = Agent::new(args.agent.open_engine(Default::default())?);
    let runtime = super::runtime()?;
    let ended = runtime.block_on(async {
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let mut hangup = signal(SignalKind::hangup())?;
        // Bound before anything is restored or placed, so a second agent
        // does neither; served once all is restored. The socket goes when
        // this block ends, however it ends.
        let socket = ControlServer::bind(data_dir)?;
        let (restored, skipped) = agent.restore()?;
        let server = socket.serve(agent.clone());
        for skipped in &skipped {
            super::say_err!("error: {skipped}");
        }
        if !restored.is_empty() {
            super::say!(
                "==> restored {} allocation(s) an earlier agent left; they run on after this one ends",
                restored.len()
            );
        }
        // A SIGTERM or SIGHUP taken while this started places nothing: the
        // allocation would run on with no agent from its first moment.
        let before_placing = tokio::select! {
            biased;
            _ = terminate.recv() => Some(Signal::SIGTERM),
            _ = hangup.recv() => Some(Signal::SIGHUP),
            () = std::future::ready(()) => None,
        };
        let placed = match before_placing {
            Some(signal) => Err(anyhow::anyhow!("{signal} before the job was placed: nothing placed")),
            None => agent.submit(job, args.group.as_deref()).map_err(anyhow::Error::from),
        };
        let mut following = match placed {
            Ok(following) => following,
            Err(err) => {
                // What this agent took meanwhile (a drain, say) is answered
                // to its end before it goes.
                close_unless_signalled(server, [&mut interrupt, &mut terminate, &mut hangup])
                    .await;
                return Err(err);
            }
        };
        let alloc_id = following.alloc_id.clone();
        print_placed(data_dir, &alloc_id, &job.name);
        let mut cut = Cut::No;
        loop {
            tokio::select! {
                followed = following.next() => match followed {
                    Followed::Event(event) => print_event(&event),
                    Followed::Missed(n) => print_missed(n),
                    Followed::Finished(status) => {
                        // A drain this run serves ends with every allocation,
                        // and its client is answered first.
                        if agent.draining() {
                            super::say!("==> waiting for the drain to finish every allocation");
                        }
                        let signal = close_unless_signalled(
                            server,
                            [&mut interrupt, &mut terminate, &mut hangup],
                        )
                        .await;
                        if let (Some(signal), true) = (signal, agent.draining()) {
                            super::say!(
                                "==> {signal}: exiting before the drain ended; what it has not \
                                 stopped runs on for the next agent"
                            );
                        }
                        return anyhow::Ok(Ended::Finished { alloc_id, status, cut })
                    }
                    Followed::Gone => anyhow::bail!("the engine shut down under the allocation"),
                },
                _ = interrupt.recv() => {
                    if cut == Cut::ByInterrupt {
                        super::say!("==> already stopping: waiting for the tasks");
                    } else {
                        cut = Cut::ByInterrupt;
                        super::say!("==> interrupt: sending stop update");
                        send_stop(&agent, &alloc_id)?;
                    }
                }
                _ = terminate.recv() => return Ok(Ended::Left { alloc_id, signal: Signal::SIGTERM }),
                _ = hangup.recv() => return Ok(Ended::Left { alloc_id, signal: Signal::SIGHUP }),
            }
        }
    });
    // Whatever still runs (a task's executor call) is not waited for: the
    // executors and their tasks outlive this process.
    runtime.shutdown_background();
    // Placed in this run by other commands, or restored by it: nothing
    // supervises them once it has gone.
    let own = match &ended {
        Ok(Ended::Finished { alloc_id, .. } | Ended::Left { alloc_id, .. }) => Some(alloc_id),
        Err(_) => None,
    };
    let left: Vec<_> = (agent.running().into_iter())
        .filter(|id| Some(id) != own)
        .collect();
    if !left.is_empty() {
        super::say!(
            "==> {} other allocation(s) run on with no agent until the next one restores them \
             (taskgate agent): {}",
            left.len(),
            left.join(", ")
        );
    }
    let entries = taskgate_engine::agent::read_entries(agent.engine().state());
    // The cgroup parent is given back, unless tasks live on for the next
    // agent; nothing launches any more.
    agent.engine().give_back_cgroups();
    // The runtime's handler would swallow a Ctrl-C from here on, while the
    // end prints: it ends that as it ends `cat`.
    // SAFETY: the default action installs no handler.
    let _ = unsafe { nix::sys::signal::signal(Signal::SIGINT, SigHandler::SigDfl) };
    match ended? {
        Ended::Left { signal, .. } => {
            super::say!(
                "==> {signal}: exiting; the allocation's tasks run on for the next agent \
                 (taskgate agent restores them)"
            );
            Ok(())
        }
        Ended::Finished {
            alloc_id,
            status,
            cut,
        } => {
            let entries = entries?;
            let placed = super::status::find_alloc(&entries, &alloc_id, data_dir)?;
            finish(data_dir, placed, status, cut)
        }
    }
}

/// Closes a foreground run's control server, answering every request it
/// took (a drain to its end), unless one of `[interrupt, terminate,
/// hangup]` comes first: then which one came.
async fn close_unless_signalled(
    server: ControlServer,
    [interrupt, terminate, hangup]: [&mut tokio::signal::unix::Signal; 3],
) -> Option<Signal> {
    tokio::select! {
        () = server.close() => None,
        _ = interrupt.recv() => Some(Signal::SIGINT),
        _ = terminate.recv() => Some(Signal::SIGTERM),
        _ = hangup.recv() => Some(Signal::SIGHUP),
    }
}

/// Ctrl-C's stop, in a foreground run. An allocation that finished
/// meanwhile is no failure: its end is what the run waits for next.
fn send_stop(agent: &Agent, alloc_id: &str) -> anyhow::Result<()> {
    match agent.stop(alloc_id) {
        Ok(_) | Err(ControlError::Finished { .. }) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

fn print_placed(data_dir: &DataDir, alloc_id: &str, job: &str) {
    super::say!("==> alloc {alloc_id} of job {job:?} placed");
    super::say!("==> restart with: {}", restart_command(data_dir, alloc_id));
}

/// The end of a run: the status, each task's logs, and the exit code of a
/// failure or of a run Ctrl-C cut short.
fn finish(
    data_dir: &DataDir,
    entry: &AllocEntry,
    status: AllocStatus,
    cut: Cut,
) -> anyhow::Result<()> {
    super::say!(
        "==> alloc {} finished: {}",
        entry.alloc.alloc_id,
        status.client.as_str()
    );
    print_logs(data_dir, entry);
    if status.client == ClientStatus::Failed {
        anyhow::bail!("allocation failed");
    }
    anyhow::ensure!(cut == Cut::No, "interrupted: the allocation was stopped");
    Ok(())
}

/// Every task's stdout and stderr, all of their rotated files, streamed:
/// no more of each than the task's `logs` stanza keeps. More can only be a
/// file a root task swelled itself (sparse, it costs no disk), and is not
/// read.
fn print_logs(data_dir: &DataDir, entry: &AllocEntry) {
    for task in entry.alloc.tasks() {
        let keeps = task.logs.config();
        let limit = u64::from(keeps.max_files).saturating_mul(keeps.max_file_size_bytes);
        for stream in LogStream::BOTH {
            let stream_name = stream.as_str();
            let mut out = LogPrint {
                header: Some(format!(
                    "--- {} {stream_name} (taskgate logs{}{} {} {}) ---",
                    task.name,
                    data_dir_arg(data_dir),
                    if stream_name == "stderr" {
                        " --stderr"
                    } else {
                        ""
                    },
                    entry.alloc.alloc_id,
                    task.name,
                )),
                left: limit,
                cut: false,
                ends_a_line: true,
            };
            let copied = logs_dir(entry)
                .and_then(|dir| Ok(LogFiles::new(dir, &task.name, stream).copy_to(&mut out)?));
            if !out.ends_a_line {
                super::say!();
            }
            if out.cut {
                super::say!(
                    "--- {} {stream_name}: the rest is not shown: more than the {limit} bytes its logs keep",
                    task.name
                );
            } else if let Err(err) = copied {
                super::say!("--- {} {stream_name}: {err:#}", task.name);
            }
        }
    }
}

/// One log stream printed to stdout under its header, which comes with its
/// first byte (an empty stream prints nothing), and cut after `left` bytes.
struct LogPrint {
    header: Option<String>,
    left: u64,
    /// Something past `left` was offered, and refused.
    cut: bool,
    /// What was printed ends with a newline (or nothing was).
    ends_a_line: bool,
}

impl std::io::Write for LogPrint {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            self.cut = true;
            return Err(std::io::Error::other("past the task's log limit"));
        }
        let n = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let mut stdout = std::io::stdout().lock();
        if let Some(header) = self.header.take() {
            writeln!(stdout, "{header}")?;
        }
        stdout.write_all(&buf[..n])?;
        self.left -= n as u64;
        self.ends_a_line = buf[n - 1] == b'\n';
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}

/// How to restart `alloc_id`'s tasks.
fn restart_command(data_dir: &DataDir, alloc_id: &str) -> String {
    let data_dir = data_dir_arg(data_dir);
    format!("taskgate restart{data_dir} {alloc_id} [TASK] [--all-tasks]")
}

/// ` --data-dir DIR` for a command line, when not the default.
fn data_dir_arg(data_dir: &DataDir) -> String {
    if data_dir.path() == Path::new(DEFAULT_DATA_DIR) {
        String::new()
    } else {
        format!(" --data-dir {}", data_dir.display())
    }
}

pub fn print_event(event: &TaskEvent) {
    super::say!(
        "    {:<10} {:<15} {}",
        event.task,
        event.kind.label(),
        event.message
    );
}

fn print_missed(n: u64) {
    super::say!(
        "    ({n} events were missed: taskgate status --verbose shows each task's last {})",
        taskgate_engine::state::MAX_TASK_EVENTS
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskgate_engine::agent::Following;
    use taskgate_engine::{Engine, EngineConfig};

    async fn until_finished(following: &mut Following) {
        loop {
            match following.next().await {
                Followed::Finished(_) => return,
                Followed::Gone => panic!("the engine shut down under the allocation"),
                Followed::Event(_) | Followed::Missed(_) => {}
            }
        }
    }

    /// Ctrl-C just as the allocation finished on its own: its stop finds
    /// it finished, which is no failure of the run.
    #[test]
    fn an_interrupt_as_the_allocation_finishes_is_no_error() {
        let dir = tempfile::tempdir().unwrap();
        let me = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .expect("the test's own user");
        let config = EngineConfig {
            default_user: me.name,
            ..EngineConfig::for_fake(DataDir::new(dir.path().join("data")))
        };
        let driver = config.fake_driver();
        let agent = Agent::new(Engine::open_on_fake(config, &driver).unwrap());
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let mut following = agent.submit(&jobspec::builtin_default(), None).unwrap();
            agent.stop(&following.alloc_id).unwrap();
            until_finished(&mut following).await;
            let sent = send_stop(&agent, &following.alloc_id);
            assert!(sent.is_ok(), "{:#}", sent.unwrap_err());
        });
    }
}
