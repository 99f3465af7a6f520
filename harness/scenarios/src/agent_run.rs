//! A fault case run in `taskgate agent` processes: the first agent gets
//! the case's faults (one of them SIGKILLs it), a second restores what the
//! first left in the state database and goes on as the scenario says (with
//! the faults at `tr.restoring`, which only a restored agent reaches).
//! What happened is read from the shared fault log and the state database.

use crate::history::Records;
use crate::lab::{io, Lab, LabError};
use crate::model::{Restore, Scenario, Then};
use crate::outcome::{
    by_process, restart_counts, unfired, Outcome, AGENT_JOB, AGENT_LOG, RESTART_SEED,
};
use crate::plan::AgentCase;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;
use taskgate_engine::state::{AllocRecord, StateDb, TaskRecord};
use taskgate_engine::DataDir;
use taskgate_faults::points::TR_RESTORING;
use taskgate_faults::{patience, Action, Fault};

/// The agent processes of one run: the lab they run in and the `taskgate`
/// binary they are.
pub(crate) struct Agents<'a> {
    pub lab: &'a Lab,
    pub bin: &'a Path,
}

impl Agents<'_> {
    pub(crate) fn run(
        &self,
        scenario: &Scenario,
        case: &AgentCase<'_>,
        data_dir: &Path,
        log: &Path,
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
        let agent = |extra: &[&str], faults: &[Fault]| -> Result<Option<ExitStatus>, LabError> {
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
            wait_or_kill(&mut child, patience::step(), progress)
                .map_err(io("waiting for agent", self.bin))
        };
        let job_arg = job_path.display().to_string();
        let mut first_args = vec!["--job-json", job_arg.as_str()];
        if then != Then::RunToEnd {
            first_args.push("--stop-when-running");
        }
        let kills = case.faults.iter().any(|f| f.action == Action::KillAgent);
        let killed = match agent(&first_args, &case.faults)? {
            None => {
                problems.push(format!(
                    "agent hung (killed after {:?} without progress)",
                    patience::step()
                ));
                false
            }
            Some(status) => {
                std::os::unix::process::ExitStatusExt::signal(&status) == Some(libc::SIGKILL)
            }
        };
        let mut records = Records::default();
        let (_, tasks) = read_state(data_dir)?;
        records.restart_counts = restart_counts(&tasks);
        if killed {
            let restarted_at = taskgate_faults::read_log(log)
                .map_err(io("reading", log))?
                .len() as u64;
            records.restarted_at = Some((restarted_at, restore == Restore::Stop));
            if restore == Restore::Stop {
                stopped_while_down(data_dir)?;
            }
            let mut args = vec!["--restore"];
            match restore {
                Restore::Stop => args.push("--stop"),
                Restore::Run if then != Then::RunToEnd => args.push("--stop-when-running"),
                Restore::Run => {}
            }
            // Only a restored agent reaches `tr.restoring`: the case's
            // faults there are the restored agent's, and none of the others.
            let restoring: Vec<Fault> = (case.faults.iter())
                .filter(|f| f.point.point == TR_RESTORING)
                .cloned()
                .collect();
            match agent(&args, &restoring)? {
                Some(status) if status.success() => {}
                Some(status) => problems.push(format!("restored agent failed: {status}")),
                None => problems.push(format!(
                    "restored agent hung (killed after {:?} without progress)",
                    patience::step()
                )),
            }
        } else if kills {
            problems.push("the agent was not SIGKILLed: its kill fault never fired".into());
        }
        let hits = taskgate_faults::read_log(log).map_err(io("reading", log))?;
        problems.extend(unfired(&case.faults, &hits));
        let (alloc, tasks) = read_state(data_dir)?;
        if alloc.is_none() {
            problems.push("no allocation in the state database".into());
        }
        if killed {
            records.restart_counts.extend(restart_counts(&tasks));
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

fn read_state(data_dir: &Path) -> Result<(Option<AllocRecord>, Vec<TaskRecord>), LabError> {
    let state = StateDb::open(&DataDir::new(data_dir).state_db())?;
    let alloc = state.allocs()?.into_iter().next();
    let tasks = match &alloc {
        Some(a) => state.tasks(&a.alloc_id)?,
        None => Vec::new(),
    };
    Ok((alloc, tasks))
}

/// Waits for an agent, killing it if it makes no progress for `idle`
/// (`None`): a hung agent must fail its run, not the whole gate.
fn wait_or_kill(
    child: &mut std::process::Child,
    idle: Duration,
    progress: impl Fn() -> u64 + Send + 'static,
) -> std::io::Result<Option<ExitStatus>> {
    let watchdog = crate::watchdog::Watchdog::arm(child.id(), idle, progress);
    let status = child.wait();
    let killed = watchdog.disarm();
    Ok((!killed).then_some(status?))
}
