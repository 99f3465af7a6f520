//! Limits are set, not inherited: whatever rlimits and `oom_score_adj` the
//! agent runs with (a unit's `LimitNOFILE=`, `OOMScoreAdjust=`), the task
//! gets the spec's values or the documented defaults.

use crate::attempt;
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use rstest::rstest;
use serial_test::serial;

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

/// KNOWN HOLE (issue 20, item 6) until every limit is set from the spec:
/// only NOFILE and CORE are, the rest come from the agent.
#[rstest]
#[serial]
#[should_panic(expected = "ESCAPED")]
fn limits_are_set_not_inherited(#[values("root", "nobody")] user: &str) {
    let odd = OddLimits::set();
    let out = attempt(
        user,
        "cat /proc/self/limits; echo oom_score_adj $(cat /proc/self/oom_score_adj)",
    );
    drop(odd);
    for (_, name, value) in ODD {
        let line = out
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in the task's limits:\n{out}"));
        assert!(
            !line.split_whitespace().any(|w| w == value.to_string()),
            "ESCAPED: the task inherited {name} = {value}: {line}"
        );
    }
    assert!(
        !out.contains(&format!("oom_score_adj {ODD_OOM_SCORE_ADJ}")),
        "ESCAPED: the task inherited oom_score_adj {ODD_OOM_SCORE_ADJ}\n{out}"
    );
}
