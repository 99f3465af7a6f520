//! Recorded histories with times, for the table tests of the checks that
//! measure timers ([`crate::policy`], [`crate::liveness`],
//! [`crate::kills`]): each record is stamped with the clock as last set.

use crate::gate::{Answer, ExecRecord};
use crate::identity::ExecIdentity;
use crate::invariants::{AllocStatus, Event, TaskExit};
use crate::updates::StartedVersion;
use std::time::Duration;
use taskgate_faults::points::{AR_STARTED, EX_SPAWNED, EX_TASK_EXITED};
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

    pub fn fault(self, task: &str, point: &str, action: Action) -> T {
        self.record(&scoped(Some(task), point), Some(action), None)
    }

    fn exec(self, identity: ExecIdentity, started_version: Option<StartedVersion>) -> T {
        let seq = self.events.len() as u64;
        self.push(Event::Exec(ExecRecord {
            seq,
            pid: 100 + seq as i32,
            exe: "/marked/bin/busybox".into(),
            identity,
            verdict: Answer::Allow,
            reason: String::new(),
            judged: true,
            cgroup_peers: Vec::new(),
            executor_peers: Vec::new(),
            started_version,
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
        self.launch(task).exec(
            ExecIdentity::Task {
                alloc_id: "a".into(),
                task: task.into(),
            },
            None,
        )
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
