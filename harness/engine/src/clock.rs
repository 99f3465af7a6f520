//! The engine's sense of time. Restart intervals and delays are measured on
//! a [`Clock`], so a test can run them on virtual time: a verdict about
//! restart windows must never depend on how fast the host happens to be.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Time since the clock's epoch; never goes backwards. A reading one
    /// agent persisted (a restart window, when a restart delay ends) is
    /// measured on by the next agent's clock.
    fn now(&self) -> Duration;
    /// Resolves once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Sleep;
}

/// The host's clock: the wall clock's reading when it was made, plus the
/// monotonic time since. It never goes backwards in one agent, and two
/// agents read an instant alike (as far as the wall clock is right), so
/// what one persisted, the next measures on. A persisted reading that lies
/// ahead of a new agent's (the wall clock was set back) is read as now.
#[derive(Debug)]
pub struct SystemClock {
    epoch: Instant,
    at_epoch: Duration,
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock {
            epoch: Instant::now(),
            at_epoch: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.at_epoch + self.epoch.elapsed()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Virtual time for tests: it stands still except while a task sleeps, and
/// a sleep moves it forward by exactly its duration once first awaited,
/// and returns at once. A sleep never awaited (a `select!` that something
/// else ended first) does not move it. Sleeps of concurrent tasks add up,
/// so it suits one timeline at a time (one restarting task), which is what
/// interval tests need.
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: Arc<Mutex<Duration>>,
}

impl VirtualClock {
    /// Moves time forward by `duration` without anybody sleeping.
    pub fn advance(&self, duration: Duration) {
        advance(&self.now, duration);
    }
}

fn advance(now: &Mutex<Duration>, duration: Duration) {
    *crate::lock(now) += duration;
}

impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        *crate::lock(&self.now)
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let now = Arc::clone(&self.now);
        Box::pin(async move {
            advance(&now, duration);
            tokio::task::yield_now().await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn virtual_time_moves_only_by_sleeps_and_advances() {
        let clock = VirtualClock::default();
        assert_eq!(clock.now(), Duration::ZERO);
        clock.sleep(Duration::from_secs(90)).await;
        assert_eq!(clock.now(), Duration::from_secs(90));
        clock.advance(Duration::from_millis(5));
        assert_eq!(clock.now(), Duration::from_millis(90_005));
    }

    /// A restart delay cut short before it began waiting takes no time.
    #[tokio::test]
    async fn a_sleep_never_awaited_takes_no_virtual_time() {
        let clock = VirtualClock::default();
        tokio::select! {
            biased;
            () = std::future::ready(()) => {}
            () = clock.sleep(Duration::from_secs(90)) => unreachable!("the ready branch is polled first"),
        }
        assert_eq!(clock.now(), Duration::ZERO);
    }

    #[tokio::test]
    async fn system_time_never_goes_backwards() {
        let clock = SystemClock::default();
        let a = clock.now();
        clock.sleep(Duration::from_millis(1)).await;
        assert!(clock.now() > a);
    }

    /// A second agent's clock reads what the first persisted as past.
    #[tokio::test]
    async fn a_later_system_clock_reads_on_from_an_earlier_one() {
        let first = SystemClock::default();
        let persisted = first.now();
        first.sleep(Duration::from_millis(5)).await;
        let second = SystemClock::default();
        let since = second.now().saturating_sub(persisted);
        assert!(since >= Duration::from_millis(4), "{since:?}");
        assert!(since < Duration::from_secs(60), "{since:?}");
    }
}
