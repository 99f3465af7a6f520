//! A fault case run in `taskgate agent` processes: the first agent gets
//! the case's faults (one of them SIGKILLs it), a second restores what the
//! first left in the state database and goes on as the scenario says (with
//! the faults at `tr.restoring`, which only a restored agent reaches). A
//! case with a restored kill SIGKILLs that second agent too, and a third
//! restores what it left. What happened is read from the shared fault log
//! and the state database.

use crate::history::{self, Records};
use crate::lab::{io, Lab, LabError};
use crate::model::{Restore, Scenario, Then};
use crate::outcome::{
    by_process, restart_counts, unfired, with_every_event, Outcome, AGENT_EVENTS, AGENT_JOB,
    AGENT_LOG, RESTART_SEED,
};
use crate::plan::AgentCase;
use crate::shapes::shapes;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::Duration;
use taskgate_engine::state::{AllocRecord, StateDb, TaskRecord};
use taskgate_engine::task_state::TaskEvent;
use taskgate_engine::DataDir;
use taskgate_faults::points::TR_RESTORING;
use taskgate_faults::{patience, Action, Fault};
use taskgate_oracle::Violation;

/// The agent processes of one run: the lab they run in and the `taskgate`
/// binary they are.
pub(crate) struct Agents<'a> {
    pub lab: &'a Lab,
    pub bin: &'a Path,
}

impl Agents<'_> {
    /// `first` is the run's first exec record in the lab.
    pub(crate) fn run(
        &self,
        scenario: &Scenario,
        case: &AgentCase<'_>,
        data_dir: &Path,
        log: &Path,
        first: usize,
    ) -> Result<Outcome, LabError> {
        let AgentCase {
            case,
            then,
            restore,
            ..
        } = *case;
        let job_path = data_dir.join(AGENT_JOB);
        let job = serde_json::to_vec(&scenario.job).expect("jobs serialize");
        std::fs::write(&job_path, job).map_err(io("writing", &job_path))?;
        let mut problems = Vec::new();
        let shapes = shapes(scenario, None);
        // What ends the run early, read while an agent runs: a runaway
        // (see `patience::RUNAWAY_POINTS`), or an invariant broken for good.
        let ends_early = |records: &Records| {
            let hits = taskgate_faults::read_log(log).unwrap_or_default();
            let reached = hits.len() as u64;
            if reached >= patience::RUNAWAY_POINTS {
                return Some(Ended::RanAway(reached));
            }
            let execs = self.lab.execs_so_far(first);
            let history = history::merge(&hits, &execs, &[], records);
            // A breach the scenario marks as its known bug is expected: the
            // run goes on to its end, for the marker to be judged there.
            let known = scenario.expect.known_violation.as_ref();
            taskgate_oracle::check_settled(&history, &shapes)
                .into_iter()
                .find(|v| !known.is_some_and(|k| k.excuses(v)))
                .map(Ended::Settled)
        };
        let agent =
            |extra: &[&str], faults: &[Fault], records: &Records| -> Result<Waited, LabError> {
                let mut cmd = Command::new(self.bin);
                cmd.arg("agent")
                    .arg("--data-dir")
                    .arg(data_dir)
                    .arg("--executor-bin")
                    .arg(self.lab.executor_bin())
                    .arg("--restart-seed")
                    .arg(RESTART_SEED.to_string())
                    .arg("--cgroup-parent")
                    .arg(self.lab.cgroup_parent().as_str());
                for (host, task) in self.lab.chroot_env() {
                    cmd.arg("--chroot-env")
                        .arg(format!("{}:{}", host.display(), task.display()));
                }
                let (executor, engine) = by_process(faults);
                cmd.args(extra)
                    .env(taskgate_faults::FAULT_LOG_ENV, log)
                    // The harness's measure of this machine: an agent that
                    // measured its own would spend a calibration's CPU at
                    // each start, on the run's critical path.
                    .env(
                        patience::SPEED_FACTOR_ENV,
                        patience::speed_factor().to_string(),
                    )
                    .env(
                        taskgate_faults::FAULTS_ENV,
                        taskgate_faults::env_spec(engine),
                    )
                    .env(
                        taskgate_executor::FAILPOINTS_ENV,
                        taskgate_faults::env_spec(executor),
                    );
                let agent_log = data_dir.join(AGENT_LOG);
                let stderr = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&agent_log)
                    .map_err(io("opening", &agent_log))?;
                cmd.stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(stderr);
                let mut child = cmd.spawn().map_err(io("running agent", self.bin))?;
                let log = log.to_path_buf();
                let progress = move || std::fs::metadata(&log).map_or(0, |m| m.len());
                wait_or_kill(&mut child, patience::step(), progress, || {
                    ends_early(records)
                })
                .map_err(io("waiting for agent", self.bin))
            };
        let job_arg = job_path.display().to_string();
        let mut first_args = vec!["--job-json", job_arg.as_str()];
        if then != Then::RunToEnd {
            first_args.push("--stop-when-running");
        }
        let mut restore_args = vec!["--restore"];
        match restore {
            Restore::Stop => restore_args.push("--stop"),
            Restore::Run if then != Then::RunToEnd => restore_args.push("--stop-when-running"),
            Restore::Run => {}
        }
        // Only a restored agent reaches `tr.restoring`: the case's faults
        // there are the first restored agent's, with its own kill if the
        // case has one; a third agent has none.
        let restored_kill = (case.restored_kill.clone()).map(|point| Fault {
            point,
            action: Action::KillAgent,
            nth: 1,
        });
        let restored_faults: Vec<Fault> = (case.faults.iter())
            .filter(|f| f.point.point == TR_RESTORING)
            .chain(&restored_kill)
            .cloned()
            .collect();
        let lives = [
            ("agent", first_args, case.faults.clone()),
            ("restored agent", restore_args.clone(), restored_faults),
            ("third agent", restore_args, Vec::new()),
        ];
        let mut records = Records::default();
        // The tasks' events each killed agent left in the state: its last
        // ones may be there and nowhere else.
        let mut left_events = Vec::new();
        let mut kills = 0;
        // The state as the last agent to run left it.
        let mut last = (None, Vec::new());
        for (name, args, faults) in lives {
            if kills > 0 {
                let reached = taskgate_faults::read_log(log).map_err(io("reading", log))?;
                (records.restarted_at).push((reached.len() as u64, restore == Restore::Stop));
                if restore == Restore::Stop {
                    stopped_while_down(data_dir)?;
                }
            }
            let waited = agent(&args, &faults, &records)?;
            last = read_state(data_dir)?;
            records.restart_counts.extend(restart_counts(&last.1));
            let killed = match &waited {
                Ok(status) => {
                    std::os::unix::process::ExitStatusExt::signal(status) == Some(libc::SIGKILL)
                }
                Err(ended) => {
                    problems.push(ended.problem(name));
                    false
                }
            };
            let kills_it = faults.iter().any(|f| f.action == Action::KillAgent);
            if killed && !kills_it {
                problems.push(format!("{name} was SIGKILLed by no fault of the run"));
                break;
            }
            if killed {
                kills += 1;
                left_events.extend(last.1.iter().flat_map(|t| t.events.iter().cloned()));
                continue;
            }
            let settled = matches!(waited, Err(Ended::Settled(_)));
            if kills_it && !settled {
                problems.push(format!(
                    "the {name} was not SIGKILLed: its kill fault never fired"
                ));
            }
            match waited {
                Ok(status) if kills > 0 && !status.success() => {
                    let said = last_line(&data_dir.join(AGENT_LOG))
                        .map(|line| format!("; its log ends: {line}"))
                        .unwrap_or_default();
                    problems.push(format!("{name} failed: {status}{said}"));
                }
                _ => {}
            }
            break;
        }
        let hits = taskgate_faults::read_log(log).map_err(io("reading", log))?;
        let configured: Vec<Fault> = (case.faults.iter())
            .chain(&restored_kill)
            .cloned()
            .collect();
        problems.extend(unfired(&configured, &hits));
        let (alloc, mut tasks) = last;
        let followed = followed_events(data_dir, kills, &mut problems)?;
        let seen: Vec<&TaskEvent> = followed.iter().chain(&left_events).collect();
        problems.extend(with_every_event(&mut tasks, &seen));
        if alloc.is_none() {
            problems.push("no allocation in the state database".into());
        }
        records.desired_stop = alloc
            .as_ref()
            .map(|a| a.desired == taskgate_engine::DesiredStatus::Stop);
        records.alloc_id = alloc.as_ref().map(|a| a.alloc_id.clone());
        records.status = alloc.map(|a| a.client);
        Ok(Outcome {
            hits,
            execs: Vec::new(),
            tasks,
            records,
            problems,
        })
    }
}

/// The stop the restored agent is to apply reached the alloc while no
/// agent ran (persisted, as an agent persists a stop it takes): the new
/// agent restores a stopping alloc, whatever its task runners find. It
/// delivers the stop again too, which changes nothing.
fn stopped_while_down(data_dir: &Path) -> Result<(), LabError> {
    let state = StateDb::open(&DataDir::new(data_dir).state_db())?;
    for mut alloc in state.allocs()? {
        alloc.desired = taskgate_engine::DesiredStatus::Stop;
        state.put_alloc(&alloc)?;
    }
    Ok(())
}

/// The last line a log holds (the error an agent exited on), if any.
fn last_line(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .rfind(|l| !l.trim().is_empty())
        .map(str::to_string)
}

fn read_state(data_dir: &Path) -> Result<(Option<AllocRecord>, Vec<TaskRecord>), LabError> {
    let state = StateDb::open(&DataDir::new(data_dir).state_db())?;
    let alloc = state.allocs()?.into_iter().next();
    let tasks = match &alloc {
        Some(a) => state.tasks(&a.alloc_id)?,
        None => Vec::new(),
    };
    Ok((alloc, tasks))
}

/// The task events the run's agents followed (none if no agent got as far
/// as following one). Each of the `kills` killed agents may have torn its
/// last line, which the next one starts a new line after; any other
/// unreadable line is a problem of the run.
fn followed_events(
    data_dir: &Path,
    kills: usize,
    problems: &mut Vec<String>,
) -> Result<Vec<TaskEvent>, LabError> {
    let path = data_dir.join(AGENT_EVENTS);
    let text = match std::fs::read_to_string(&path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        read => read.map_err(io("reading", &path))?,
    };
    let mut events = Vec::new();
    let mut unreadable = Vec::new();
    for (i, line) in text.lines().enumerate() {
        match serde_json::from_str(line) {
            Ok(event) => events.push(event),
            Err(_) => unreadable.push(i + 1),
        }
    }
    if unreadable.len() > kills {
        problems.push(format!(
            "{}: unreadable lines {unreadable:?}",
            path.display()
        ));
    }
    Ok(events)
}

/// How an agent process ended: its own exit, or the harness's kill.
type Waited = Result<ExitStatus, Ended>;

/// Why the harness killed an agent.
enum Ended {
    /// No progress for a whole idle window.
    Hung,
    /// The run reached this many fault points, more than any run that
    /// ends: a livelock, which keeps making progress.
    RanAway(u64),
    /// The run had already broken an invariant for good, which no
    /// later event can mend, so waiting on would only delay the verdict
    /// (up to a hang's whole idle window when the breach also hangs it).
    Settled(Violation),
}

impl Ended {
    fn problem(&self, agent: &str) -> String {
        match self {
            Ended::Hung => format!(
                "{agent} hung (killed after {:?} without progress)",
                patience::step()
            ),
            Ended::RanAway(reached) => format!(
                "{agent} ran away (killed after the run reached {reached} fault points; the bound is {})",
                patience::RUNAWAY_POINTS
            ),
            Ended::Settled(v) => format!(
                "{agent} ended early: the run broke {} for good ({})",
                v.invariant, v.detail
            ),
        }
    }
}

/// How often a running agent's run is looked at for a runaway or a breach
/// that is settled.
const SETTLED_PROBE: Duration = Duration::from_millis(200);

/// Waits for an agent. Kills it if it makes no progress for `idle` (a hung
/// agent must fail its run, not the whole gate), or as soon as
/// `ends_early` finds the run ran away or broke an invariant for good.
fn wait_or_kill(
    child: &mut std::process::Child,
    idle: Duration,
    progress: impl Fn() -> u64 + Send + 'static,
    ends_early: impl Fn() -> Option<Ended>,
) -> std::io::Result<Waited> {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let watchdog = crate::watchdog::Watchdog::arm(child.id(), idle, progress);
    let (status, breach) = std::thread::scope(|scope| {
        let (exited, waited) = channel();
        scope.spawn(move || exited.send(child.wait()));
        loop {
            match waited.recv_timeout(SETTLED_PROBE) {
                Ok(status) => return (status, None),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return (Err(std::io::Error::other("the agent's waiter died")), None)
                }
            }
            if let Some(breach) = ends_early() {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let status = waited
                    .recv()
                    .unwrap_or_else(|_| Err(std::io::Error::other("the agent's waiter died")));
                return (status, Some(breach));
            }
        }
    });
    let hung = watchdog.disarm();
    let status = status?;
    Ok(match (breach, hung) {
        (Some(ended), _) => Err(ended),
        (None, true) => Err(Ended::Hung),
        (None, false) => Ok(status),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_whose_run_ran_away_is_killed_and_says_so() {
        let mut child = Command::new("sleep").arg("3600").spawn().unwrap();
        // No idle window can end this wait: only the runaway can.
        let waited = wait_or_kill(
            &mut child,
            Duration::from_secs(3600),
            || 0,
            || Some(Ended::RanAway(patience::RUNAWAY_POINTS)),
        )
        .unwrap();
        let Err(ended) = waited else {
            panic!("the agent was waited for to its end")
        };
        assert!(matches!(ended, Ended::RanAway(_)));
        assert!(ended.problem("agent").contains("agent ran away"));
    }
}
