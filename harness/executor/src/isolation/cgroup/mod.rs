//! The task's cgroup `taskgate.<alloc_id>.<task_name>`, a child of the
//! cgroup parent the agent owns (see [`parent`]) in every hierarchy: on v2
//! the unified one, on v1 each controller a task uses.

pub mod parent;
mod xattr;

use super::device_filter;
use crate::error::ExecutorError;
use crate::spec::{Resources, TaskSpec};
use crate::sys::{pidfd_open_if_alive, pidfd_send_signal, wait_exited};
use cgroups_rs::cgroup::UNIFIED_MOUNTPOINT;
use cgroups_rs::cpu::CpuController;
use cgroups_rs::devices::DevicesController;
use cgroups_rs::freezer::FreezerController;
use cgroups_rs::memory::MemController;
use cgroups_rs::pid::PidController;
use cgroups_rs::{hierarchies, Cgroup, Controller, MaxValue};
use nix::sys::signal::Signal;
use parent::{CgroupParent, Layout, V2_REQUIRED};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

pub(crate) struct TaskCgroup {
    cg: Cgroup,
    /// What the task process writes itself into ([`TaskCgroup::join`]).
    join_files: Vec<PathBuf>,
}

impl TaskCgroup {
    /// Creates the cgroup under `parent` and applies the limits; on failure
    /// nothing is left.
    pub fn create(spec: &TaskSpec, parent: &CgroupParent) -> Result<TaskCgroup, ExecutorError> {
        let layout = Layout::detect()?;
        let relative = parent.join(&task_cgroup_name(&spec.alloc_id, &spec.task_name));
        let tc = TaskCgroup {
            cg: load(&layout, &relative),
            join_files: layout.self_join_files(&relative),
        };
        let mut made = Vec::new();
        for dir in layout.dirs(&relative) {
            match std::fs::create_dir(&dir) {
                Ok(()) => made.push(dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    for dir in made.iter().rev() {
                        let _ = std::fs::remove_dir(dir);
                    }
                    return Err(ExecutorError::io(format!(
                        "create {} (has an agent claimed cgroup parent {parent}?)",
                        dir.display()
                    ))(e));
                }
            }
        }
        if let Err(e) = tc
            .check_controllers()
            .and_then(|()| tc.apply(&spec.resources))
            .and_then(|()| tc.restrict_devices())
        {
            // Best effort: the creation error is the one worth reporting.
            let _ = tc.delete();
            return Err(e);
        }
        Ok(tc)
    }

    /// On v2 a parent that did not enable the task controllers for its
    /// children (one no agent claimed) leaves them out of the task cgroup;
    /// say so instead of failing later on a missing file.
    fn check_controllers(&self) -> Result<(), ExecutorError> {
        if !self.cg.v2() {
            return Ok(());
        }
        let dir = Path::new(UNIFIED_MOUNTPOINT).join(self.cg.path());
        let enabled = std::fs::read_to_string(dir.join("cgroup.controllers")).map_err(
            ExecutorError::io(format!("read {}/cgroup.controllers", dir.display())),
        )?;
        let missing: Vec<&str> = V2_REQUIRED
            .into_iter()
            .filter(|c| !enabled.split_whitespace().any(|e| e == *c))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(ExecutorError::Cgroup(format!(
            "controllers {missing:?} are not enabled for {} \
             (no agent has claimed its parent)",
            dir.display()
        )))
    }

    /// Only the allow-list's devices may be opened: on v1 through the
    /// devices controller (deny all, then allow each rule), on v2 through an
    /// eBPF program on the cgroup, since v2 has no devices controller.
    fn restrict_devices(&self) -> Result<(), ExecutorError> {
        let rules = &device_filter::DEFAULT_DEVICES;
        if self.cg.v2() {
            let dir = Path::new(UNIFIED_MOUNTPOINT).join(self.cg.path());
            return device_filter::attach(&dir, rules);
        }
        let devices: &DevicesController = self.controller("devices")?;
        let write = |file: &str, entry: &str| {
            let path = devices.path().join(file);
            std::fs::write(&path, entry).map_err(ExecutorError::io(format!(
                "write {entry:?} to {}",
                path.display()
            )))
        };
        write("devices.deny", "a")?;
        rules
            .iter()
            .try_for_each(|r| write("devices.allow", &r.v1_entry()))
    }

    /// The task's cgroup under `parent` if it exists: what a crashed
    /// executor left behind.
    pub fn existing(parent: &CgroupParent, alloc_id: &str, task_name: &str) -> Option<TaskCgroup> {
        let layout = Layout::detect().ok()?;
        let relative = parent.join(&task_cgroup_name(alloc_id, task_name));
        Some(load(&layout, &relative))
            .filter(Cgroup::exists)
            .map(|cg| TaskCgroup {
                cg,
                join_files: layout.self_join_files(&relative),
            })
    }

    fn apply(&self, res: &Resources) -> Result<(), ExecutorError> {
        let mem: &MemController = self.controller("memory")?;
        let bytes = (res.memory_mb << 20) as i64;
        mem.set_limit(bytes).map_err(cg_err("set memory limit"))?;
        // Where swap is accounted, the task must not dodge its limit by swapping
        // (v1 counts memory+swap, v2 swap alone).
        let (swap_file, swap) = if self.cg.v2() {
            ("memory.swap.max", 0)
        } else {
            ("memory.memsw.limit_in_bytes", bytes)
        };
        if mem.path().join(swap_file).exists() {
            mem.set_memswap_limit(swap)
                .map_err(cg_err("set swap limit"))?;
        }
        let pids: &PidController = self.controller("pids")?;
        pids.set_pid_max(MaxValue::Value(res.pids_max as i64))
            .map_err(cg_err("set pids.max"))?;
        let cpu: &CpuController = self.controller("cpu")?;
        if self.cg.v2() {
            // Without the cpu controller (the agent warned when it claimed
            // the parent) the task has no weight to set.
            if !cpu.path().join("cpu.weight").exists() {
                return Ok(());
            }
            return (cpu.set_shares(shares_to_weight(res.cpu_shares)))
                .map_err(cg_err("set cpu weight"));
        }
        cpu.set_shares(res.cpu_shares.max(2))
            .map_err(cg_err("set cpu shares"))
    }

    fn controller<'a, T>(&'a self, name: &str) -> Result<&'a T, ExecutorError>
    where
        &'a T: From<&'a cgroups_rs::Subsystem>,
        T: Controller + cgroups_rs::ControllIdentifier,
    {
        self.cg
            .controller_of::<T>()
            .filter(|c| c.exists())
            .ok_or_else(|| ExecutorError::Cgroup(format!("the {name} controller is not available")))
    }

    /// Moves the calling process into the cgroup. The task process calls
    /// it, still one thread, before anything of the task's own runs:
    /// moving itself is what spares the kernel's grace period (see
    /// [`parent::join_self`]), which a move by pid would wait out.
    pub fn join(&self) -> Result<(), ExecutorError> {
        parent::join_self(&self.join_files)
    }

    /// Kills every process in the cgroup: atomically with `cgroup.kill` on v2;
    /// on v1 frozen first, so nothing forks or exits between listing and killing.
    pub fn kill_all(&self) -> Result<(), ExecutorError> {
        self.kill(None)
    }

    /// [`TaskCgroup::kill_all`], through `pinned` (the caller's pidfds of
    /// the cgroup's processes) on v1, or through pidfds pinned once frozen.
    fn kill(&self, pinned: Option<&[Member]>) -> Result<(), ExecutorError> {
        if self.cg.v2() && self.cg.kill().is_ok() {
            return Ok(());
        }
        let freezer = self.cg.controller_of::<FreezerController>();
        if let Some(f) = freezer {
            f.freeze().map_err(cg_err("freeze the task cgroup"))?;
        }
        let signalled = match pinned {
            Some(members) => {
                sigkill(members);
                Ok(())
            }
            None => self.pinned_members().map(|members| sigkill(&members)),
        };
        let thawed = match freezer {
            Some(f) => f.thaw().map_err(cg_err("thaw the task cgroup")),
            None => Ok(()),
        };
        signalled.and(thawed)
    }

    /// The cgroup's processes, each pinned by a pidfd opened after it was
    /// listed and kept only if the cgroup still lists it: a pid that was
    /// reaped and reused by a process elsewhere between the two is never
    /// signalled nor waited on (a pidfd, unlike a pid, cannot come to name
    /// another). A pidfd that cannot be opened (out of fds) is an error,
    /// not a process left alive unnoticed.
    fn pinned_members(&self) -> Result<Vec<Member>, ExecutorError> {
        let mut listed = Vec::new();
        // A process of another pid namespace reads as 0 (v2): only
        // `cgroup.kill` reaches it.
        for pid in (self.cg.procs().iter())
            .map(|p| p.pid as i32)
            .filter(|&p| p != 0)
        {
            if let Some(pidfd) = pidfd_open_if_alive(pid)? {
                listed.push(Member { pid, pidfd });
            }
        }
        let still: std::collections::HashSet<i32> =
            self.cg.procs().iter().map(|p| p.pid as i32).collect();
        listed.retain(|m| still.contains(&m.pid));
        Ok(listed)
    }

    /// Whether the kernel OOM-killed anything in the cgroup.
    pub fn oom_killed(&self) -> bool {
        let Some(mem) = self.cg.controller_of::<MemController>() else {
            return false;
        };
        let file = if self.cg.v2() {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(mem.path().join(file))
            .map(|s| oom_kill_count(&s) > 0)
            .unwrap_or(false)
    }

    /// Kills everything in the cgroup, waits until each process has exited,
    /// and removes the cgroup. Returns the pids it killed.
    pub fn destroy(&self) -> Result<Vec<i32>, ExecutorError> {
        let mut killed = Vec::new();
        loop {
            // Pinned before the kill, and killed through those pidfds: each
            // wait is on a process of this cgroup that was sent the kill.
            // One forked since is the next round's.
            let members = self.pinned_members()?;
            if members.is_empty() && self.cg.procs().is_empty() {
                break;
            }
            self.kill(Some(&members))?;
            for member in &members {
                wait_exited(member.pidfd.as_fd())?;
            }
            killed.extend(members.iter().map(|m| m.pid));
        }
        self.delete()?;
        Ok(killed)
    }

    pub fn delete(&self) -> Result<(), ExecutorError> {
        self.cg
            .delete()
            .map_err(cg_err(format!("remove {}", self.cg.path())))
    }
}

/// A process of a task cgroup, pinned (see [`TaskCgroup::pinned_members`]).
struct Member {
    pid: i32,
    pidfd: std::os::fd::OwnedFd,
}

fn sigkill(members: &[Member]) {
    for member in members {
        // A process that already exited is fine.
        let _ = pidfd_send_signal(member.pidfd.as_fd(), Signal::SIGKILL);
    }
}

/// The leaf name of a task's cgroup: `taskgate.<alloc_id>.<task_name>`
/// (the oracle and the leftover checks find tasks by it).
pub fn task_cgroup_name(alloc_id: &str, task_name: &str) -> String {
    format!("taskgate.{alloc_id}.{task_name}")
}

/// A handle (cgroups-rs's) on the cgroup at `relative` in the hierarchies a
/// task uses. Created by the caller: cgroups-rs's own create would enable
/// controllers in every cgroup above, the root's included.
fn load(layout: &Layout, relative: &str) -> Cgroup {
    Cgroup::load_with_specified_controllers(hierarchies::auto(), relative, layout.controllers())
}

/// runc's mapping of cpu.shares [2, 262144] onto cpu.weight [1, 10000].
fn shares_to_weight(shares: u64) -> u64 {
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262_142
}

/// The `oom_kill N` line of memory.oom_control (v1) or memory.events (v2).
fn oom_kill_count(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn cg_err<E: std::fmt::Display>(what: impl Into<String>) -> impl FnOnce(E) -> ExecutorError {
    let what = what.into();
    move |e| ExecutorError::Cgroup(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_map_onto_the_whole_weight_range() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(shares_to_weight(1), 1);
    }

    #[test]
    fn oom_kills_are_read_from_either_format() {
        assert_eq!(
            oom_kill_count("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"),
            2
        );
        assert_eq!(
            oom_kill_count("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"),
            1
        );
        assert_eq!(oom_kill_count("oom_kill_disable 0\n"), 0);
    }
}
