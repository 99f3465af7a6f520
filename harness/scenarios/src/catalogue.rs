//! The scenarios the explorer and the gate run: the built-in files (in
//! `harness/scenarios/catalogue/`, embedded in the binary), or scenario
//! files a user names.

use crate::file::{self, JobReader};
use crate::model::Scenario;
use std::path::{Path, PathBuf};
use taskgate_engine::jobspec::JobspecError;

/// The built-in scenario files and the jobs they share, (name, text): the
/// scenarios in the files' order, `jobs/` holding only jobspecs. A gate with
/// `--fail-fast` stops at its first failure, so the files whose runs are
/// few and reach the most (the agent kills and restores of restarts.hcl)
/// come early.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "stop-races.hcl",
        include_str!("../catalogue/stop-races.hcl"),
    ),
    ("restarts.hcl", include_str!("../catalogue/restarts.hcl")),
    ("updates.hcl", include_str!("../catalogue/updates.hcl")),
    (
        "alloc-restarts.hcl",
        include_str!("../catalogue/alloc-restarts.hcl"),
    ),
    (
        "restart-policy.hcl",
        include_str!("../catalogue/restart-policy.hcl"),
    ),
    ("faults.hcl", include_str!("../catalogue/faults.hcl")),
    ("pairs.hcl", include_str!("../catalogue/pairs.hcl")),
    (
        "jobs/lifecycle.hcl",
        include_str!("../catalogue/jobs/lifecycle.hcl"),
    ),
    (
        "jobs/two-services.hcl",
        include_str!("../catalogue/jobs/two-services.hcl"),
    ),
    ("jobs/web.hcl", include_str!("../catalogue/jobs/web.hcl")),
    ("jobs/init.hcl", include_str!("../catalogue/jobs/init.hcl")),
    (
        "jobs/web-retried.hcl",
        include_str!("../catalogue/jobs/web-retried.hcl"),
    ),
    (
        "jobs/web-failing.hcl",
        include_str!("../catalogue/jobs/web-failing.hcl"),
    ),
    (
        "jobs/web-done.hcl",
        include_str!("../catalogue/jobs/web-done.hcl"),
    ),
    (
        "jobs/shutdown-delay.hcl",
        include_str!("../catalogue/jobs/shutdown-delay.hcl"),
    ),
    (
        "jobs/service-done.hcl",
        include_str!("../catalogue/jobs/service-done.hcl"),
    ),
    (
        "jobs/kill-order.hcl",
        include_str!("../catalogue/jobs/kill-order.hcl"),
    ),
    (
        "jobs/web-updated.hcl",
        include_str!("../catalogue/jobs/web-updated.hcl"),
    ),
    (
        "jobs/report.hcl",
        include_str!("../catalogue/jobs/report.hcl"),
    ),
    (
        "jobs/retried-pair.hcl",
        include_str!("../catalogue/jobs/retried-pair.hcl"),
    ),
    (
        "jobs/web-failing-slowly.hcl",
        include_str!("../catalogue/jobs/web-failing-slowly.hcl"),
    ),
    (
        "jobs/exits.hcl",
        include_str!("../catalogue/jobs/exits.hcl"),
    ),
    (
        "jobs/exits-batch.hcl",
        include_str!("../catalogue/jobs/exits-batch.hcl"),
    ),
    (
        "jobs/runs-twice.hcl",
        include_str!("../catalogue/jobs/runs-twice.hcl"),
    ),
    (
        "jobs/runs-twice-beside-sidecar.hcl",
        include_str!("../catalogue/jobs/runs-twice-beside-sidecar.hcl"),
    ),
    (
        "jobs/fails-then-completes-beside-sidecar.hcl",
        include_str!("../catalogue/jobs/fails-then-completes-beside-sidecar.hcl"),
    ),
    (
        "jobs/stubborn.hcl",
        include_str!("../catalogue/jobs/stubborn.hcl"),
    ),
    (
        "jobs/web-fails-once.hcl",
        include_str!("../catalogue/jobs/web-fails-once.hcl"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Invalid(#[from] JobspecError),
    #[error("cannot read {}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} holds no scenario files (*.hcl)")]
    Empty(String),
    #[error("scenario {name:?} is defined in both {first} and {second}")]
    Duplicate {
        name: String,
        first: String,
        second: String,
    },
    #[error(transparent)]
    Unknown(#[from] UnknownScenario),
    #[error("{file} holds {count} scenarios ({names}); name the one to run")]
    Ambiguous {
        file: String,
        count: usize,
        names: String,
    },
}

/// A scenario name a set lacks: with the nearest name it has, or its names
/// when they are few.
#[derive(Debug, thiserror::Error)]
#[error("unknown scenario {name:?}{}", hint)]
pub struct UnknownScenario {
    pub name: String,
    hint: String,
}

/// A set of at most this many scenarios (a file's) is listed in full when
/// no name is near; a larger one (the catalogue) is left to `gate --list`.
const LISTED: usize = 8;

impl UnknownScenario {
    fn in_set(name: &str, set: &[Scenario]) -> UnknownScenario {
        let names: Vec<&str> = set.iter().map(|s| s.name.as_str()).collect();
        let hint = match taskgate_engine::jobspec::hcl::closest(name, &names) {
            Some(near) => format!("; did you mean {near:?}?"),
            None if names.len() <= LISTED => format!("; known: {}", names.join(", ")),
            None => "; `taskgate gate --list` shows them (with `--catalogue DIR`, a directory's)"
                .to_string(),
        };
        UnknownScenario {
            name: name.to_string(),
            hint,
        }
    }
}

/// The built-in scenarios. A test holds the embedded files to parsing.
pub fn catalogue() -> Vec<Scenario> {
    builtin().expect("the built-in scenario files parse")
}

fn builtin() -> Result<Vec<Scenario>, LoadError> {
    let shown = |name: &str| format!("<built-in>/{name}");
    let jobs = |path: &str| {
        BUILTIN
            .iter()
            .find(|(name, _)| *name == path)
            .map(|(name, text)| (shown(name), text.to_string()))
            .ok_or_else(|| "no such built-in file".to_string())
    };
    let files = BUILTIN
        .iter()
        .filter(|(name, _)| !name.starts_with("jobs/"))
        .map(|(name, text)| Ok((shown(name), file::parse(text, &shown(name), &jobs)?)))
        .collect::<Result<_, LoadError>>()?;
    join(files)
}

/// The scenarios of one file; its `job = "PATH"` paths are relative to it.
pub fn load_file(path: &Path) -> Result<Vec<Scenario>, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    let jobs: &JobReader = &|relative: &str| {
        let job = base.join(relative);
        std::fs::read_to_string(&job)
            .map(|text| (job.display().to_string(), text))
            .map_err(|e| e.to_string())
    };
    let mut scenarios = file::parse(&text, &path.display().to_string(), jobs)?;
    for scenario in &mut scenarios {
        scenario.file = Some(path.to_owned());
    }
    Ok(scenarios)
}

/// The scenarios of every `*.hcl` file in `dir` (not its subdirectories,
/// where shared jobs live), files in name order.
pub fn load_dir(dir: &Path) -> Result<Vec<Scenario>, LoadError> {
    let io = |source| LoadError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "hcl") {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Err(LoadError::Empty(dir.display().to_string()));
    }
    paths.sort();
    let files = paths
        .iter()
        .map(|p| Ok((p.display().to_string(), load_file(p)?)))
        .collect::<Result<_, LoadError>>()?;
    join(files)
}

/// One set from several files; a name defined twice is an error.
fn join(files: Vec<(String, Vec<Scenario>)>) -> Result<Vec<Scenario>, LoadError> {
    let mut all: Vec<(String, Scenario)> = Vec::new();
    for (file, scenarios) in files {
        for scenario in scenarios {
            if let Some((first, _)) = all.iter().find(|(_, s)| s.name == scenario.name) {
                return Err(LoadError::Duplicate {
                    name: scenario.name,
                    first: first.clone(),
                    second: file,
                });
            }
            all.push((file.clone(), scenario));
        }
    }
    Ok(all.into_iter().map(|(_, s)| s).collect())
}

/// The scenario `name` of `set`.
pub fn find<'a>(set: &'a [Scenario], name: &str) -> Result<&'a Scenario, UnknownScenario> {
    (set.iter().find(|s| s.name == name)).ok_or_else(|| UnknownScenario::in_set(name, set))
}

/// The scenario to run: `name` from `file` if given (which may be left out
/// when the file holds one), else `name` from the built-ins.
pub fn choose(file: Option<&Path>, name: Option<&str>) -> Result<Scenario, LoadError> {
    let (set, shown) = match file {
        Some(path) => (load_file(path)?, path.display().to_string()),
        None => (catalogue(), "the built-in catalogue".to_string()),
    };
    match name {
        Some(name) => Ok(find(&set, name)?.clone()),
        None if set.len() == 1 => Ok(set.into_iter().next().expect("one scenario")),
        None => Err(LoadError::Ambiguous {
            file: shown,
            count: set.len(),
            names: set
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;

    #[test]
    fn the_built_in_files_parse_with_unique_findable_names() {
        let all = builtin().unwrap();
        assert!(!all.is_empty());
        for s in &all {
            assert_eq!(find(&all, &s.name).unwrap().name, s.name);
            assert_eq!(all.iter().filter(|o| o.name == s.name).count(), 1);
        }
        let unknown = |name: &str| find(&all, name).unwrap_err().to_string();
        assert!(unknown("sidecar-sotp").ends_with("did you mean \"sidecar-stop\"?"));
        assert!(unknown("nope").contains("gate --list"));
    }

    /// A file's few scenarios are named in full when no name is near.
    #[test]
    fn a_small_sets_names_are_listed() {
        let all = builtin().unwrap();
        let few = &all[..2];
        let message = find(few, "nope").unwrap_err().to_string();
        assert!(
            message.contains(&few[0].name) && message.contains(&few[1].name),
            "{message}"
        );
    }

    #[test]
    fn controlled_tasks_exist() {
        for s in catalogue() {
            if let Kind::StopRace { controlled } = &s.kind {
                assert!(
                    s.tasks().iter().any(|t| &t.name == controlled),
                    "{}",
                    s.name
                );
            }
        }
    }

    #[test]
    fn the_catalogue_directory_is_the_built_in_set() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalogue");
        let mut on_disk = names(load_dir(&dir).unwrap());
        let mut built_in = names(catalogue());
        on_disk.sort();
        built_in.sort();
        assert_eq!(on_disk, built_in);
        let listed = BUILTIN
            .iter()
            .filter(|(n, _)| !n.starts_with("jobs/"))
            .count();
        let files = std::fs::read_dir(&dir).unwrap().flatten();
        let hcl = files.filter(|e| e.path().extension().is_some_and(|x| x == "hcl"));
        assert_eq!(hcl.count(), listed, "every catalogue file is embedded");
    }

    fn names(set: Vec<Scenario>) -> Vec<String> {
        set.into_iter().map(|s| s.name).collect()
    }
}
