//! Small jobs built in code, for the tests. Workloads use
//! only busybox applets, so they run in the lab's minimal root.

use std::time::Duration;
use taskgate_engine::jobspec::{
    Group, Job, JobType, Lifecycle, LifecycleHook, RestartMode, RestartPolicy, Task,
};

/// A `/bin/sh -c script` task with a short grace period and no restarts:
/// a failure in a scenario must show, not be retried away.
pub fn script_task(name: &str, script: &str) -> Task {
    let mut task = Task::new(name, "/bin/sh", vec!["-c".into(), script.into()]);
    // Short: a task killed before its shell set the trap ignores SIGINT as
    // PID 1, and a run should not idle through a long grace period.
    task.kill_timeout = Duration::from_millis(250);
    task.resources.memory_mb = 32;
    task.restart = RestartPolicy {
        attempts: 0,
        interval: Duration::from_secs(60),
        delay: Duration::from_millis(10),
        mode: RestartMode::Fail,
    };
    task
}

/// A long-running task that exits promptly on SIGINT/SIGTERM. The sleep is
/// the task's workload, not synchronisation: the trap ends it on stop.
pub fn service(name: &str) -> Task {
    script_task(
        name,
        &format!("trap 'exit 0' INT TERM; echo {name} up; sleep 3600 & wait"),
    )
}

pub fn leader(mut task: Task) -> Task {
    task.leader = true;
    task
}

pub fn lifecycle(mut task: Task, hook: LifecycleHook, sidecar: bool) -> Task {
    task.lifecycle = Some(Lifecycle { hook, sidecar });
    task
}

/// A batch job of one group, `g`: a task's exit 0 is its end.
pub fn job(name: &str, tasks: Vec<Task>) -> Job {
    Job {
        name: name.to_string(),
        version: 0,
        job_type: JobType::Batch,
        groups: vec![Group {
            name: "g".into(),
            tasks,
        }],
    }
}

/// The report's alloc: a leader and a poststart sidecar.
pub fn report_alloc() -> Job {
    job(
        "report",
        vec![
            leader(service("leader")),
            lifecycle(service("sidecar"), LifecycleHook::Poststart, true),
        ],
    )
}
