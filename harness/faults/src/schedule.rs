//! Schedules: which boundaries the controlled actors park at, when the stop
//! update is delivered, and in which order parked actors are let go.
//!
//! Two actors are controlled: the task runner of one task (its MAIN loop
//! boundaries) and the alloc runner's update handler (its update
//! boundaries). Everything else runs freely. A schedule is plain data and
//! round-trips through a replay token, so a failure found by exploration is
//! reproduced exactly by `taskgate replay TOKEN`.

use crate::points::{TASK_RUNNER_BOUNDARIES, UPDATE_BOUNDARIES};
use crate::rng::SplitMix64;
use std::fmt;

/// The two controlled actors, in priority terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    TaskRunner,
    Updater,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Task runner boundaries to park at, as indices into
    /// [`TASK_RUNNER_BOUNDARIES`], ascending.
    pub task_parks: Vec<usize>,
    /// Update boundaries to park at, indices into [`UPDATE_BOUNDARIES`], ascending.
    pub update_parks: Vec<usize>,
    /// The stop update is delivered once the task runner is parked at
    /// `task_parks[stop_at]`.
    pub stop_at: usize,
    /// Which actor is released first when both are parked.
    pub first: Actor,
    /// PCT change points: after this many releases, priorities swap.
    pub swaps: Vec<u32>,
}

impl Schedule {
    /// The enumerated family: the task runner parked at boundary `p` when the
    /// stop arrives, the update parked at boundary `q`; the task runner goes
    /// first and parks again once it has started (if it gets that far), so
    /// every decision it makes falls between `q` and the rest of the update.
    pub fn interleave(p: usize, q: usize) -> Schedule {
        let last = TASK_RUNNER_BOUNDARIES.len() - 1;
        let mut task_parks = vec![p];
        if p < last {
            task_parks.push(last);
        }
        Schedule {
            task_parks,
            update_parks: vec![q],
            stop_at: 0,
            first: Actor::TaskRunner,
            swaps: Vec::new(),
        }
    }

    /// Every (p, q) pair: the full enumeration.
    pub fn enumerate() -> Vec<Schedule> {
        let mut all = Vec::new();
        for p in 0..TASK_RUNNER_BOUNDARIES.len() {
            for q in 0..UPDATE_BOUNDARIES.len() {
                all.push(Schedule::interleave(p, q));
            }
        }
        all
    }

    /// A PCT-style random schedule: random park sets for both actors, a
    /// random stop delivery point, a random first actor and up to `depth`
    /// priority change points — all drawn from `seed`, so it replays exactly.
    pub fn random(seed: u64, depth: u32) -> Schedule {
        let mut rng = SplitMix64(seed);
        let mut pick_set = |n: usize| -> Vec<usize> {
            let mut set: Vec<usize> = (0..n).filter(|_| rng.draw().is_multiple_of(2)).collect();
            if set.is_empty() {
                set.push((rng.draw() % n as u64) as usize);
            }
            set
        };
        let task_parks = pick_set(TASK_RUNNER_BOUNDARIES.len());
        let update_parks = pick_set(UPDATE_BOUNDARIES.len());
        let stop_at = (rng.draw() % task_parks.len() as u64) as usize;
        let first = if rng.draw().is_multiple_of(2) {
            Actor::TaskRunner
        } else {
            Actor::Updater
        };
        let steps = (task_parks.len() + update_parks.len()) as u64;
        let mut swaps: Vec<u32> = (0..depth)
            .map(|_| (rng.draw() % steps.max(1)) as u32)
            .collect();
        swaps.sort_unstable();
        swaps.dedup();
        Schedule {
            task_parks,
            update_parks,
            stop_at,
            first,
            swaps,
        }
    }

    /// PCT's guarantee for one random schedule of bug depth `depth` (the
    /// number of ordering constraints a bug needs; `depth - 1` priority
    /// change points): it finds any given bug of that depth with
    /// probability at least 1 / (n * k^(depth-1)), for n actors and k
    /// steps. Here n = 2 and k = every boundary both actors can park at.
    /// Returns the denominator.
    pub fn pct_bound(depth: u32) -> u64 {
        let actors = 2u64;
        let steps = (TASK_RUNNER_BOUNDARIES.len() + UPDATE_BOUNDARIES.len()) as u64;
        actors * steps.pow(depth.saturating_sub(1))
    }

    /// The depth random schedules are drawn for.
    pub const PCT_DEPTH: u32 = 3;

    pub fn task_park_points(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.task_parks.iter().map(|&i| TASK_RUNNER_BOUNDARIES[i])
    }

    pub fn update_park_points(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.update_parks.iter().map(|&i| UPDATE_BOUNDARIES[i])
    }

    /// The actor released at step `step` when both are parked.
    pub fn priority_at(&self, step: u32) -> Actor {
        let swapped = self.swaps.iter().filter(|&&s| s <= step).count() % 2 == 1;
        match (self.first, swapped) {
            (a, false) => a,
            (Actor::TaskRunner, true) => Actor::Updater,
            (Actor::Updater, true) => Actor::TaskRunner,
        }
    }

    fn validate(self) -> Result<Schedule, TokenError> {
        let bad = |why: &str| Err(TokenError(why.to_string()));
        let ascending =
            |v: &[usize], n: usize| v.windows(2).all(|w| w[0] < w[1]) && v.iter().all(|&i| i < n);
        if self.task_parks.is_empty() || !ascending(&self.task_parks, TASK_RUNNER_BOUNDARIES.len())
        {
            return bad("task parks must be ascending boundary indices");
        }
        if !ascending(&self.update_parks, UPDATE_BOUNDARIES.len()) {
            return bad("update parks must be ascending boundary indices");
        }
        if self.stop_at >= self.task_parks.len() {
            return bad("stop index is past the task parks");
        }
        Ok(self)
    }
}

/// `tr=1.4/up=2/stop=0/first=tr/swaps=` — every field of the schedule.
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[usize]| {
            v.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(".")
        };
        let swaps = self
            .swaps
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(".");
        let first = match self.first {
            Actor::TaskRunner => "tr",
            Actor::Updater => "up",
        };
        write!(
            f,
            "tr={}/up={}/stop={}/first={first}/swaps={swaps}",
            list(&self.task_parks),
            list(&self.update_parks),
            self.stop_at
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad schedule: {0}")]
pub struct TokenError(pub String);

impl std::str::FromStr for Schedule {
    type Err = TokenError;

    fn from_str(s: &str) -> Result<Schedule, TokenError> {
        let err = |why: String| TokenError(why);
        let mut fields = std::collections::BTreeMap::new();
        for part in s.split('/') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| err(format!("field {part:?} has no '='")))?;
            if !["tr", "up", "stop", "first", "swaps"].contains(&k) {
                return Err(err(format!(
                    "unknown field {k:?} (the fields: tr, up, stop, first, swaps)"
                )));
            }
            if fields.insert(k, v).is_some() {
                return Err(err(format!("field {k:?} given twice")));
            }
        }
        let get = |k: &str| {
            fields
                .get(k)
                .copied()
                .ok_or_else(|| err(format!("missing field {k:?}")))
        };
        fn list<T: std::str::FromStr>(v: &str) -> Result<Vec<T>, TokenError> {
            if v.is_empty() {
                return Ok(Vec::new());
            }
            (v.split('.'))
                .map(|x| {
                    x.parse()
                        .map_err(|_| TokenError(format!("bad number {x:?}")))
                })
                .collect()
        }
        let first = match get("first")? {
            "tr" => Actor::TaskRunner,
            "up" => Actor::Updater,
            other => return Err(err(format!("first must be tr or up, not {other:?}"))),
        };
        Schedule {
            task_parks: list(get("tr")?)?,
            update_parks: list(get("up")?)?,
            stop_at: get("stop")?
                .parse()
                .map_err(|_| err("bad stop index".into()))?,
            first,
            swaps: list(get("swaps")?)?,
        }
        .validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token is typed (or pasted) by a person: a field it does not know,
    /// one given twice, or a number out of range is refused, never read as
    /// some other schedule than the one shown.
    #[test]
    fn a_token_is_read_exactly_or_refused() {
        let good = "tr=0/up=0/stop=0/first=tr/swaps=";
        assert!(good.parse::<Schedule>().is_ok());
        for bad in [
            "tr=0/up=0/stop=0/first=tr/swaps=/extra=1",
            "tr=0/tr=1/up=0/stop=0/first=tr/swaps=",
            "tr=0/up=0/stop=0/first=tr/swaps=4294967296",
            "tr=0..1/up=0/stop=0/first=tr/swaps=",
        ] {
            assert!(
                bad.parse::<Schedule>().is_err(),
                "{bad} was read as {}",
                bad.parse::<Schedule>().unwrap()
            );
        }
    }

    #[test]
    fn enumeration_covers_every_pair_once() {
        let all = Schedule::enumerate();
        assert_eq!(
            all.len(),
            TASK_RUNNER_BOUNDARIES.len() * UPDATE_BOUNDARIES.len()
        );
        let mut pairs: Vec<(usize, usize)> = all
            .iter()
            .map(|s| (s.task_parks[0], s.update_parks[0]))
            .collect();
        pairs.dedup();
        assert_eq!(pairs.len(), all.len());
    }

    #[test]
    fn the_pct_bound_is_one_over_n_times_k_to_the_depth_minus_one() {
        assert_eq!(Schedule::pct_bound(1), 2);
        assert_eq!(Schedule::pct_bound(3), 2 * 9 * 9);
    }

    #[test]
    fn tokens_round_trip() {
        for schedule in Schedule::enumerate()
            .into_iter()
            .chain((0..200).map(|seed| Schedule::random(seed, 2)))
        {
            let token = schedule.to_string();
            assert_eq!(token.parse::<Schedule>(), Ok(schedule), "token {token}");
        }
    }

    #[test]
    fn random_schedules_depend_only_on_the_seed() {
        assert_eq!(Schedule::random(7, 2), Schedule::random(7, 2));
        let distinct: std::collections::BTreeSet<String> = (0..50)
            .map(|s| Schedule::random(s, 2).to_string())
            .collect();
        assert!(
            distinct.len() > 10,
            "only {} distinct schedules from 50 seeds",
            distinct.len()
        );
    }

    #[test]
    fn bad_tokens_are_rejected_with_a_reason() {
        for bad in [
            "",
            "tr=9/up=0/stop=0/first=tr/swaps=",
            "tr=1/up=0/stop=1/first=tr/swaps=",
            "tr=2.1/up=/stop=0/first=tr/swaps=",
            "tr=1/up=0/stop=0/first=me/swaps=",
        ] {
            assert!(bad.parse::<Schedule>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn swaps_flip_priority() {
        let mut s = Schedule::interleave(0, 0);
        s.swaps = vec![1];
        assert_eq!(s.priority_at(0), Actor::TaskRunner);
        assert_eq!(s.priority_at(1), Actor::Updater);
    }
}
