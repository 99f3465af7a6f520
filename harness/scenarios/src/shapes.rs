//! The alloc's tasks as the oracle needs to know them, from the scenario's
//! job and, once the run named it, the alloc's id (its tasks' restart
//! jitter is drawn from it and the harness's seed).

use crate::model::Scenario;
use crate::outcome::RESTART_SEED;
use taskgate_engine::jobspec::RestartMode;
use taskgate_oracle::policy::restart_wait;
use taskgate_oracle::{TaskRole, TaskShape};

/// How many of a task's restart waits the harness works out: more than
/// any scenario's policy grants in a run.
const WAITS_KNOWN: u32 = 32;

/// The alloc's tasks as the invariants need to know them; `alloc_id`, once
/// known, gives each task's restart waits (their jitter is drawn from it
/// and the harness's seed).
pub fn shapes(scenario: &Scenario, alloc_id: Option<&str>) -> Vec<TaskShape> {
    scenario
        .tasks()
        .iter()
        .map(|t| {
            let sidecar = t.is_sidecar();
            let role = if t.is_poststop() {
                TaskRole::Poststop
            } else if t.is_prestart() {
                TaskRole::Prestart { sidecar }
            } else if t.is_poststart() {
                TaskRole::Poststart { sidecar }
            } else {
                TaskRole::Main { leader: t.leader }
            };
            let restart_waits = alloc_id.map_or_else(Vec::new, |alloc_id| {
                (0..WAITS_KNOWN)
                    .map(|n| restart_wait(RESTART_SEED, alloc_id, &t.name, t.restart.delay, n))
                    .collect()
            });
            TaskShape {
                restarts_on_success: scenario.job.job_type.restarts_on_success(t),
                restarts_forever: t.restart.mode == RestartMode::Delay,
                restart_interval: t.restart.interval,
                restart_waits,
                shutdown_delay: t.shutdown_delay,
                kill_timeout: t.kill_timeout,
                kill_signal: t.kill_signal.signal() as i32,
                reports_kill_signal: crate::lab::reports_kill_signal(t),
                ..TaskShape::new(&t.name, role, t.restart.attempts)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use taskgate_engine::Jitter;

    /// The restart waits the oracle expects are the engine's: the oracle
    /// restates Nomad's jitter rule, the engine draws by it.
    #[test]
    fn the_oracles_restart_waits_are_the_engines() {
        for (alloc, task, delay) in [
            (
                "82dc88f4-4363-38b5-2838-0874b6124afe",
                "web",
                Duration::from_secs(15),
            ),
            ("a", "proxy", Duration::from_millis(10)),
        ] {
            let jitter = Jitter::new(RESTART_SEED, alloc, task);
            for n in 0..64 {
                assert_eq!(
                    restart_wait(RESTART_SEED, alloc, task, delay, n),
                    jitter.delay(delay, n),
                    "{alloc}/{task} restart {n}"
                );
            }
        }
    }
}
