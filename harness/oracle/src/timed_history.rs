//! Recorded histories with times, for the table tests of the checks that
//! measure timers ([`crate::policy`], [`crate::liveness`],
//! [`crate::kills`]) and of the whole judgement ([`crate::check`]): each
//! record is stamped with the clock as last set.

use crate::history::{AllocStatus, Event, ExecRecord, StartedVersion, TaskEventKind, TaskExit};
use crate::identity::ExecIdentity;
use crate::kills::KILL_SIGNAL_WITNESS;
use std::time::Duration;
use taskgate_faults::points::{
    AR_STARTED, EX_SPAWNED, EX_TASK_EXITED, HARNESS_UPDATE_DELIVERED, TR_RESTART_DECIDED,
};
use taskgate_faults::{scoped, Action, Detail, Hit};

#[derive(Default, Clone)]
pub(crate) struct T {
    pub events: Vec<Event>,
    now_us: u64,
}

impl T {
    /// A run whose first alloc runner started at 0 ms.
    pub fn run() -> T {
        T::default().hit(AR_STARTED)
    }

    /// Sets the clock to `ms` milliseconds into the run.
    pub fn at(mut self, ms: u64) -> T {
        self.now_us = ms * 1000;
        self
    }

    fn push(mut self, event: Event) -> T {
        self.events.push(event);
        self
    }

    fn record(self, name: &str, action: Option<Action>, detail: Option<Detail>) -> T {
        let at_us = self.now_us;
        self.push(Event::FaultHit(Hit {
            seq: 0,
            point: name.parse().unwrap(),
            action,
            detail,
            at_us,
        }))
    }

    pub fn hit(self, name: &str) -> T {
        self.record(name, None, None)
    }

    pub fn task_hit(self, task: &str, point: &str) -> T {
        self.hit(&scoped(Some(task), point))
    }

    /// Its runner decided a restart by the policy, to wait `wait` first.
    pub fn decided(self, task: &str, wait: Duration) -> T {
        let wait_ns = u64::try_from(wait.as_nanos()).unwrap();
        self.record(
            &scoped(Some(task), TR_RESTART_DECIDED),
            None,
            Some(Detail::RestartWait { wait_ns }),
        )
    }

    pub fn fault(self, task: &str, point: &str, action: Action) -> T {
        self.record(&scoped(Some(task), point), Some(action), None)
    }

    fn exec(self, identity: ExecIdentity, started_version: Option<StartedVersion>) -> T {
        self.exec_beside(identity, started_version, &[])
    }

    /// An exec that found `cgroup_peers` in its task's cgroup.
    fn exec_beside(
        self,
        identity: ExecIdentity,
        started_version: Option<StartedVersion>,
        cgroup_peers: &[i32],
    ) -> T {
        let seq = self.events.len() as u64;
        self.push(Event::Exec(ExecRecord {
            cgroup_peers: cgroup_peers.to_vec(),
            started_version,
            ..ExecRecord::allowed(seq, identity)
        }))
    }

    /// Its executor exec'd, then the launching agent's `ex.spawned`.
    pub fn launch(self, task: &str) -> T {
        self.exec(
            ExecIdentity::Executor {
                alloc_id: "a".into(),
                task: task.into(),
            },
            None,
        )
        .task_hit(task, EX_SPAWNED)
    }

    /// Launched, and its tree exec'd with job `version` (`kill_timeout` in
    /// its spec).
    pub fn start_version(self, task: &str, version: u64, kill_timeout: Duration) -> T {
        let v = version.to_string();
        self.launch(task).exec(
            ExecIdentity::Task {
                alloc_id: "a".into(),
                task: task.into(),
            },
            Some(StartedVersion {
                env: (version > 0).then(|| v.clone()),
                meta: (version > 0).then_some(v),
                kill_timeout: Some(kill_timeout),
            }),
        )
    }

    pub fn start(self, task: &str) -> T {
        self.start_beside(task, &[])
    }

    /// Launched, and its tree exec'd while `peers` lived in its cgroup.
    pub fn start_beside(self, task: &str, peers: &[i32]) -> T {
        self.launch(task).task_exec_beside(task, peers)
    }

    /// A process of its tree exec'd.
    pub fn task_exec(self, task: &str) -> T {
        self.task_exec_beside(task, &[])
    }

    /// Its tree ran the kill signal's witness: the task got the signal.
    pub fn witness(self, task: &str) -> T {
        let seq = self.events.len() as u64;
        let tree = ExecIdentity::Task {
            alloc_id: "a".into(),
            task: task.into(),
        };
        self.push(Event::Exec(ExecRecord {
            exe: format!("/marked/root/bin/{KILL_SIGNAL_WITNESS}").into(),
            ..ExecRecord::allowed(seq, tree)
        }))
    }

    fn task_exec_beside(self, task: &str, peers: &[i32]) -> T {
        let tree = ExecIdentity::Task {
            alloc_id: "a".into(),
            task: task.into(),
        };
        self.exec_beside(tree, None, peers)
    }

    /// A task event as the engine reported it.
    pub fn task_event(self, task: &str, kind: TaskEventKind, attempt: u32) -> T {
        self.push(Event::TaskEvent {
            task: task.into(),
            kind,
            attempt,
            failed: false,
            message: String::new(),
        })
    }

    /// Its restart count as its state recorded it when an agent ended.
    pub fn restart_count(self, task: &str, restarts: u32) -> T {
        self.push(Event::RestartCount {
            task: task.into(),
            restarts,
        })
    }

    /// What of it was alive after the run.
    pub fn survivors(self, task: &str, pids: &[i32]) -> T {
        self.push(Event::Survivors {
            task: task.into(),
            pids: pids.to_vec(),
        })
    }

    /// Its executor's record of its tree's end.
    pub fn exit(self, task: &str, exit: TaskExit) -> T {
        let (code, signal) = match exit {
            TaskExit::Code(c) => (Some(c), None),
            TaskExit::Signal(s) => (None, Some(s)),
        };
        self.record(
            &scoped(Some(task), EX_TASK_EXITED),
            None,
            Some(Detail::Exit { code, signal }),
        )
        .push(Event::TaskExited {
            task: task.into(),
            exit,
        })
    }

    pub fn agent_restart(self, stop: bool) -> T {
        self.push(Event::AgentRestarted { stop })
    }

    /// The harness delivered job `version`, an in-place update.
    pub fn update_delivered(self, version: u64) -> T {
        let version = Some(Detail::JobVersion { version });
        self.record(HARNESS_UPDATE_DELIVERED, None, version)
    }

    pub fn stop(self) -> T {
        self.push(Event::StopDelivered { seq: 0 })
    }

    pub fn status(self, status: AllocStatus) -> T {
        self.push(Event::AllocStatus(status))
    }

    pub fn desired_stop(self, stop: bool) -> T {
        self.push(Event::DesiredStop(stop))
    }
}
