//! Which executor or task an exec'ing process belongs to. At
//! `FAN_OPEN_EXEC_PERM` time the process has not yet passed the point of no
//! return of `execve`: it still holds its old file descriptors (even
//! close-on-exec ones) and its cgroup.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The file descriptor on which the engine hands each executor its spec file.
pub const SPEC_FD: i32 = 3;
const SPEC_SUFFIX: &str = ".spec.json";
const CGROUP_PREFIX: &str = "taskgate.";

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ExecIdentity {
    /// A per-task executor process (holds `<alloc_id>.<task>.spec.json` on fd 3)
    /// starting its task.
    Executor {
        alloc_id: String,
        task: String,
    },
    /// A process in the task's cgroup `taskgate.<alloc_id>.<task>`.
    Task {
        alloc_id: String,
        task: String,
    },
    Unknown,
}

impl ExecIdentity {
    /// Resolves the identity of a live process from `/proc`. A process that
    /// vanished or cannot be inspected is `Unknown`.
    pub fn of_pid(pid: i32) -> ExecIdentity {
        let proc = Path::new("/proc").join(pid.to_string());
        // Cgroup first: a task's first exec still holds the executor's fd 3
        // (close-on-exec fds close only after the permission check), but it
        // already sits in the task's cgroup and the executor never does.
        if let Some((alloc_id, task)) = std::fs::read_to_string(proc.join("cgroup"))
            .ok()
            .and_then(|cg| parse_cgroup(&cg))
        {
            return ExecIdentity::Task { alloc_id, task };
        }
        if let Some((alloc_id, task)) = std::fs::read_link(proc.join(format!("fd/{SPEC_FD}")))
            .ok()
            .and_then(|target| parse_spec_fd_target(&target))
        {
            return ExecIdentity::Executor { alloc_id, task };
        }
        ExecIdentity::Unknown
    }

    /// The task name, for either known identity.
    pub fn task(&self) -> Option<&str> {
        match self {
            ExecIdentity::Executor { task, .. } | ExecIdentity::Task { task, .. } => Some(task),
            ExecIdentity::Unknown => None,
        }
    }

    pub fn alloc_id(&self) -> Option<&str> {
        match self {
            ExecIdentity::Executor { alloc_id, .. } | ExecIdentity::Task { alloc_id, .. } => {
                Some(alloc_id)
            }
            ExecIdentity::Unknown => None,
        }
    }
}

/// Splits `<alloc_id>.<task>` at the first dot: alloc ids contain none, task
/// names may.
fn split_alloc_task(s: &str) -> Option<(String, String)> {
    let (alloc, task) = s.split_once('.')?;
    (!alloc.is_empty() && !task.is_empty()).then(|| (alloc.to_string(), task.to_string()))
}

/// Whether `pid` still runs: one that exited shows as a zombie (`Z`)
/// until reaped, or, when its parent reaps it at once (an init that
/// ignores SIGCHLD, as a guest's may), as dead (`X`) for the moment before
/// its /proc entry goes. Either still names its cgroup.
pub fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with(['Z', 'X']))
    })
}

/// Parses the target of `/proc/<pid>/fd/3`: a file named
/// `<alloc_id>.<task>.spec.json` (possibly already unlinked).
pub fn parse_spec_fd_target(target: &Path) -> Option<(String, String)> {
    let target = target.to_str()?;
    let target = target.strip_suffix(" (deleted)").unwrap_or(target);
    // Sockets, pipes and anonymous files read as e.g. `socket:[123]`, not paths.
    if !target.starts_with('/') {
        return None;
    }
    let name = Path::new(target).file_name()?.to_str()?;
    split_alloc_task(name.strip_suffix(SPEC_SUFFIX)?)
}

/// Parses `/proc/<pid>/cgroup` (`hierarchy:controllers:path` lines, v1 or v2)
/// for a path whose last component is `taskgate.<alloc_id>.<task>`.
pub fn parse_cgroup(contents: &str) -> Option<(String, String)> {
    contents.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        let last = path.rsplit('/').next()?;
        split_alloc_task(last.strip_prefix(CGROUP_PREFIX)?)
    })
}

/// A file's identity on the host: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The file `path` names, following links (`/proc`'s magic ones too).
    fn of_path(path: &str) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        Some(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// The file open on `fd` in this process.
    pub fn of_fd(fd: std::os::fd::BorrowedFd<'_>) -> Option<FileId> {
        use std::os::fd::AsRawFd;
        FileId::of_path(&format!("/proc/self/fd/{}", fd.as_raw_fd()))
    }

    /// The program `pid` runs, if it can be read.
    fn program_of(pid: i32) -> Option<FileId> {
        FileId::of_path(&format!("/proc/{pid}/exe"))
    }
}

/// The other live processes with the identity `executor` (the same task's
/// executors), read from `/proc` at this instant; none for an identity that
/// is no executor's. An executor runs `program` (the binary being exec'd),
/// or is one of `allowed`, the task's executor execs already let through
/// (whose `/proc` exe may still show the program they leave): a process
/// that holds the spec at fd 3 but is neither only came by it (the
/// launcher's own copy, or a child of any launch between its clone and its
/// exec, which inherited the launcher's fds).
pub fn executor_peers(
    pid: i32,
    executor: &ExecIdentity,
    program: FileId,
    allowed: &[i32],
) -> Vec<i32> {
    let ExecIdentity::Executor { alloc_id, task } = executor else {
        return Vec::new();
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    // The gate's thread answers the exec only after this scan, so most
    // processes are ruled out by one readlink of their fd 3 before the full
    // identity (their cgroup too) is read for the few left.
    let holds_the_spec = |other: i32| {
        std::fs::read_link(format!("/proc/{other}/fd/{SPEC_FD}"))
            .ok()
            .and_then(|target| parse_spec_fd_target(&target))
            .is_some_and(|(a, t)| a == *alloc_id && t == *task)
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&other| {
            other != pid
                && holds_the_spec(other)
                && (allowed.contains(&other) || FileId::program_of(other) == Some(program))
                && ExecIdentity::of_pid(other) == *executor
        })
        .collect()
}

/// The other processes in the task cgroup `pid` sits in, read from the
/// kernel at this instant: on v2 the unified hierarchy, on v1 the `pids`
/// controller's (every task cgroup has one). Empty when `pid` is in no task
/// cgroup or the cgroup cannot be read.
pub fn cgroup_peers(pid: i32) -> Vec<i32> {
    let Ok(own) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return Vec::new();
    };
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    task_cgroup_dir(&own, &mounts)
        .and_then(|dir| std::fs::read_to_string(dir.join("cgroup.procs")).ok())
        .map(|procs| {
            procs
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .filter(|p| *p != pid)
                .collect()
        })
        .unwrap_or_default()
}

/// Where a process's task cgroup lives on this host: its `cgroup` file's
/// path for the hierarchy (v2's, or v1's `pids`), under that hierarchy's
/// mount point from `mountinfo`.
fn task_cgroup_dir(cgroup: &str, mountinfo: &str) -> Option<std::path::PathBuf> {
    let (controllers, path) = cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let last = path.rsplit('/').next()?;
        let wanted = controllers.is_empty() || controllers.split(',').any(|c| c == "pids");
        (wanted && last.starts_with(CGROUP_PREFIX)).then_some((controllers, path))
    })?;
    let mount = mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split_whitespace();
        let (fstype, _source, options) = (right.next()?, right.next()?, right.next()?);
        let point = left.split_whitespace().nth(4)?;
        let matches = if controllers.is_empty() {
            fstype == "cgroup2"
        } else {
            fstype == "cgroup" && options.split(',').any(|o| o == "pids")
        };
        matches.then_some(point)
    })?;
    Some(Path::new(mount).join(path.trim_start_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launcher of an executor may itself hold the task's spec at fd 3
    /// (its own copy, numbered lowest): it is the new executor's parent,
    /// never an executor of the task beside it. A parent here holds a spec
    /// at fd 3 and starts a child that inherits it.
    #[test]
    fn an_executors_launcher_is_no_peer_executor() {
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join(format!("a1.web{SPEC_SUFFIX}"));
        std::fs::write(&spec, "{}").unwrap();
        let mut parent = std::process::Command::new("sh")
            .args(["-c", r#"exec 3<"$0"; sleep 600 & echo $!; wait"#])
            .arg(&spec)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(parent.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let child: i32 = line.trim().parse().unwrap();
        let executor = ExecIdentity::Executor {
            alloc_id: "a1".into(),
            task: "web".into(),
        };
        let sleep = running("sleep", &[child]);
        let peers = executor_peers(child, &executor, sleep, &[]);
        for pid in [child, parent.id() as i32] {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
        }
        let _ = parent.wait();
        assert!(
            !peers.contains(&(parent.id() as i32)),
            "the launching parent was taken for a live executor: {peers:?}"
        );
    }

    /// A process that holds a task's spec at fd 3 only by inheritance (a
    /// sibling launch's child between its clone and its exec, which the
    /// launcher's own copy of the spec reached) is no executor of the task.
    /// Two children of one parent holding a spec at fd 3: neither is the
    /// other's peer. (Seen once under `--jobs 2`: `restart-all-races#1`
    /// failed `one-live-tree` on another worker's spawning child.)
    #[test]
    fn a_process_that_only_inherited_the_spec_is_no_peer_executor() {
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join(format!("a2.web{SPEC_SUFFIX}"));
        std::fs::write(&spec, "{}").unwrap();
        let mut parent = std::process::Command::new("sh")
            .args([
                "-c",
                r#"exec 3<"$0"; sleep 600 & echo $!; sleep 600 & echo $!; wait"#,
            ])
            .arg(&spec)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(parent.stdout.take().unwrap());
        let mut child = || {
            let mut line = String::new();
            std::io::BufRead::read_line(&mut out, &mut line).unwrap();
            line.trim().parse::<i32>().unwrap()
        };
        let (first, second) = (child(), child());
        let executor = ExecIdentity::Executor {
            alloc_id: "a2".into(),
            task: "web".into(),
        };
        let sleep = running("sleep", &[first, second]);
        // As peers of an exec of a program none of them runs.
        let other = running("true", &[]);
        let as_if_exec_ing_other = executor_peers(first, &executor, other, &[]);
        // An exec the gate let through counts, whatever it runs yet.
        let let_through = executor_peers(first, &executor, other, &[second]);
        // The same two children, as peers of an exec of the program they run.
        let running_it = executor_peers(first, &executor, sleep, &[]);
        for pid in [first, second, parent.id() as i32] {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
        }
        let _ = parent.wait();
        assert_eq!(
            as_if_exec_ing_other, [0; 0],
            "an inherited spec fd made a peer"
        );
        assert_eq!(running_it, [second], "the one that runs the program is");
        assert_eq!(let_through, [second], "an exec let through is");
    }

    /// The program `name` (found on PATH), once every one of `pids` runs
    /// it (a shell's child has forked, but may not have exec'd yet).
    fn running(name: &str, pids: &[i32]) -> FileId {
        let path = std::env::var("PATH").unwrap_or_default();
        let program = (path.split(':'))
            .find_map(|dir| FileId::of_path(&format!("{dir}/{name}")))
            .unwrap_or_else(|| panic!("no {name} on PATH"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while pids.iter().any(|&p| FileId::program_of(p) != Some(program)) {
            assert!(
                std::time::Instant::now() < deadline,
                "{pids:?} never ran {name}"
            );
            std::thread::yield_now();
        }
        program
    }

    fn pair(a: &str, t: &str) -> Option<(String, String)> {
        Some((a.to_string(), t.to_string()))
    }

    #[test]
    fn the_task_cgroup_dir_is_found_under_its_hierarchy_mount() {
        let v1_cgroup = "12:pids:/agent/taskgate.a1.web\n4:memory:/agent/taskgate.a1.web\n";
        let v1_mounts = "35 25 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                         36 25 0:31 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        assert_eq!(
            task_cgroup_dir(v1_cgroup, v1_mounts),
            Some("/sys/fs/cgroup/pids/agent/taskgate.a1.web".into())
        );
        let v2_mounts = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            task_cgroup_dir("0::/taskgate.a1.web\n", v2_mounts),
            Some("/sys/fs/cgroup/taskgate.a1.web".into())
        );
        assert_eq!(
            task_cgroup_dir("0::/agent\n", v2_mounts),
            None,
            "not a task cgroup"
        );
        assert_eq!(
            task_cgroup_dir(v1_cgroup, v2_mounts),
            None,
            "no pids hierarchy mounted"
        );
    }

    #[test]
    fn spec_fd_target() {
        let p = |s: &str| parse_spec_fd_target(Path::new(s));
        assert_eq!(
            p("/var/lib/tg/specs/a1b2.web.spec.json"),
            pair("a1b2", "web")
        );
        assert_eq!(p("/x/a1.web.front.spec.json"), pair("a1", "web.front"));
        assert_eq!(p("/x/a1.web.spec.json (deleted)"), pair("a1", "web"));
        assert_eq!(p("/x/a1.spec.json"), None);
        assert_eq!(p("/x/.web.spec.json"), None);
        assert_eq!(p("/x/a1..spec.json"), None);
        assert_eq!(p("/x/a1.web.json"), None);
        assert_eq!(p("/x/a1.web.spec.json/other"), None);
        assert_eq!(p("socket:[1234]"), None);
        assert_eq!(p("/dev/null"), None);
    }

    #[test]
    fn cgroup_v2_and_v1() {
        assert_eq!(
            parse_cgroup("0::/taskgate/taskgate.a1.web\n"),
            pair("a1", "web")
        );
        assert_eq!(
            parse_cgroup("0::/taskgate.a1.web.front"),
            pair("a1", "web.front")
        );
        let v1 = "12:pids:/\n4:cpu,cpuacct:/nomad/taskgate.a9.db\n1:name=systemd:/user.slice\n";
        assert_eq!(parse_cgroup(v1), pair("a9", "db"));
        // A path component with a colon must survive the 3-way split.
        assert_eq!(parse_cgroup("0::/odd:dir/taskgate.a1.t"), pair("a1", "t"));
    }

    #[test]
    fn cgroup_no_match() {
        assert_eq!(parse_cgroup(""), None);
        assert_eq!(parse_cgroup("0::/"), None);
        assert_eq!(parse_cgroup("0::/user.slice/session-1.scope"), None);
        // Only the last component names the task: a child cgroup is not the task's.
        assert_eq!(parse_cgroup("0::/taskgate.a1.web/inner"), None);
        assert_eq!(parse_cgroup("0::/taskgate.a1"), None);
        assert_eq!(parse_cgroup("0::/xtaskgate.a1.web"), None);
        assert_eq!(parse_cgroup("garbage"), None);
    }

    #[test]
    fn own_process_is_unknown() {
        // The test process has no spec on fd 3 and is in no taskgate cgroup.
        assert_eq!(
            ExecIdentity::of_pid(std::process::id() as i32),
            ExecIdentity::Unknown
        );
        assert_eq!(ExecIdentity::of_pid(i32::MAX), ExecIdentity::Unknown);
    }
}

/// The oracle restates the executor's names on purpose: it must not take
/// the word of the code it judges. These tests hold each restatement to the
/// executor's own definition, so the two cannot drift apart unnoticed.
#[cfg(test)]
mod contract {
    use super::*;

    #[test]
    fn the_spec_fd_and_file_name_are_the_executors() {
        assert_eq!(SPEC_FD, taskgate_executor::SPEC_FD);
        let name = taskgate_executor::spec_file_name("a1b2", "web.front");
        assert_eq!(
            parse_spec_fd_target(&Path::new("/run/tg").join(name)),
            Some(("a1b2".to_string(), "web.front".to_string()))
        );
    }

    #[test]
    fn the_task_cgroup_name_is_the_executors() {
        let leaf = taskgate_executor::task_cgroup_name("a1b2", "web");
        assert_eq!(
            parse_cgroup(&format!("0::/agent/{leaf}\n")),
            Some(("a1b2".to_string(), "web".to_string()))
        );
    }
}
