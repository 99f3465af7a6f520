//! What a run may have left behind: task cgroups, mounts, live executor or
//! task processes, and files in the executors' run dir. A clean run leaves
//! none of them; the harness and the tests both check.

use std::path::{Path, PathBuf};

/// Every leftover mentioning `needle` (an alloc id or a run's data dir).
pub fn find(needle: &str, run_dir: Option<&Path>) -> Vec<String> {
    let mut found = cgroups(needle);
    found.extend(mounts(needle));
    found.extend(processes(needle));
    if let Some(dir) = run_dir {
        if let Ok(entries) = std::fs::read_dir(dir) {
            found.extend(
                entries
                    .flatten()
                    .map(|e| format!("file {}", e.path().display())),
            );
        }
    }
    found
}

/// Cgroup directories whose name contains `needle`, in every hierarchy.
pub fn cgroups(needle: &str) -> Vec<String> {
    describe(&cgroup_dirs(needle))
}

/// Reports the cgroup directories whose name contains `needle`, then
/// removes them, deepest first. Only for what a run's bug leaked: their
/// processes are dead by now.
pub fn sweep_cgroups(needle: &str) -> Vec<String> {
    let mut dirs = cgroup_dirs(needle);
    let found = describe(&dirs);
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for dir in dirs {
        let _ = std::fs::remove_dir(dir);
    }
    found
}

/// Removes the cgroup trees whose top is named `name` (a lab's own cgroup
/// parent), in every hierarchy: SIGKILLs what a bug left running in them,
/// waits for it to exit, then removes the dirs deepest first. Returns what
/// could not be removed.
pub fn remove_cgroup_tree(name: &str) -> Vec<String> {
    let mut dirs = cgroup_dirs(name);
    // The tops carry the name; what the engines made below them does not.
    for top in dirs.clone() {
        walk(&top, 0, &mut |p| dirs.push(p.to_path_buf()));
    }
    let pids: std::collections::BTreeSet<i32> = dirs
        .iter()
        .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
        .flat_map(|procs| {
            procs
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    let pids: Vec<i32> = pids.into_iter().collect();
    // A stopped process dies of SIGKILL too; a frozen one would not: thawed
    // first (an executor killed mid-kill leaves its cgroup frozen on v1).
    for dir in &dirs {
        let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
        let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
    }
    crate::interventions::kill_and_reap(&pids);
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    dirs.into_iter()
        .filter_map(|dir| {
            std::fs::remove_dir(&dir)
                .err()
                .map(|err| format!("cgroup {}: {err}", dir.display()))
        })
        .collect()
}

fn cgroup_dirs(needle: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for root in cgroup_mounts() {
        walk(Path::new(&root), 0, &mut |p| {
            if p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains(needle))
            {
                dirs.push(p.to_path_buf());
            }
        });
    }
    dirs
}

fn describe(dirs: &[PathBuf]) -> Vec<String> {
    dirs.iter()
        .map(|d| format!("cgroup {}", d.display()))
        .collect()
}

fn cgroup_mounts() -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter(|l| l.contains(" - cgroup ") || l.contains(" - cgroup2 "))
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_string))
        .collect()
}

fn walk(dir: &Path, depth: usize, f: &mut impl FnMut(&Path)) {
    // Task cgroups sit a few levels under the agent's own; stop well below
    // any real nesting so a huge hierarchy cannot stall the check.
    if depth > 8 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            let path = entry.path();
            f(&path);
            walk(&path, depth + 1, f);
        }
    }
}

pub fn mounts(needle: &str) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter(|l| l.contains(needle))
        .map(|l| format!("mount {l}"))
        .collect()
}

/// Live processes whose command line mentions `needle`.
pub fn processes(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| e.file_name().to_string_lossy() != me)
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(needle).then(|| {
                format!(
                    "process {} {}",
                    e.file_name().to_string_lossy(),
                    cmdline.trim()
                )
            })
        })
        .collect()
}
