//! Spec checks, run by the client before it spawns anything and again by the
//! executor before it touches the system (the spec file could be stale);
//! the task directory's existence only by the executor. The task's user is
//! looked up by the client alone (see [`Credentials`]).

use crate::confined::{ConfinedDir, ConfinedError};
use crate::error::ExecutorError;
use crate::spec::{Resources, TaskSpec, MAX_MEMORY_MB, MAX_PIDS};
use nix::unistd::{Gid, Uid, User};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// The host user a task runs as. The launcher looks it up and hands the ids
/// to its executor in the spec file: the executor makes no name-service
/// call, so it may be linked statically (glibc's NSS modules are shared
/// libraries of the host's own glibc, which a static binary cannot load
/// safely) and pays no lookup on its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "HostIds", into = "HostIds")]
pub(crate) struct Credentials {
    pub uid: Uid,
    pub gid: Gid,
}

/// [`Credentials`] as the spec file holds them.
#[derive(Serialize, Deserialize)]
struct HostIds {
    uid: u32,
    gid: u32,
}

/// `setresuid` and `setresgid` take -1 for "leave it as it is": an id
/// read from a file never may be that.
const UNCHANGED_ID: u32 = u32::MAX;

impl TryFrom<HostIds> for Credentials {
    type Error = String;

    fn try_from(ids: HostIds) -> Result<Credentials, String> {
        if ids.uid == UNCHANGED_ID || ids.gid == UNCHANGED_ID {
            return Err(format!("{UNCHANGED_ID} is no user or group id"));
        }
        Ok(Credentials {
            uid: Uid::from_raw(ids.uid),
            gid: Gid::from_raw(ids.gid),
        })
    }
}

impl From<Credentials> for HostIds {
    fn from(creds: Credentials) -> HostIds {
        HostIds {
            uid: creds.uid.as_raw(),
            gid: creds.gid.as_raw(),
        }
    }
}

/// The task directory's subdirectories, each mounted at `/<name>` in the
/// task root: `local/` and `tmp/` as binds, `secrets/` as a tmpfs of its own.
pub const TASK_SUBDIRS: [&str; 3] = ["local", SECRETS_DIR, "tmp"];
pub const SECRETS_DIR: &str = "secrets";
/// The dir every task of an alloc shares, beside the task dirs in the
/// alloc dir (`<alloc dir>/alloc`, each task's `/alloc`): no task may be
/// named so, or its task dir would be inside every sibling's reach.
pub const SHARED_ALLOC_DIR: &str = "alloc";
/// The executor's own log, in the task dir (which no task can write).
pub const EXECUTOR_LOG: &str = "executor.out";

const DEFAULT_USER: &str = "nobody";

/// Each host dir bound into a task root (host path, path in the task
/// root): both absolute, the host's existing, the task's below its root.
/// An agent checks its own at start, and each launch again.
pub fn check_chroot_env(env: &BTreeMap<PathBuf, PathBuf>) -> Result<(), ExecutorError> {
    for (src, dst) in env {
        absolute("chroot_env source", src)?;
        absolute("chroot_env target", dst)?;
        if dst.parent().is_none() || dst.components().any(|c| c == Component::ParentDir) {
            return Err(ExecutorError::UnsafePath {
                what: "chroot_env target".into(),
                path: dst.clone(),
            });
        }
        existing("chroot_env source", src)?;
    }
    Ok(())
}

/// The launcher's check: the spec's, and its user's lookup.
pub(crate) fn validate(spec: &TaskSpec) -> Result<Credentials, ExecutorError> {
    check_spec(spec)?;
    resolve_user(&spec.user)
}

/// Everything about the spec but its user, which the executor takes as
/// its launcher resolved it.
pub(crate) fn check_spec(spec: &TaskSpec) -> Result<(), ExecutorError> {
    if let Some(reason) = task_name_problem(&spec.task_name) {
        return Err(ExecutorError::InvalidTaskName {
            name: spec.task_name.clone(),
            reason,
        });
    }
    // The first `.` of `<alloc_id>.<task>` (spec file, socket, cgroup) ends the alloc id.
    let alloc_problem = component_problem(&spec.alloc_id).or_else(|| {
        spec.alloc_id
            .contains('.')
            .then(|| "must not contain `.`".to_string())
    });
    if let Some(reason) = alloc_problem {
        return Err(ExecutorError::InvalidAllocId {
            id: spec.alloc_id.clone(),
            reason,
        });
    }
    absolute("task_dir", &spec.task_dir)?;
    absolute("shared_alloc_dir", &spec.shared_alloc_dir)?;
    existing("shared_alloc_dir", &spec.shared_alloc_dir)?;
    check_chroot_env(&spec.chroot_env)?;
    if spec.command.trim().is_empty() {
        return Err(ExecutorError::MissingCommand);
    }
    check_resources(&spec.resources)?;
    positive("logs.max_files", spec.logs.max_files.into())?;
    positive("logs.max_file_size_bytes", spec.logs.max_file_size_bytes)?;
    positive("rlimits.nofile", spec.rlimits.nofile.soft)?;
    for (res, limit) in spec.rlimits.each() {
        if limit.soft > limit.hard {
            return Err(ExecutorError::InvalidLimit {
                name: format!("{res:?}"),
                value: limit.soft,
                reason: format!("soft limit above the hard limit {}", limit.hard),
            });
        }
    }
    if !(-1000..=1000).contains(&spec.oom_score_adj) {
        return Err(ExecutorError::InvalidLimit {
            name: "oom_score_adj".into(),
            value: spec.oom_score_adj.unsigned_abs().into(),
            reason: format!("{} is outside -1000..=1000", spec.oom_score_adj),
        });
    }
    Ok(())
}

/// The task directory is the prestart hooks' work. Only the executor process
/// checks it, as the first thing it does (in docs/nomad-prestart-race-report.txt the executor failed
/// opening `executor.out`): a task started without its prestart then shows
/// up as an executor exec the harness's oracle can see and judge.
pub(crate) fn check_task_dir(spec: &TaskSpec) -> Result<(), ExecutorError> {
    // Missing is the report's case (prestart skipped); anything else there is refused as it is.
    let missing = |path: PathBuf| {
        move |e: ConfinedError| match e {
            ConfinedError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                ExecutorError::TaskDirMissing { path }
            }
            other => other.into(),
        }
    };
    let dir = ConfinedDir::open(&spec.task_dir).map_err(missing(spec.task_dir.clone()))?;
    for sub in TASK_SUBDIRS {
        dir.dir(sub).map_err(missing(spec.task_dir.join(sub)))?;
    }
    Ok(())
}

/// Why `name` cannot be one path component of the executor's file names, if
/// it can't.
pub fn component_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("must not be empty".into())
    } else if name.contains('/') || name.contains('\0') {
        Some("must not contain `/` or NUL".into())
    } else if name == "." || name == ".." || name.contains("..") {
        Some("must not contain `..`".into())
    } else {
        None
    }
}

/// Why `name` cannot name a task, if it can't: one path component, and
/// not the alloc's shared dir. The one rule, which the jobspec applies too.
pub fn task_name_problem(name: &str) -> Option<String> {
    component_problem(name).or_else(|| {
        (name == SHARED_ALLOC_DIR)
            .then(|| format!("is the alloc's shared dir ({SHARED_ALLOC_DIR}/), not a task's"))
    })
}

fn absolute(what: &str, path: &Path) -> Result<(), ExecutorError> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(ExecutorError::RelativePath {
            what: what.into(),
            path: path.to_path_buf(),
        })
    }
}

fn existing(what: &str, path: &Path) -> Result<(), ExecutorError> {
    if path.exists() {
        Ok(())
    } else {
        Err(ExecutorError::PathMissing {
            what: what.into(),
            path: path.to_path_buf(),
        })
    }
}

fn check_resources(r: &Resources) -> Result<(), ExecutorError> {
    positive("memory_mb", r.memory_mb)?;
    at_most("memory_mb", r.memory_mb, MAX_MEMORY_MB)?;
    positive("pids_max", r.pids_max)?;
    at_most("pids_max", r.pids_max, MAX_PIDS)?;
    positive("cpu_shares", r.cpu_shares)
}

fn positive(name: &str, value: u64) -> Result<(), ExecutorError> {
    if value == 0 {
        Err(limit(name, value, "must be at least 1"))
    } else {
        Ok(())
    }
}

fn at_most(name: &str, value: u64, most: u64) -> Result<(), ExecutorError> {
    if value > most {
        Err(limit(name, value, &format!("too large (at most {most})")))
    } else {
        Ok(())
    }
}

fn limit(name: &str, value: u64, reason: &str) -> ExecutorError {
    ExecutorError::InvalidLimit {
        name: name.into(),
        value,
        reason: reason.into(),
    }
}

fn resolve_user(user: &str) -> Result<Credentials, ExecutorError> {
    let name = if user.is_empty() { DEFAULT_USER } else { user };
    match User::from_name(name) {
        Ok(Some(u)) => Ok(Credentials {
            uid: u.uid,
            gid: u.gid,
        }),
        Ok(None) => Err(ExecutorError::UnknownUser {
            user: name.to_string(),
        }),
        Err(e) => Err(ExecutorError::io(format!("look up user {name:?}"))(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_one_safe_path_component() {
        for bad in ["", "a/b", "..", "a..b", "."] {
            assert!(component_problem(bad).is_some(), "{bad:?}");
        }
        for good in ["web", "web-1", "a.b", "db_2"] {
            assert_eq!(component_problem(good), None, "{good:?}");
        }
    }

    #[test]
    fn a_task_may_not_take_the_shared_dirs_name() {
        assert!(task_name_problem(SHARED_ALLOC_DIR).is_some());
        assert!(task_name_problem("..").is_some());
        assert_eq!(task_name_problem("allocator"), None);
    }

    /// `pids.max` takes at most the kernel's pid limit: a spec beyond it
    /// failed at the cgroup write, after the task's cgroup was made.
    #[test]
    fn a_pids_limit_beyond_the_kernels_is_refused() {
        let resources = Resources {
            cpu_shares: 100,
            memory_mb: 64,
            pids_max: 4_194_305,
        };
        let checked = check_resources(&resources);
        assert!(
            matches!(checked, Err(ExecutorError::InvalidLimit { .. })),
            "{checked:?}"
        );
    }
}
