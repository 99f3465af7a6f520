//! Nomad's restart tracker: how many restarts an `interval` allows, and what
//! `mode` does once they are used up.

use crate::jobspec::{RestartMode, RestartPolicy};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartDecision {
    Restart { delay: Duration, reason: String },
    NotRestarting { reason: String },
}

#[derive(Debug)]
/// Times are readings of the engine's [`crate::clock::Clock`].
pub struct RestartTracker {
    policy: RestartPolicy,
    count: u32,
    window_start: Duration,
}

impl RestartTracker {
    pub fn new(policy: RestartPolicy, now: Duration) -> Self {
        RestartTracker {
            policy,
            count: 0,
            window_start: now,
        }
    }

    /// A tracker that already counted `restarts` (restored from the state
    /// database): a restore does not grant the policy's attempts afresh.
    pub fn resumed(policy: RestartPolicy, now: Duration, restarts: u32) -> Self {
        RestartTracker {
            count: restarts,
            ..RestartTracker::new(policy, now)
        }
    }

    /// The task exited on its own. Batch semantics: success is completion.
    pub fn on_exit(&mut self, success: bool, now: Duration) -> RestartDecision {
        if success {
            return RestartDecision::NotRestarting {
                reason: "task completed successfully".into(),
            };
        }
        self.next(now, "task exited unsuccessfully")
    }

    /// Setting up or starting the task failed.
    pub fn on_start_error(&mut self, recoverable: bool, now: Duration) -> RestartDecision {
        if !recoverable {
            return RestartDecision::NotRestarting {
                reason: "Error was unrecoverable".into(),
            };
        }
        self.next(now, "start failed")
    }

    fn next(&mut self, now: Duration, why: &str) -> RestartDecision {
        if now.saturating_sub(self.window_start) >= self.policy.interval {
            self.window_start = now;
            self.count = 0;
        }
        if self.count < self.policy.attempts {
            self.count += 1;
            return RestartDecision::Restart {
                delay: self.policy.delay,
                reason: format!("{why}; restart {} of {}", self.count, self.policy.attempts),
            };
        }
        match self.policy.mode {
            RestartMode::Fail => RestartDecision::NotRestarting {
                reason: format!(
                    "Exceeded allowed attempts {} in interval {:?}",
                    self.policy.attempts, self.policy.interval
                ),
            },
            RestartMode::Delay => {
                // Wait out exactly the rest of the interval, as Nomad does
                // (not the restart delay on top, nor instead), then start
                // a fresh window.
                let left = self
                    .policy
                    .interval
                    .saturating_sub(now.saturating_sub(self.window_start));
                self.window_start = now + left;
                self.count = 1;
                RestartDecision::Restart {
                    delay: left,
                    reason: format!("{why}; attempts exhausted, waiting out the interval"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn policy(attempts: u32, mode: RestartMode) -> RestartPolicy {
        RestartPolicy {
            attempts,
            interval: Duration::from_secs(60),
            delay: Duration::from_millis(10),
            mode,
        }
    }

    #[test]
    fn success_is_completion() {
        let now = Duration::ZERO;
        let mut t = RestartTracker::new(policy(3, RestartMode::Fail), now);
        assert!(matches!(
            t.on_exit(true, now),
            RestartDecision::NotRestarting { .. }
        ));
    }

    #[rstest]
    #[case(0)]
    #[case(1)]
    #[case(3)]
    fn fail_mode_allows_exactly_attempts(#[case] attempts: u32) {
        let now = Duration::ZERO;
        let mut t = RestartTracker::new(policy(attempts, RestartMode::Fail), now);
        for _ in 0..attempts {
            assert!(matches!(
                t.on_exit(false, now),
                RestartDecision::Restart { .. }
            ));
        }
        assert!(matches!(
            t.on_exit(false, now),
            RestartDecision::NotRestarting { .. }
        ));
    }

    #[test]
    fn delay_mode_waits_out_the_interval() {
        let now = Duration::ZERO;
        let mut t = RestartTracker::new(policy(1, RestartMode::Delay), now);
        assert!(matches!(
            t.on_exit(false, now),
            RestartDecision::Restart { .. }
        ));
        let later = now + Duration::from_secs(20);
        match t.on_exit(false, later) {
            RestartDecision::Restart { delay, .. } => assert_eq!(delay, Duration::from_secs(40)),
            other => panic!("expected a delayed restart, got {other:?}"),
        }
    }

    /// Nomad waits the rest of the interval, even when it is shorter than
    /// the restart delay (this tracker used to wait the delay instead).
    #[test]
    fn delay_mode_waits_exactly_the_rest_of_the_interval() {
        let now = Duration::ZERO;
        let mut t = RestartTracker::new(policy(1, RestartMode::Delay), now);
        t.on_exit(false, now);
        let almost = now + Duration::from_millis(59_995);
        match t.on_exit(false, almost) {
            RestartDecision::Restart { delay, .. } => {
                assert_eq!(delay, Duration::from_millis(5))
            }
            other => panic!("expected a delayed restart, got {other:?}"),
        }
    }

    #[test]
    fn window_resets_after_interval() {
        let now = Duration::ZERO;
        let mut t = RestartTracker::new(policy(1, RestartMode::Fail), now);
        assert!(matches!(
            t.on_exit(false, now),
            RestartDecision::Restart { .. }
        ));
        let later = now + Duration::from_secs(61);
        assert!(matches!(
            t.on_exit(false, later),
            RestartDecision::Restart { .. }
        ));
    }

    #[test]
    fn unrecoverable_start_errors_never_restart() {
        let now = Duration::ZERO;
        let mut t = RestartTracker::new(policy(5, RestartMode::Fail), now);
        assert!(matches!(
            t.on_start_error(false, now),
            RestartDecision::NotRestarting { .. }
        ));
    }
}
