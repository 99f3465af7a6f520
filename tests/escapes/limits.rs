//! Limits are set, not inherited: whatever rlimits and `oom_score_adj` the
//! agent runs with (a unit's `LimitNOFILE=`, `OOMScoreAdjust=`), the task
//! gets the spec's values or the documented defaults.

use crate::attempt;
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use rstest::rstest;
use serial_test::serial;
use taskgate_executor::{Rlimits, DEFAULT_OOM_SCORE_ADJ};

/// Odd values the launching process runs with while the task starts.
/// Soft limits only, under any hard limit: lowering a hard limit could not
/// be undone by a root without CAP_SYS_RESOURCE (some CI sandboxes).
const ODD: [(Resource, &str, u64); 5] = [
    (Resource::RLIMIT_MSGQUEUE, "Max msgqueue size", 12345),
    (Resource::RLIMIT_SIGPENDING, "Max pending signals", 777),
    (Resource::RLIMIT_LOCKS, "Max file locks", 77),
    (Resource::RLIMIT_RTTIME, "Max realtime timeout", 4242),
    (Resource::RLIMIT_FSIZE, "Max file size", 7_777_777),
];
const ODD_OOM_SCORE_ADJ: &str = "123";

/// Sets the odd values on this process for its life, and puts back what
/// it read when dropped.
struct OddLimits {
    rlimits: Vec<(Resource, (u64, u64))>,
    oom_score_adj: String,
}

impl OddLimits {
    fn set() -> OddLimits {
        let rlimits = ODD
            .iter()
            .map(|&(res, _, value)| {
                let was = getrlimit(res).unwrap();
                assert!(
                    value <= was.1,
                    "{res:?}: {value} is over the hard limit {}",
                    was.1
                );
                setrlimit(res, value, was.1).unwrap();
                (res, was)
            })
            .collect();
        let oom_score_adj = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap();
        std::fs::write("/proc/self/oom_score_adj", ODD_OOM_SCORE_ADJ).unwrap();
        OddLimits {
            rlimits,
            oom_score_adj,
        }
    }
}

impl Drop for OddLimits {
    fn drop(&mut self) {
        for &(res, (soft, hard)) in &self.rlimits {
            setrlimit(res, soft, hard).unwrap();
        }
        std::fs::write("/proc/self/oom_score_adj", self.oom_score_adj.trim()).unwrap();
    }
}

/// The task's limits are the documented defaults, not the odd ones the
/// launching process ran with; so is its `oom_score_adj`.
#[rstest]
#[serial]
fn limits_are_set_not_inherited(#[values("root", "nobody")] user: &str) {
    let odd = OddLimits::set();
    let out = attempt(
        user,
        "cat /proc/self/limits; echo oom_score_adj $(cat /proc/self/oom_score_adj)",
    );
    drop(odd);
    let defaults = Rlimits::default().each();
    for (res, name, value) in ODD {
        let line = out
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in the task's limits:\n{out}"));
        // `Max file size   unlimited   unlimited   bytes`: columns apart by 2+ spaces.
        let soft = line
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .nth(1);
        assert_ne!(
            soft,
            Some(value.to_string().as_str()),
            "ESCAPED: the task inherited {name} = {value}: {line}"
        );
        let (_, default) = defaults.iter().find(|(r, _)| *r == res).unwrap();
        let want = match default.soft {
            u64::MAX => "unlimited".to_string(),
            n => n.to_string(),
        };
        assert_eq!(soft, Some(want.as_str()), "{name}: {line}");
    }
    assert!(
        out.contains(&format!("oom_score_adj {DEFAULT_OOM_SCORE_ADJ}\n")),
        "ESCAPED: the task's oom_score_adj is not the default {DEFAULT_OOM_SCORE_ADJ}\n{out}"
    );
}
