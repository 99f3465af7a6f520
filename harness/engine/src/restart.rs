//! Nomad's restart tracker: how many restarts an `interval` allows, and what
//! `mode` does once they are used up.

use crate::job::{RestartMode, RestartPolicy};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use taskgate_faults::rng::SplitMix64;
use taskgate_faults::seeded::SeededBug;

/// The restart window a tracker is in, persisted with the task: a restored
/// agent (or a task brought back by a restart of all tasks) goes on in the
/// same window, neither granting the policy afresh nor counting restarts
/// of an interval long past (bug 3 of issue 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartWindow {
    /// When it began, on the engine's clock.
    pub start: Duration,
    /// The restarts counted in it.
    pub count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartDecision {
    Restart { delay: Duration, reason: String },
    NotRestarting { reason: String },
}

/// Nomad's restart jitter: a restart within the policy waits its delay
/// plus up to a quarter more, so tasks that failed together do not restart
/// together. Each draw is a function of the engine's seed, the task and the
/// restart's number, so a replay under the same seed waits exactly as the
/// run it replays, across agent restarts too.
#[derive(Debug, Clone, Copy)]
pub struct Jitter {
    stream: u64,
}

impl Jitter {
    pub fn new(seed: u64, alloc_id: &str, task: &str) -> Jitter {
        Jitter {
            stream: SplitMix64::stream(seed, &format!("{alloc_id}/{task}")).0,
        }
    }

    /// The wait before the task's `restart`th restart (counted from 0 over
    /// its whole life): `delay` plus a quarter of a draw below `delay`.
    pub fn delay(self, delay: Duration, restart: u32) -> Duration {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX).max(1);
        let draw = SplitMix64(self.stream ^ u64::from(restart)).draw() % nanos;
        delay + Duration::from_nanos(draw / 4)
    }
}

#[derive(Debug, Clone)]
/// Times are readings of the engine's [`crate::clock::Clock`].
pub struct RestartTracker {
    policy: RestartPolicy,
    /// Nomad's `onSuccess`: a successful exit is restarted too (see
    /// [`crate::job::JobType::restarts_on_success`]).
    on_success: bool,
    jitter: Jitter,
    /// Restarts within the current interval.
    count: u32,
    window_start: Duration,
    /// Restarts over the task's life: which jitter draw comes next.
    restarts: u32,
}

impl RestartTracker {
    pub fn new(policy: RestartPolicy, on_success: bool, jitter: Jitter, now: Duration) -> Self {
        RestartTracker {
            policy,
            on_success,
            jitter,
            count: 0,
            window_start: now,
            restarts: 0,
        }
    }

    /// This tracker, having already counted `restarts` over the task's life
    /// and `window`'s in the current interval (as persisted): a restore
    /// does not grant the policy's attempts afresh, nor count restarts of
    /// an interval that has passed, nor draw the same jitter twice. A task
    /// persisted before windows were has its restarts counted in a window
    /// beginning now. A window begins at most `ahead` after now: the rest
    /// of a restart delay under way, at whose end a delay-mode policy
    /// begins its next window; one further ahead was persisted before the
    /// clock was set back, and is read as beginning then.
    pub fn resumed(self, restarts: u32, window: Option<RestartWindow>, ahead: Duration) -> Self {
        let window = window.unwrap_or(RestartWindow {
            start: self.window_start,
            count: restarts,
        });
        let start = window.start.min(self.window_start + ahead);
        RestartTracker {
            count: window.count,
            window_start: start,
            restarts,
            ..self
        }
    }

    /// A restart delay ended `now`, before its time (a user restart cut it
    /// short): a window that was to begin at its end (delay mode, waiting
    /// for its next window) begins now, when the wait did end.
    pub fn delay_cut_short(&mut self, now: Duration) {
        self.window_start = self.window_start.min(now);
    }

    /// A restart granted that never came (a kill ended its delay) counts
    /// for nothing: the tracker is back in `before`, the window it was in
    /// when it granted it, with one restart fewer over the task's life.
    pub fn take_back(&mut self, before: RestartWindow) {
        self.window_start = before.start;
        self.count = before.count;
        self.restarts = self.restarts.saturating_sub(1);
    }

    /// The window this tracker is in, to persist.
    pub fn window(&self) -> RestartWindow {
        RestartWindow {
            start: self.window_start,
            count: self.count,
        }
    }

    /// An in-place update's policy: taken before a restart decision, it
    /// judges the exit at hand and those after; the restarts already
    /// counted stay counted.
    pub fn set_policy(&mut self, policy: RestartPolicy) {
        self.policy = policy;
    }

    /// Whether the task stopping after an exit means it failed: a task that
    /// is restarted on success stops only when its policy gives up.
    pub fn stopping_fails(&self, success: bool) -> bool {
        !success || self.on_success
    }

    /// The task exited on its own. A success is completion unless the task
    /// is restarted on success, when it counts as a restart like a failure.
    pub fn on_exit(&mut self, success: bool, now: Duration) -> RestartDecision {
        let on_success = self.on_success || SeededBug::RestartsCompletedTask.active();
        match (success, on_success) {
            (true, false) => RestartDecision::NotRestarting {
                reason: "task completed successfully".into(),
            },
            (true, true) => self.next(now, "task exited successfully"),
            (false, _) => self.next(now, "task exited unsuccessfully"),
        }
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
            let delay = self.jitter.delay(self.policy.delay, self.restarts);
            self.restarts += 1;
            return RestartDecision::Restart {
                delay,
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
                self.restarts += 1;
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
    use crate::state::TaskRecord;
    use rstest::rstest;

    fn policy(attempts: u32, mode: RestartMode) -> RestartPolicy {
        RestartPolicy {
            attempts,
            interval: Duration::from_secs(60),
            delay: Duration::from_millis(10),
            mode,
        }
    }

    /// A batch task's tracker (a success is completion).
    fn tracker(attempts: u32, mode: RestartMode, now: Duration) -> RestartTracker {
        RestartTracker::new(policy(attempts, mode), false, Jitter::new(7, "a", "t"), now)
    }

    /// The window of a tracker that restarted once, at `now`.
    fn fresh_window(jitter: &Jitter, now: Duration) -> RestartWindow {
        let mut t = RestartTracker::new(policy(5, RestartMode::Fail), false, *jitter, now);
        t.on_exit(false, now);
        t.window()
    }

    /// Bug 3: a restore goes on in the persisted window. One restart per
    /// minute, restarted once at 0: a failure an hour later is restarted
    /// (the window has passed), one a second later is not.
    #[rstest]
    #[case::an_hour_later(Duration::from_secs(3600), true)]
    #[case::a_second_later(Duration::from_secs(1), false)]
    fn a_restored_tracker_goes_on_in_its_window(#[case] later: Duration, #[case] restarts: bool) {
        let start = Duration::ZERO;
        let mut first = tracker(1, RestartMode::Fail, start);
        assert!(matches!(
            first.on_exit(false, start),
            RestartDecision::Restart { .. }
        ));
        let restored = tracker(1, RestartMode::Fail, start + later)
            .resumed(1, Some(first.window()), Duration::ZERO)
            .on_exit(false, start + later);
        assert_eq!(
            matches!(restored, RestartDecision::Restart { .. }),
            restarts,
            "{restored:?}"
        );
    }

    /// The wall clock set back between two agents (NTP, a VM snapshot):
    /// what the dead agent persisted lies ahead of this one's clock, and is
    /// read as now. A window ahead begins now, and a restart delay ahead
    /// lasts at most the wait chosen for it, not the clock's step too.
    #[test]
    fn readings_persisted_ahead_of_the_clock_are_read_as_now() {
        let now = Duration::from_secs(10);
        let hour = Duration::from_secs(3600);
        let mut first = tracker(1, RestartMode::Fail, now + hour);
        let decision = first.on_exit(false, now + hour);
        let RestartDecision::Restart { delay, .. } = decision else {
            panic!("{decision:?}")
        };
        let record = TaskRecord {
            restart_due: Some(now + hour + delay),
            restart_wait: Some(delay),
            restart_window: Some(first.window()),
            ..TaskRecord::new("t")
        };
        let left = record.rest_of_restart_delay(now).unwrap();
        let ahead = record.window_ahead(now);
        let mut restored =
            tracker(1, RestartMode::Fail, now).resumed(1, Some(first.window()), ahead);
        // An interval after now, and less than the delay after it: a
        // window kept even the delay's length ahead would not reset yet.
        let a_minute_on = restored.on_exit(false, now + Duration::from_secs(60) + left / 2);
        assert!(
            left <= delay && matches!(a_minute_on, RestartDecision::Restart { .. }),
            "{left:?} left of a {delay:?} delay; {a_minute_on:?} a minute on"
        );
    }

    /// A delay-mode policy that used up its attempts waits out the rest of
    /// its interval, its next window beginning then (ahead of now on
    /// purpose): a restored agent waits out that rest too, and keeps that
    /// window, granting no attempt before it.
    #[test]
    fn a_restored_delay_mode_wait_for_the_interval_is_waited_in_full() {
        let start = Duration::ZERO;
        let mut first = tracker(1, RestartMode::Delay, start);
        let _ = first.on_exit(false, start);
        let second = start + Duration::from_secs(1);
        let decision = first.on_exit(false, second);
        let RestartDecision::Restart { delay: wait, .. } = decision else {
            panic!("{decision:?}")
        };
        assert_eq!(wait, Duration::from_secs(59));
        let record = TaskRecord {
            restart_due: Some(second + wait),
            restart_wait: Some(wait),
            restart_window: Some(first.window()),
            ..TaskRecord::new("t")
        };
        let restored_at = second + Duration::from_secs(1);
        let left = record.rest_of_restart_delay(restored_at).unwrap();
        assert_eq!(left, Duration::from_secs(58));
        let ahead = record.window_ahead(restored_at);
        let restored =
            tracker(1, RestartMode::Delay, restored_at).resumed(2, Some(first.window()), ahead);
        assert_eq!(restored.window(), first.window());
    }

    /// A record from before windows were persisted: its restarts count in
    /// a window beginning at the restore.
    #[test]
    fn a_record_without_a_window_counts_its_restarts_from_now() {
        let now = Duration::from_secs(3600);
        let mut t = tracker(1, RestartMode::Fail, now).resumed(1, None, Duration::ZERO);
        assert_eq!(
            t.window(),
            RestartWindow {
                start: now,
                count: 1
            }
        );
        assert!(matches!(
            t.on_exit(false, now),
            RestartDecision::NotRestarting { .. }
        ));
    }

    #[test]
    fn jitter_adds_up_to_a_quarter_and_replays_exactly() {
        let delay = Duration::from_secs(15);
        let jitter = Jitter::new(7, "alloc", "web");
        let draws: Vec<Duration> = (0..200).map(|n| jitter.delay(delay, n)).collect();
        assert!(draws.iter().all(|&d| d >= delay && d < delay * 5 / 4));
        assert!(draws.iter().any(|&d| d > delay * 9 / 8), "{draws:?}");
        assert!(draws.iter().any(|&d| d < delay * 9 / 8), "{draws:?}");
        let again: Vec<Duration> = (0..200).map(|n| jitter.delay(delay, n)).collect();
        assert_eq!(draws, again, "the same seed must draw the same waits");
        let other = Jitter::new(8, "alloc", "web").delay(delay, 0);
        let beside = Jitter::new(7, "alloc", "db").delay(delay, 0);
        assert!(other != draws[0] || beside != draws[0]);
    }

    #[test]
    fn restarts_draw_jitter_in_turn_across_a_restore() {
        let now = Duration::ZERO;
        let jitter = Jitter::new(3, "a", "t");
        let mut fresh = tracker(5, RestartMode::Fail, now);
        fresh.jitter = jitter;
        fresh.on_exit(false, now);
        let second = fresh.on_exit(false, now);
        let restored = RestartTracker::new(policy(5, RestartMode::Fail), false, jitter, now)
            .resumed(1, Some(fresh_window(&jitter, now)), Duration::ZERO)
            .on_exit(false, now);
        assert_eq!(second, restored);
        match second {
            RestartDecision::Restart { delay, .. } => {
                assert_eq!(delay, jitter.delay(Duration::from_millis(10), 1))
            }
            other => panic!("expected a restart, got {other:?}"),
        }
    }

    /// Nomad's `onSuccess`: a service task's exit 0 is restarted, and
    /// counts against the policy like a failure; once it gives up the task
    /// has failed.
    #[test]
    fn a_success_restarts_when_the_task_restarts_on_success() {
        let now = Duration::ZERO;
        let mut t = RestartTracker::new(
            policy(1, RestartMode::Fail),
            true,
            Jitter::new(7, "a", "t"),
            now,
        );
        assert!(matches!(
            t.on_exit(true, now),
            RestartDecision::Restart { .. }
        ));
        assert!(matches!(
            t.on_exit(true, now),
            RestartDecision::NotRestarting { .. }
        ));
        assert!(t.stopping_fails(true));
        assert!(!tracker(1, RestartMode::Fail, now).stopping_fails(true));
        assert!(tracker(1, RestartMode::Fail, now).stopping_fails(false));
    }

    #[test]
    fn success_is_completion() {
        let now = Duration::ZERO;
        let mut t = tracker(3, RestartMode::Fail, now);
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
        let mut t = tracker(attempts, RestartMode::Fail, now);
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
        let mut t = tracker(1, RestartMode::Delay, now);
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

    /// A wait out of the interval is a restart of the task's life like
    /// any other: the restart after it draws the jitter that follows.
    #[test]
    fn a_wait_out_of_the_interval_counts_for_the_jitter() {
        let now = Duration::ZERO;
        let mut t = tracker(2, RestartMode::Delay, now);
        t.on_exit(false, now);
        t.on_exit(false, now);
        // Its third restart: attempts exhausted, the interval waited out.
        t.on_exit(false, now);
        let jitter = |n| Jitter::new(7, "a", "t").delay(Duration::from_millis(10), n);
        assert!(
            jitter(3) != jitter(2) && jitter(3) != jitter(1),
            "the seed tells them apart"
        );
        match t.on_exit(false, now + Duration::from_secs(60)) {
            RestartDecision::Restart { delay, .. } => assert_eq!(delay, jitter(3)),
            other => panic!("expected a restart, got {other:?}"),
        }
    }

    /// Nomad waits the rest of the interval, even when it is shorter than
    /// the restart delay (this tracker used to wait the delay instead).
    #[test]
    fn delay_mode_waits_exactly_the_rest_of_the_interval() {
        let now = Duration::ZERO;
        let mut t = tracker(1, RestartMode::Delay, now);
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
        let mut t = tracker(1, RestartMode::Fail, now);
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
        let mut t = tracker(5, RestartMode::Fail, now);
        assert!(matches!(
            t.on_start_error(false, now),
            RestartDecision::NotRestarting { .. }
        ));
    }
}
