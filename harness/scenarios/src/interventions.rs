//! What the harness does to a task's processes behind the engine's back
//! (`Action::Intervene`), and what it finds of them after a run. Processes
//! are found the way the exec oracle finds them, from the kernel: an
//! executor holds its `<alloc>.<task>.spec.json` on fd 3, a task's tree
//! sits in its `taskgate.<alloc>.<task>` cgroup. The engine is not asked.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use taskgate_engine::DataDir;
use taskgate_faults::{patience, Faults, Intervention};
use taskgate_oracle::ExecIdentity;

/// The live processes of one task of the allocations under a data dir.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TaskProcesses {
    pub executors: Vec<i32>,
    pub tree: Vec<i32>,
}

impl TaskProcesses {
    pub fn all(&self) -> Vec<i32> {
        self.executors.iter().chain(&self.tree).copied().collect()
    }
}

/// The allocations a data dir holds (each has a directory under `allocs/`).
fn alloc_ids(data_dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(DataDir::new(data_dir).allocs())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Every live process of `task` in the allocations under `data_dir`.
pub fn task_processes(data_dir: &Path, task: &str) -> TaskProcesses {
    processes_by_task(data_dir).remove(task).unwrap_or_default()
}

/// Every live process of each task in the allocations under `data_dir`,
/// by task name: one pass over `/proc`, however many tasks there are.
fn processes_by_task(data_dir: &Path) -> BTreeMap<String, TaskProcesses> {
    let allocs = alloc_ids(data_dir);
    let mut found: BTreeMap<String, TaskProcesses> = BTreeMap::new();
    let pids = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        // A task killed and not yet reaped (by PID 1, under load) is gone.
        .filter(|&pid| taskgate_oracle::identity::running(pid));
    for pid in pids {
        match ExecIdentity::of_pid(pid) {
            ExecIdentity::Executor { alloc_id, task } if allocs.contains(&alloc_id) => {
                found.entry(task).or_default().executors.push(pid)
            }
            ExecIdentity::Task { alloc_id, task } if allocs.contains(&alloc_id) => {
                found.entry(task).or_default().tree.push(pid)
            }
            _ => {}
        }
    }
    found
}

/// Installs the handler for `Action::Intervene` in the run's `faults`,
/// acting on the tasks under `data_dir`; `deliver` delivers the alloc
/// updates and restarts (see [`crate::server::Server`]).
pub fn install(
    faults: &Faults,
    data_dir: PathBuf,
    deliver: impl Fn(Intervention) + Send + Sync + 'static,
) {
    faults.set_intervention_handler(move |scope, what| {
        if what.is_sent_to_alloc() {
            deliver(what);
            return true;
        }
        let task = scope.unwrap_or_else(|| panic!("{what:?} needs a task-scoped point"));
        let procs = task_processes(&data_dir, task);
        let (targets, act): (&[i32], fn(&[i32])) = match what {
            Intervention::KillExecutor => (&procs.executors, kill_and_reap),
            Intervention::KillTaskTree => (&procs.tree, kill_and_reap),
            Intervention::StopExecutor => (&procs.executors, |p| signal_all(p, Signal::SIGSTOP)),
            Intervention::ContinueExecutor => {
                (&procs.executors, |p| signal_all(p, Signal::SIGCONT))
            }
            sent => unreachable!("{} was delivered above", sent.as_str()),
        };
        act(targets);
        !targets.is_empty()
    });
}

fn signal_all(pids: &[i32], signal: Signal) {
    for pid in pids {
        let _ = kill(Pid::from_raw(*pid), signal);
    }
}

/// SIGKILLs `pids` and returns once each has exited, so the engine goes on
/// past the fault point only when the processes are really dead. Signalled
/// through a pidfd: once opened it names this process, never a reuse.
pub fn kill_and_reap(pids: &[i32]) {
    for &pid in pids {
        let Ok(Some(pidfd)) = taskgate_executor::pidfd_open_if_alive(pid) else {
            continue;
        };
        if taskgate_executor::pidfd_send_signal(pidfd.as_fd(), Signal::SIGKILL).is_err() {
            continue;
        }
        let mut fds = [nix::poll::PollFd::new(
            pidfd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let wait = patience::step().as_millis().min(i32::MAX as u128) as i32;
        let _ = nix::poll::poll(
            &mut fds,
            nix::poll::PollTimeout::try_from(wait).unwrap_or(nix::poll::PollTimeout::MAX),
        );
    }
}

/// After a run: SIGKILL whatever of `tasks` is still alive (and let it go),
/// returning what was found, so one run's leak never poisons the next.
pub fn sweep(data_dir: &Path, tasks: &[String]) -> Vec<(String, Vec<i32>)> {
    let mut alive = processes_by_task(data_dir);
    tasks
        .iter()
        .map(|task| {
            let procs = alive.remove(task).unwrap_or_default();
            // Stopped executors would not die of SIGKILL any later than now,
            // but a continued one could still clean up after itself.
            signal_all(&procs.executors, Signal::SIGCONT);
            let all = procs.all();
            kill_and_reap(&all);
            (task.clone(), all)
        })
        .collect()
}
