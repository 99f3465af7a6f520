//! The catalogue as the Rust builder made it, before scenario files: the
//! files must build exactly this.

use crate::jobs::{job, leader, lifecycle, oneshot, report_alloc, service};
use crate::model::{Expect, FaultCase, FaultPlan, Host, Kind, Restore, Scenario, Then};
use taskgate_engine::jobspec::LifecycleHook;
use taskgate_engine::ClientStatus;
use taskgate_faults::points::{
    self, hook_point, Edge, EXECUTOR_BOUNDARIES, TASK_RUNNER_BOUNDARIES, UPDATE_BOUNDARIES,
};
use taskgate_faults::{Action, Fault, PointName};

pub fn catalogue() -> Vec<Scenario> {
    let prestart_hooks = ["validate", "task_dir", "log_files", "task_env"];
    let fault = |task: Option<&str>, point: &str, action: &Action| Fault {
        point: PointName::new(task, point),
        action: action.clone(),
        nth: 1,
    };
    let single = |faults: Vec<Fault>| -> Vec<FaultCase> {
        faults
            .into_iter()
            .map(|f| FaultCase {
                faults: vec![f],
                pair: None,
            })
            .collect()
    };
    let hook_faults = |task: &str, action: Action| -> Vec<Fault> {
        prestart_hooks
            .iter()
            .flat_map(|h| [Edge::Before, Edge::After].map(|e| hook_point("prestart", e, h)))
            .map(|p| fault(Some(task), &p, &action))
            .collect()
    };
    // Every boundary a task runner passes on its way to running (the
    // leader's and the sidecar's), then every boundary of the stop update.
    let runner_boundaries = || {
        TASK_RUNNER_BOUNDARIES
            .iter()
            .chain([&points::TR_START_COMMITTED])
            .map(|p| p.to_string())
            .chain(
                prestart_hooks.iter().flat_map(|h| {
                    [Edge::Before, Edge::After].map(|e| hook_point("prestart", e, h))
                }),
            )
            .chain(
                [Edge::Before, Edge::After].map(|e| hook_point("poststart", e, "persist_handle")),
            )
    };
    let kill_boundaries: Vec<Fault> = ["leader", "sidecar"]
        .iter()
        .flat_map(|task| {
            runner_boundaries().map(move |p| fault(Some(task), &p, &Action::KillAgent))
        })
        .chain(
            UPDATE_BOUNDARIES
                .iter()
                .map(|p| fault(None, p, &Action::KillAgent)),
        )
        .collect();
    let complete = Expect {
        status: ClientStatus::Complete,
        known_violation: None,
    };
    let failed = Expect {
        status: ClientStatus::Failed,
        known_violation: None,
    };
    let scenario = |name: &str, about: &str, job, kind, expect: &Expect| Scenario {
        name: name.to_string(),
        about: about.to_string(),
        job,
        kind,
        expect: expect.clone(),
    };
    let in_process = |faults: Vec<Fault>, then| {
        Kind::Faults(FaultPlan {
            cases: single(faults),
            host: Host::InProcess,
            then,
        })
    };
    let race = |task: &str| Kind::StopRace {
        controlled: task.to_string(),
    };
    let retried = |mut task: taskgate_engine::jobspec::Task, attempts: u32| {
        task.restart.attempts = attempts;
        task
    };
    let parsed = |faults: &[&str]| -> Vec<Fault> {
        faults
            .iter()
            .map(|f| f.parse().expect("valid fault"))
            .collect()
    };
    let known = |status, bug: &str, invariant: &str| Expect {
        status,
        known_violation: Some(crate::model::KnownViolation {
            bug: bug.to_string(),
            invariant: invariant.to_string(),
        }),
    };
    let together = |faults: Vec<Fault>| vec![FaultCase { faults, pair: None }];
    vec![
        scenario(
            "b1-stale-handle",
            "an agent killed after attempt 2's executor started, before its handle was persisted",
            job("b1", vec![retried(crate::jobs::script_task("web", "echo web fails; exit 1"), 2)]),
            Kind::Faults(FaultPlan {
                cases: together(parsed(&["web:hook.poststart.before.persist_handle@2=kill"])),
                host: Host::Agent { restore: Restore::Run },
                then: Then::RunToEnd,
            }),
            &known(ClientStatus::Failed, "B1: stale executor handle on attempt 2 or later", "no process of a task outlives its executor unobserved"),
        ),
        scenario(
            "b2-finished-attempt-forgotten",
            "an agent killed after a batch task completed, before its death was recorded",
            job("b2", vec![retried(oneshot("web"), 1)]),
            Kind::Faults(FaultPlan {
                cases: together(parsed(&["web:tr.main_exited=kill"])),
                host: Host::Agent { restore: Restore::Run },
                then: Then::RunToEnd,
            }),
            &known(ClientStatus::Complete, "B2: a finished attempt is forgotten in a crash window", "no completed task or attempt is started again after a restore"),
        ),
        scenario(
            "b3-executor-death",
            "a running task's executor is SIGKILLed; the restart launches attempt 2, then the alloc stops",
            job("b3", vec![retried(service("web"), 1)]),
            Kind::Faults(FaultPlan {
                cases: together(parsed(&[
                    "web:hook.poststart.after.persist_handle=kill-executor",
                    "web:tr.after_driver_start@2=stop-alloc",
                ])),
                host: Host::InProcess,
                then: Then::RunToEnd,
            }),
            &known(ClientStatus::Complete, "B3: an executor that dies leaves its task running", "at most one live process tree per task"),
        ),
        scenario(
            "b4-two-executors",
            "an agent killed before its executor bound the socket; the restored agent launches another",
            job("b4", vec![retried(service("web"), 1)]),
            Kind::Faults(FaultPlan {
                cases: together(parsed(&[
                    "web:ex.spawned=kill",
                    "web:ex.after_cgroup=await(web:tr.after_driver_start@1)",
                ])),
                host: Host::Agent { restore: Restore::Run },
                then: Then::StopWhenRunning,
            }),
            &known(ClientStatus::Complete, "B4: two executors for one attempt", "no process of a task outlives its executor unobserved"),
        ),
        scenario(
            "sidecar-stop",
            "the report: stop while the sidecar is between its start condition and its start",
            report_alloc(),
            race("sidecar"),
            &complete,
        ),
        scenario(
            "single-task-stop",
            "the report's race with a single task",
            job("single", vec![service("web")]),
            race("web"),
            &complete,
        ),
        scenario(
            "prestart-stop",
            "stop while the main task waits behind a prestart task",
            job("prestart", vec![lifecycle(oneshot("init"), LifecycleHook::Prestart, false), service("web")]),
            race("web"),
            &complete,
        ),
        scenario(
            "poststop-after-stop",
            "stop races the leader; the poststop task must still run after the alloc is terminal",
            job(
                "poststop",
                vec![leader(service("leader")), lifecycle(oneshot("cleanup"), LifecycleHook::Poststop, false)],
            ),
            race("leader"),
            &complete,
        ),
        scenario(
            "prestart-hook-error",
            "every prestart hook boundary returns an error: the task is never exec'd, the alloc fails",
            job("hook-error", vec![service("web")]),
            in_process(hook_faults("web", Action::Error), Then::StopWhenSettled),
            &failed,
        ),
        scenario(
            "prestart-hook-panic",
            "every prestart hook boundary panics: the runner survives, the task is never exec'd",
            job("hook-panic", vec![service("web")]),
            in_process(hook_faults("web", Action::Panic), Then::StopWhenSettled),
            &failed,
        ),
        scenario(
            "slow-boundaries",
            "a slow boundary (each sidecar hook, then each update boundary during the stop)",
            report_alloc(),
            in_process(
                hook_faults("sidecar", Action::Delay(20))
                    .into_iter()
                    .chain(UPDATE_BOUNDARIES.iter().map(|p| fault(None, p, &Action::Delay(20))))
                    .collect(),
                Then::StopWhenRunning,
            ),
            &complete,
        ),
        scenario(
            "executor-fault",
            "the executor fails after its cgroup, after its mounts, before exec: nothing is leaked",
            job("executor-fault", vec![service("web")]),
            in_process(
                EXECUTOR_BOUNDARIES.iter().map(|p| fault(Some("web"), p, &Action::Error)).collect(),
                Then::StopWhenSettled,
            ),
            &failed,
        ),
        scenario(
            "agent-kill",
            "the agent is SIGKILLed at a boundary and restarted: no task lost, none started twice",
            report_alloc(),
            Kind::Faults(FaultPlan {
                cases: single(kill_boundaries),
                host: Host::Agent { restore: Restore::Stop },
                then: Then::StopWhenRunning,
            }),
            &complete,
        ),
    ]
}
