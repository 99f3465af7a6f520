//! Splitting the gate across CI machines, and joining their verdicts again.
//!
//! Shard `I/N` takes every run whose position in the whole plan is `I - 1`
//! modulo `N`: shards are disjoint, their union is the plan, and the costly
//! cases (agent kills) spread evenly. Every shard stamps its JUnit report
//! with the plan it was cut from, so [`merge`] can refuse a missing,
//! duplicated or foreign shard instead of passing a partial gate.

use quick_junit::{Report, TestSuite};
use std::collections::BTreeMap;
use std::fmt;

/// The JUnit suite that carries a shard's stamp (it holds no test cases).
pub const STAMP_SUITE: &str = "taskgate.plan";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 1-based.
    pub index: usize,
    pub count: usize,
}

impl Shard {
    pub const WHOLE: Shard = Shard { index: 1, count: 1 };

    /// Whether the run at `position` (0-based) of the plan is this shard's.
    pub fn takes(&self, position: usize) -> bool {
        position % self.count == self.index - 1
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShardError {
    #[error("shard {0:?} is not I/N with 1 <= I <= N (e.g. 2/4)")]
    Syntax(String),
    #[error("{file}: not a JUnit report: {message}")]
    NotJunit { file: String, message: String },
    #[error("{file}: no {STAMP_SUITE} suite: not written by `taskgate gate --shard`")]
    Unstamped { file: String },
    #[error("{file}: cut from another plan ({theirs}) than {first} ({ours})")]
    OtherPlan {
        file: String,
        theirs: String,
        first: String,
        ours: String,
    },
    #[error("shard {0} is given twice")]
    Duplicate(Shard),
    #[error("shards {missing:?} of {count} are missing")]
    Missing { missing: Vec<usize>, count: usize },
    #[error("run {0} appears in two shards")]
    Overlap(String),
    #[error("the shards hold {got} runs, but the plan has {planned}")]
    Incomplete { got: usize, planned: usize },
}

impl std::str::FromStr for Shard {
    type Err = ShardError;

    fn from_str(s: &str) -> Result<Shard, ShardError> {
        let bad = || ShardError::Syntax(s.to_string());
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.parse::<usize>().map_err(|_| bad())?,
            n.parse::<usize>().map_err(|_| bad())?,
        );
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// Identifies a whole plan: its size and a stable digest of its run tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    runs: usize,
    digest: String,
}

impl Plan {
    fn of(tokens: &[String]) -> Plan {
        // FNV-1a: stable across builds and machines, unlike std's hasher.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in tokens.iter().flat_map(|t| t.bytes().chain([b'\n'])) {
            hash = (hash ^ byte as u64).wrapping_mul(0x0100_0000_01b3);
        }
        Plan {
            runs: tokens.len(),
            digest: format!("{hash:016x}"),
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} runs, digest {}", self.runs, self.digest)
    }
}

/// Adds the stamp: which shard of which plan (`plan_tokens` is the *whole*
/// plan, every shard's runs included) this report holds.
pub fn stamp(report: &mut Report, shard: Shard, plan_tokens: &[String]) {
    let plan = Plan::of(plan_tokens);
    let mut suite = TestSuite::new(STAMP_SUITE);
    suite.add_property(("shard", shard.to_string().as_str()));
    suite.add_property(("plan.runs", plan.runs.to_string().as_str()));
    suite.add_property(("plan.digest", plan.digest.as_str()));
    report.add_test_suite(suite);
}

/// Joins shard reports (`(file name, XML)`) into one report of the whole
/// plan, checking that exactly the plan's runs are there, each once.
pub fn merge(name: &str, shards: &[(String, String)]) -> Result<Report, ShardError> {
    let mut first: Option<(String, Plan, usize)> = None;
    let mut seen: BTreeMap<usize, ()> = BTreeMap::new();
    let mut suites: BTreeMap<String, TestSuite> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut runs = BTreeMap::new();
    for (file, xml) in shards {
        let report = Report::deserialize_from_str(xml).map_err(|e| ShardError::NotJunit {
            file: file.clone(),
            message: e.to_string(),
        })?;
        let (shard, plan) = read_stamp(file, &report)?;
        match &first {
            None => first = Some((file.clone(), plan.clone(), shard.count)),
            Some((first_file, ours, count)) => {
                if *ours != plan || *count != shard.count {
                    return Err(ShardError::OtherPlan {
                        file: file.clone(),
                        theirs: format!("{plan}, {} shards", shard.count),
                        first: first_file.clone(),
                        ours: format!("{ours}, {count} shards"),
                    });
                }
            }
        }
        if seen.insert(shard.index, ()).is_some() {
            return Err(ShardError::Duplicate(shard));
        }
        for suite in report.test_suites {
            if suite.name.as_str() == STAMP_SUITE {
                continue;
            }
            let merged = suites.entry(suite.name.to_string()).or_insert_with(|| {
                order.push(suite.name.to_string());
                TestSuite::new(suite.name.as_str())
            });
            for case in suite.test_cases {
                if runs.insert(case.name.to_string(), ()).is_some() {
                    return Err(ShardError::Overlap(case.name.to_string()));
                }
                merged.add_test_case(case);
            }
        }
    }
    let Some((_, plan, count)) = first else {
        return Err(ShardError::Missing {
            missing: vec![1],
            count: 1,
        });
    };
    let missing: Vec<usize> = (1..=count).filter(|i| !seen.contains_key(i)).collect();
    if !missing.is_empty() {
        return Err(ShardError::Missing { missing, count });
    }
    if runs.len() != plan.runs {
        return Err(ShardError::Incomplete {
            got: runs.len(),
            planned: plan.runs,
        });
    }
    let mut report = Report::new(name);
    for name in order {
        report.add_test_suite(suites.remove(&name).expect("recorded with its order"));
    }
    Ok(report)
}

fn read_stamp(file: &str, report: &Report) -> Result<(Shard, Plan), ShardError> {
    let unstamped = || ShardError::Unstamped {
        file: file.to_string(),
    };
    let suite = report
        .test_suites
        .iter()
        .find(|s| s.name.as_str() == STAMP_SUITE)
        .ok_or_else(unstamped)?;
    let property = |name: &str| {
        suite
            .properties
            .iter()
            .find(|p| p.name.as_str() == name)
            .map(|p| p.value.to_string())
            .ok_or_else(unstamped)
    };
    let shard: Shard = property("shard")?.parse().map_err(|_| unstamped())?;
    let runs = property("plan.runs")?.parse().map_err(|_| unstamped())?;
    let digest = property("plan.digest")?;
    Ok((shard, Plan { runs, digest }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus};

    fn plan() -> Vec<String> {
        (0..7).map(|i| format!("s#{i}")).collect()
    }

    /// What `taskgate gate --shard` writes: one case per run of the shard.
    fn shard_xml(shard: Shard, tokens: &[String], failing: &[&str]) -> String {
        let mut suite = TestSuite::new("s");
        for (_, t) in tokens.iter().enumerate().filter(|(i, _)| shard.takes(*i)) {
            let status = if failing.contains(&t.as_str()) {
                TestCaseStatus::non_success(NonSuccessKind::Failure)
            } else {
                TestCaseStatus::success()
            };
            suite.add_test_case(TestCase::new(t.as_str(), status));
        }
        let mut report = Report::new("g");
        report.add_test_suite(suite);
        stamp(&mut report, shard, tokens);
        report.to_string().unwrap()
    }

    fn files(xmls: &[String]) -> Vec<(String, String)> {
        xmls.iter()
            .enumerate()
            .map(|(i, x)| (format!("shard{i}.xml"), x.clone()))
            .collect()
    }

    #[test]
    fn shards_are_disjoint_and_cover_the_plan() {
        for count in 1..=5 {
            let mut owners = vec![0; 11];
            for index in 1..=count {
                let shard = Shard { index, count };
                for (pos, owner) in owners.iter_mut().enumerate() {
                    if shard.takes(pos) {
                        *owner += 1;
                    }
                }
            }
            assert!(owners.iter().all(|&o| o == 1), "{count}: {owners:?}");
        }
    }

    #[test]
    fn shard_syntax() {
        assert_eq!("2/4".parse(), Ok(Shard { index: 2, count: 4 }));
        for bad in ["0/4", "5/4", "4", "a/b", "1/0", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn merging_every_shard_gives_the_whole_plan_and_its_failures() {
        let plan = plan();
        let xmls: Vec<String> = (1..=3)
            .map(|i| shard_xml(Shard { index: i, count: 3 }, &plan, &["s#4"]))
            .collect();
        let merged = merge("g", &files(&xmls)).unwrap();
        assert_eq!(merged.tests, 7);
        assert_eq!(merged.failures, 1);
        // Shards given in any order merge the same way.
        let reversed: Vec<String> = xmls.iter().rev().cloned().collect();
        assert_eq!(merge("g", &files(&reversed)).unwrap().tests, 7);
    }

    #[test]
    fn a_missing_duplicated_or_foreign_shard_is_refused() {
        let plan = plan();
        let shard = |i| shard_xml(Shard { index: i, count: 3 }, &plan, &[]);
        assert_eq!(
            merge("g", &files(&[shard(1), shard(3)])).unwrap_err(),
            ShardError::Missing {
                missing: vec![2],
                count: 3
            }
        );
        assert_eq!(
            merge("g", &files(&[shard(1), shard(1), shard(2), shard(3)])).unwrap_err(),
            ShardError::Duplicate(Shard { index: 1, count: 3 })
        );
        let other: Vec<String> = plan.iter().take(6).cloned().collect();
        let foreign = shard_xml(Shard { index: 2, count: 3 }, &other, &[]);
        assert!(matches!(
            merge("g", &files(&[shard(1), foreign, shard(3)])).unwrap_err(),
            ShardError::OtherPlan { .. }
        ));
        let unstamped = Report::new("plain").to_string().unwrap();
        assert!(matches!(
            merge("g", &[("x.xml".into(), unstamped)]).unwrap_err(),
            ShardError::Unstamped { .. }
        ));
        assert!(matches!(
            merge("g", &[("x.xml".into(), "not xml".into())]).unwrap_err(),
            ShardError::NotJunit { .. }
        ));
    }
}
