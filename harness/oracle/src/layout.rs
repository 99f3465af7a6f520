//! Nomad's task directory layout, which prestart hooks build and which must
//! exist before any exec of the task's binary.

use std::path::{Path, PathBuf};

/// Checks the layout of `task` under `alloc_dir`, returning every missing path:
/// `alloc/`, `alloc/logs/`, `<task>/`, `<task>/{local,secrets,tmp}/` and
/// `alloc/logs/<task>.{stdout,stderr}.0`. Nothing is followed: a symlink where
/// a directory or log file should be counts as missing, since it could point
/// anywhere.
pub fn check_task_layout(alloc_dir: &Path, task: &str) -> Result<(), Vec<PathBuf>> {
    let shared = alloc_dir.join("alloc");
    let logs = shared.join("logs");
    let task_dir = alloc_dir.join(task);
    // A task name that is not one plain component (`..`, `a/b`) would make the
    // paths below name something other than the task's own directory.
    if matches!(task, "" | "." | "..") || task.contains(['/', '\0']) {
        return Err(vec![task_dir]);
    }
    let dirs = [
        shared.clone(),
        logs.clone(),
        task_dir.clone(),
        task_dir.join("local"),
        task_dir.join("secrets"),
        task_dir.join("tmp"),
    ];
    let files = [
        logs.join(format!("{task}.stdout.0")),
        logs.join(format!("{task}.stderr.0")),
    ];
    let kind = |p: &Path| std::fs::symlink_metadata(p).ok().map(|m| m.file_type());
    let missing: Vec<PathBuf> = dirs
        .into_iter()
        .filter(|d| !kind(d).is_some_and(|t| t.is_dir()))
        .chain(
            files
                .into_iter()
                .filter(|f| !kind(f).is_some_and(|t| t.is_file())),
        )
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing)
    }
}

/// Builds a complete layout for `task` under `alloc`, for this crate's tests.
#[cfg(test)]
pub(crate) fn build_for_test(alloc: &Path, task: &str) {
    for d in [
        "alloc/logs",
        &format!("{task}/local"),
        &format!("{task}/secrets"),
        &format!("{task}/tmp"),
    ] {
        std::fs::create_dir_all(alloc.join(d)).unwrap();
    }
    for f in ["stdout", "stderr"] {
        std::fs::write(alloc.join(format!("alloc/logs/{task}.{f}.0")), "").unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::build_for_test as build;
    use super::*;
    use std::fs;

    #[test]
    fn complete_layout_passes() {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), "web.front");
        assert_eq!(check_task_layout(dir.path(), "web.front"), Ok(()));
    }

    #[test]
    fn empty_alloc_dir_reports_every_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = check_task_layout(dir.path(), "web").unwrap_err();
        let rel: Vec<_> = missing
            .iter()
            .map(|p| p.strip_prefix(dir.path()).unwrap().to_path_buf())
            .collect();
        let want: Vec<PathBuf> = [
            "alloc",
            "alloc/logs",
            "web",
            "web/local",
            "web/secrets",
            "web/tmp",
            "alloc/logs/web.stdout.0",
            "alloc/logs/web.stderr.0",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(rel, want);
    }

    #[test]
    fn missing_log_file_and_dir() {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), "web");
        fs::remove_file(dir.path().join("alloc/logs/web.stderr.0")).unwrap();
        fs::remove_dir(dir.path().join("web/secrets")).unwrap();
        assert_eq!(
            check_task_layout(dir.path(), "web"),
            Err(vec![
                dir.path().join("web/secrets"),
                dir.path().join("alloc/logs/web.stderr.0")
            ])
        );
    }

    #[test]
    fn symlinks_count_as_missing() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        build(dir.path(), "web");
        build(elsewhere.path(), "web");
        fs::remove_dir(dir.path().join("web/tmp")).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("web/tmp"), dir.path().join("web/tmp"))
            .unwrap();
        let out = dir.path().join("alloc/logs/web.stdout.0");
        fs::remove_file(&out).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join("alloc/logs/web.stdout.0"), &out).unwrap();
        assert_eq!(
            check_task_layout(dir.path(), "web"),
            Err(vec![dir.path().join("web/tmp"), out])
        );
    }

    #[test]
    fn wrong_file_types_count_as_missing() {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), "web");
        fs::remove_dir(dir.path().join("web/local")).unwrap();
        fs::write(dir.path().join("web/local"), "").unwrap();
        let out = dir.path().join("alloc/logs/web.stdout.0");
        fs::remove_file(&out).unwrap();
        fs::create_dir(&out).unwrap();
        assert_eq!(
            check_task_layout(dir.path(), "web"),
            Err(vec![dir.path().join("web/local"), out])
        );
    }

    /// The layout restates the executor's task subdirectories on purpose
    /// (see `identity::contract`): held to them here.
    #[test]
    fn the_task_subdirs_are_the_executors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = check_task_layout(dir.path(), "web").unwrap_err();
        let mut subdirs: Vec<String> = missing
            .iter()
            .filter_map(|p| p.strip_prefix(dir.path().join("web")).ok())
            .filter(|rel| !rel.as_os_str().is_empty())
            .map(|rel| rel.display().to_string())
            .collect();
        subdirs.sort();
        let mut want: Vec<String> = taskgate_executor::TASK_SUBDIRS.map(String::from).to_vec();
        want.sort();
        assert_eq!(subdirs, want);
    }

    #[test]
    fn task_names_escaping_the_alloc_dir_fail() {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), "web");
        for bad in ["..", "web/../web", "/web", "web/", "", "."] {
            assert!(check_task_layout(dir.path(), bad).is_err(), "{bad:?}");
        }
    }
}
