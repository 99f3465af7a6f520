//! How long the harness waits before it calls something hung.
//!
//! No verdict may depend on how fast the machine is. Every wait in the
//! harness ends on an event; a timeout only turns a real hang into a
//! failure. Two things keep that true on a slow machine (a software-emulated
//! qemu guest, a CPU-starved CI runner):
//!
//! - waits are *idle* windows that restart on progress (a new fault hit, a
//!   new line of output), so a slow engine that keeps moving never times out;
//! - every window is scaled by [`speed_factor`], measured once per process
//!   against the machine the figures were taken on.
//!
//! Progress alone cannot tell a slow engine from a livelocked one (a
//! restart loop keeps reaching points for ever), so a run also has a budget
//! of [`RUNAWAY_POINTS`]: a count of its own events, not a time.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Overrides the measured factor (a positive number), e.g. for a debugger.
pub const SPEED_FACTOR_ENV: &str = "TASKGATE_SPEED_FACTOR";

/// The calibration loop's time on the reference machine (the project's
/// 2-core VM, debug build): a machine that takes longer is slower by that ratio.
const REFERENCE: Duration = Duration::from_millis(40);
const CALIBRATION_ROUNDS: u64 = 4_000_000;

/// How many times slower than the reference machine this one is (at least 1).
pub fn speed_factor() -> f64 {
    static FACTOR: OnceLock<f64> = OnceLock::new();
    *FACTOR.get_or_init(|| {
        let forced = std::env::var(SPEED_FACTOR_ENV)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|f| f.is_finite() && *f > 0.0);
        forced.unwrap_or_else(measure).max(1.0)
    })
}

/// `base` scaled by [`speed_factor`].
pub fn scaled(base: Duration) -> Duration {
    base.mul_f64(speed_factor())
}

/// The idle window after which a waiting harness step calls the engine hung.
pub fn step() -> Duration {
    scaled(Duration::from_secs(60))
}

/// How many fault points one run may reach before the harness calls it
/// runaway. The catalogue's busiest run reaches about 260; a run forty
/// times past that is looping, however fast or slow the machine.
pub const RUNAWAY_POINTS: u64 = 10_000;

/// The best of three timings of a fixed integer workload, against [`REFERENCE`].
fn measure() -> f64 {
    let best = (0..3)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(spin(CALIBRATION_ROUNDS));
            started.elapsed()
        })
        .min()
        .unwrap_or(REFERENCE);
    best.as_secs_f64() / REFERENCE.as_secs_f64()
}

fn spin(rounds: u64) -> u64 {
    let mut x = std::hint::black_box(0x9e37_79b9_7f4a_7c15u64);
    for i in 0..rounds {
        x = (x ^ (x >> 31))
            .wrapping_mul(0xbf58_476d_1ce4_e5b9)
            .wrapping_add(i);
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_factor_is_at_least_one_and_scales_windows() {
        let f = speed_factor();
        assert!(f >= 1.0, "{f}");
        assert!(scaled(Duration::from_secs(10)) >= Duration::from_secs(10));
        assert_eq!(step(), scaled(Duration::from_secs(60)));
    }
}
