//! The one cgroup subtree an agent owns, and how it claims and gives it
//! back. Every task cgroup is a child of the agent's parent, never of
//! whatever cgroup a process happens to be in:
//!
//! ```text
//! <parent>/                           cpu, memory, pids enabled for children (v2)
//! <parent>/executors                  every executor: they outlive the agent
//! <parent>/agent                      the agent, when it was started in the parent itself
//! <parent>/taskgate.<alloc>.<task>    one per task
//! ```
//!
//! On v1 the same relative paths exist in each controller a task uses. The
//! agent touches no cgroup outside its parent: it creates the parent (and
//! only the parent, never what is above it), marks what it made or changed
//! with `trusted.taskgate.*` extended attributes on the parent, and
//! [`CgroupTree::release`] undoes exactly that once no task lives there.

use super::xattr::{get_xattr, remove_xattr, set_xattr};
use crate::error::ExecutorError;
use crate::sys::{flock, same_file};
use cgroups_rs::hierarchies::{self, UNIFIED_MOUNTPOINT, V1};
use cgroups_rs::Controllers;
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// The leaf every executor moves into before it starts its task.
pub const EXECUTORS_LEAF: &str = "executors";
/// The leaf an agent started inside its parent moves into: on v2 a cgroup
/// that gives controllers to its children may hold no process itself.
pub const AGENT_LEAF: &str = "agent";
/// The parent an agent creates when none is delegated or given (as Nomad's
/// `nomad.slice`).
pub const DEDICATED_V2: &str = "/taskgate.slice";
pub const DEDICATED_V1: &str = "/taskgate";

/// Controllers a task uses on v2; enabling every available one would also
/// drag in cpuset/io/hugetlb for nothing.
pub(crate) const V2_CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];
/// Those a task cannot run without: its memory and process limits. Without
/// cpu a task only loses its CPU weight, a relative share, and the agent
/// says so (systemd enables cpu at the root for a unit with `Delegate=yes`
/// or `CPUAccounting=yes`, such as the shipped one).
pub(crate) const V2_REQUIRED: [&str; 2] = ["memory", "pids"];
/// The v1 hierarchies a task cgroup lives in. Never cpuset (a new cpuset
/// cgroup has no CPUs until someone copies them in) and never systemd's
/// own `name=systemd`.
pub(crate) const V1_CONTROLLERS: [&str; 5] = ["memory", "pids", "cpu", "devices", "freezer"];

/// On a parent: "1" when taskgate created it (and removes it once empty).
const CREATED_MARK: &str = "trusted.taskgate.created";
/// On a v2 parent taskgate did not create: the controllers it enabled for
/// the parent's children, disabled again on release.
const ENABLED_MARK: &str = "trusted.taskgate.enabled";
/// How systemd's system manager marks a cgroup it delegated
/// (`Delegate=yes`); a user's manager, which cannot write `trusted.*`,
/// marks its own [`USER_DELEGATE_MARK`].
const SYSTEM_DELEGATE_MARK: &str = "trusted.delegate";
const USER_DELEGATE_MARK: &str = "user.delegate";

/// A cgroup path from the hierarchy's root (`/taskgate.slice`), the same
/// in every hierarchy. Never the root itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CgroupParent(String);

impl CgroupParent {
    pub fn new(path: &str) -> Result<CgroupParent, ExecutorError> {
        let bad = |why: &str| {
            Err(ExecutorError::Cgroup(format!(
                "cgroup parent {path:?} {why}"
            )))
        };
        if !path.starts_with('/') {
            return bad("must be a path from the hierarchy's root, such as /taskgate.slice");
        }
        let trimmed = path.trim_matches('/');
        if trimmed.is_empty() {
            return bad("is the root cgroup, which no agent owns");
        }
        for part in trimmed.split('/') {
            if part.is_empty() || part == "." || part == ".." {
                return bad("must not hold empty, `.` or `..` components");
            }
            if part.starts_with("cgroup.") || part.contains(['\n', '\0']) {
                return bad("holds a name the kernel keeps for itself");
            }
        }
        Ok(CgroupParent(format!("/{trimmed}")))
    }

    /// The parent an agent creates for itself on this layout.
    pub fn dedicated(v2: bool) -> CgroupParent {
        CgroupParent(if v2 { DEDICATED_V2 } else { DEDICATED_V1 }.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the parent's cgroup exists on this host (in every hierarchy
    /// a task uses).
    pub fn exists(&self) -> bool {
        Layout::detect().is_ok_and(|layout| layout.dirs(self.relative()).iter().all(|d| d.is_dir()))
    }

    /// The path relative to each hierarchy's root.
    pub(crate) fn relative(&self) -> &str {
        self.0.trim_start_matches('/')
    }

    /// `leaf` under this parent, relative to each hierarchy's root.
    pub(crate) fn join(&self, leaf: &str) -> String {
        format!("{}/{leaf}", self.relative())
    }
}

impl std::fmt::Display for CgroupParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for CgroupParent {
    type Err = ExecutorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CgroupParent::new(s)
    }
}

impl TryFrom<String> for CgroupParent {
    type Error = ExecutorError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        CgroupParent::new(&s)
    }
}

impl From<CgroupParent> for String {
    fn from(p: CgroupParent) -> String {
        p.0
    }
}

/// The host's cgroup layout: the unified hierarchy, or the v1 controller
/// mounts a task uses.
#[derive(Debug, Clone)]
pub(crate) enum Layout {
    V2,
    V1 { mounts: Vec<PathBuf> },
}

impl Layout {
    pub fn detect() -> Result<Layout, ExecutorError> {
        if hierarchies::is_cgroup2_unified_mode() {
            return Ok(Layout::V2);
        }
        let v1 = V1::new();
        let mut mounts = Vec::new();
        for name in V1_CONTROLLERS {
            let mount = v1.get_mount_point(v1_controller(name)).ok_or_else(|| {
                ExecutorError::Cgroup(format!("the cgroup v1 {name} controller is not mounted"))
            })?;
            // cpu shares its mount with cpuacct on most hosts.
            if !mounts.contains(&mount) {
                mounts.push(mount);
            }
        }
        Ok(Layout::V1 { mounts })
    }

    pub fn v2(&self) -> bool {
        matches!(self, Layout::V2)
    }

    /// The directory of `relative` in every hierarchy taskgate uses.
    pub fn dirs(&self, relative: &str) -> Vec<PathBuf> {
        match self {
            Layout::V2 => vec![Path::new(UNIFIED_MOUNTPOINT).join(relative)],
            Layout::V1 { mounts } => mounts.iter().map(|m| m.join(relative)).collect(),
        }
    }

    /// The file in each of [`Layout::dirs`] that [`join_self`] writes to.
    /// On v1 it is `tasks`, which moves the calling thread alone, and the
    /// kernel then skips write-locking its global threadgroup rwsem: the
    /// first writer of that lock after a quiet spell waits out an RCU grace
    /// period (6 to 14 ms on the project's VM, most of a task's start when
    /// each start moved two processes through `cgroup.procs`). v2 has no
    /// `tasks` in a domain cgroup: there it is `cgroup.procs`.
    pub fn self_join_files(&self, relative: &str) -> Vec<PathBuf> {
        let file = match self {
            Layout::V2 => "cgroup.procs",
            Layout::V1 { .. } => "tasks",
        };
        self.dirs(relative)
            .into_iter()
            .map(|d| d.join(file))
            .collect()
    }

    /// The controller names cgroups-rs is told to handle.
    pub fn controllers(&self) -> Vec<String> {
        let names: &[&str] = if self.v2() {
            &V2_CONTROLLERS
        } else {
            &V1_CONTROLLERS
        };
        names.iter().map(|c| c.to_string()).collect()
    }
}

fn v1_controller(name: &str) -> Controllers {
    match name {
        "memory" => Controllers::Mem,
        "pids" => Controllers::Pids,
        "cpu" => Controllers::Cpu,
        "devices" => Controllers::Devices,
        "freezer" => Controllers::Freezer,
        other => unreachable!("{other} is not in V1_CONTROLLERS"),
    }
}

/// How an agent's parent was chosen when none was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParentChoice {
    /// systemd delegated this cgroup and started the agent in a leaf of
    /// it (`Delegate=yes` with `DelegateSubgroup=`, systemd 254 and later).
    Delegated(CgroupParent),
    /// A parent of taskgate's own; `note` says why a delegated cgroup was
    /// not used.
    Dedicated {
        parent: CgroupParent,
        note: Option<String>,
    },
}

impl ParentChoice {
    pub fn parent(&self) -> &CgroupParent {
        match self {
            ParentChoice::Delegated(parent) | ParentChoice::Dedicated { parent, .. } => parent,
        }
    }
}

impl std::fmt::Display for ParentChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParentChoice::Delegated(p) => write!(f, "{p} (delegated by systemd)"),
            ParentChoice::Dedicated { parent, note: None } => {
                write!(f, "{parent} (taskgate's own)")
            }
            ParentChoice::Dedicated {
                parent,
                note: Some(note),
            } => write!(f, "{parent} (taskgate's own: {note})"),
        }
    }
}

/// Chooses the parent for an agent in cgroup `own` (its v2 path; `None` on
/// v1), given which cgroups systemd marks as delegated.
pub fn choose_parent(own: Option<&str>, delegated: impl Fn(&str) -> bool) -> ParentChoice {
    let Some(own) = own else {
        return ParentChoice::Dedicated {
            parent: CgroupParent::dedicated(false),
            note: None,
        };
    };
    let dedicated = |note: Option<String>| ParentChoice::Dedicated {
        parent: CgroupParent::dedicated(true),
        note,
    };
    let above = Path::new(own).parent().and_then(Path::to_str);
    if let Some(above) = above.filter(|a| *a != "/" && delegated(a)) {
        if let Ok(parent) = CgroupParent::new(above) {
            return ParentChoice::Delegated(parent);
        }
    }
    if own != "/" && delegated(own) {
        // systemd starts the next agent at the top of this cgroup, and
        // before 254 resets its controllers there: with task cgroups below
        // holding processes, the unit could not start again.
        return dedicated(Some(format!(
            "{own} is delegated, but the agent runs at its top \
             (no DelegateSubgroup=): tasks there would keep the unit from restarting"
        )));
    }
    dedicated(None)
}

/// [`choose_parent`] for this process, from `/proc/self/cgroup` and
/// systemd's marks.
pub fn auto_parent() -> Result<ParentChoice, ExecutorError> {
    if !Layout::detect()?.v2() {
        return Ok(choose_parent(None, |_| false));
    }
    let own = own_v2_cgroup()?;
    Ok(choose_parent(Some(&own), |path| {
        let dir = Path::new(UNIFIED_MOUNTPOINT).join(path.trim_start_matches('/'));
        let marked = |mark| get_xattr(&dir, mark).as_deref() == Some("1");
        let owner =
            std::fs::metadata(&dir).map_or(u32::MAX, |m| std::os::unix::fs::MetadataExt::uid(&m));
        delegation_trusted(
            marked(SYSTEM_DELEGATE_MARK),
            marked(USER_DELEGATE_MARK),
            owner,
        )
    }))
}

/// Whether a cgroup marked so, owned by `owner`, was delegated to this
/// agent's tasks: a `user.*` mark its owner could set, and so, on a
/// cgroup a user owns, could hand root's tasks to a user who can strip
/// their limits (its `cgroup.subtree_control` is theirs).
fn delegation_trusted(system_mark: bool, user_mark: bool, owner: u32) -> bool {
    system_mark || (user_mark && owner == 0)
}

/// This process's cgroup from the `0::<path>` line of `/proc/self/cgroup`.
fn own_v2_cgroup() -> Result<String, ExecutorError> {
    let text = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(ExecutorError::io("read /proc/self/cgroup"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
        .ok_or_else(|| ExecutorError::Cgroup("no unified entry in /proc/self/cgroup".into()))
}

/// A parent claimed by an agent (or a test): it exists, gives the task
/// controllers to its children, and holds the executors' leaf.
///
/// Agents of different data dirs may claim one parent (the default one).
/// Each claim holds the parent's directory (the first hierarchy's) with a
/// shared `flock` for its life, and only a release that takes it exclusive
/// gives anything back; a crashed agent's hold goes with it.
#[derive(Debug)]
pub struct CgroupTree {
    parent: CgroupParent,
    layout: Layout,
    hold: std::fs::File,
}

/// What [`CgroupTree::release`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Nothing of a task was left: what taskgate made or changed is undone.
    Undone,
    /// An executor, a task cgroup, or another process in the agent's leaf
    /// lives on: the parent and every cgroup holding something are kept,
    /// for the next agent, whose claim makes the rest ready again.
    InUse,
    /// Another agent's claim holds the parent: all kept, for it.
    Shared,
}

impl CgroupTree {
    /// Makes `parent` ready for task cgroups; does nothing that is done
    /// already, so every agent of a data dir claims it again. Creates the
    /// parent if it is missing (never what is above it), and on v2 enables
    /// the task controllers for its children. An agent started inside the
    /// parent itself moves into the `agent` leaf first; any other process
    /// there is an error, since a v2 cgroup with processes cannot give
    /// controllers to its children.
    /// A claim that fails part way gives back what it made, as a release.
    pub fn claim(parent: &CgroupParent) -> Result<CgroupTree, ExecutorError> {
        let layout = Layout::detect()?;
        let first = layout.dirs(parent.relative()).swap_remove(0);
        let hold = loop {
            create_dir_once_marked(&first)?;
            let dir = match std::fs::File::open(&first) {
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                opened => opened.map_err(ExecutorError::io(format!("open {}", first.display())))?,
            };
            // Waits out a release under way, which may remove the parent.
            flock(&dir, libc::LOCK_SH)
                .map_err(ExecutorError::io(format!("lock {}", first.display())))?;
            if same_file(&dir, &first) {
                break dir;
            }
        };
        let tree = CgroupTree {
            parent: parent.clone(),
            layout,
            hold,
        };
        tree.make_ready().inspect_err(|_| {
            if let Err(err) = tree.release() {
                tracing::warn!(parent = %tree.parent, error = %err, "giving back a failed claim");
            }
        })?;
        Ok(tree)
    }

    fn make_ready(&self) -> Result<(), ExecutorError> {
        let dirs = self.dirs();
        for dir in &dirs {
            create_dir_once_marked(dir)?;
        }
        if self.layout.v2() {
            enable_controllers(&dirs[0])?;
        }
        for dir in &dirs {
            create_dir_once(&dir.join(EXECUTORS_LEAF))?;
        }
        Ok(())
    }

    pub fn parent(&self) -> &CgroupParent {
        &self.parent
    }

    /// Every directory of the parent (one per hierarchy).
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.layout.dirs(self.parent.relative())
    }

    /// Gives back what taskgate made or changed, once nothing of a task
    /// lives under the parent: the executors' leaf, the controllers it
    /// enabled, the agent's leaf, and the parent if taskgate created it.
    /// While an executor or a task cgroup is left, it keeps everything for
    /// the next agent. The kernel refuses to remove a cgroup that holds a
    /// process or a child, so nothing alive is ever pulled out from under.
    ///
    /// A release that finds another claim ends this one (its agent starts
    /// no task any more; a launch still under way as its runtime shut down
    /// may then find the executors' leaf gone, and its attempt is lost for
    /// the next agent to restore): the kernel dropped the shared hold as it
    /// refused the exclusive one, and not taking it again is what lets
    /// another agent's release, under way at the same instant, give the
    /// parent back.
    pub fn release(&self) -> Result<Released, ExecutorError> {
        let lock = |op| {
            flock(&self.hold, op).map_err(ExecutorError::io(format!(
                "lock cgroup parent {}",
                self.parent
            )))
        };
        if !lock(libc::LOCK_EX | libc::LOCK_NB)? {
            return Ok(Released::Shared);
        }
        // Released before (an agent's exit, then its engine's drop): the
        // parent this claim held is gone, and the one at its path now, if
        // any, is another agent's claim.
        let released = if same_file(&self.hold, &self.dirs()[0]) {
            self.give_back()
        } else {
            Ok(Released::Undone)
        };
        lock(libc::LOCK_SH)?;
        released
    }

    /// [`CgroupTree::release`]'s work, with the parent held exclusive.
    fn give_back(&self) -> Result<Released, ExecutorError> {
        let dirs = self.dirs();
        for dir in &dirs {
            if !remove_cgroup(&dir.join(EXECUTORS_LEAF))? {
                return Ok(Released::InUse);
            }
        }
        for dir in &dirs {
            let tasks_left = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != AGENT_LEAF);
            if tasks_left {
                return Ok(Released::InUse);
            }
        }
        if self.layout.v2() {
            let dir = &dirs[0];
            disable_enabled_controllers(dir)?;
            if !leave_agent_leaf(dir)? {
                return Ok(Released::InUse);
            }
        }
        // The held directory last: a claim waiting for it finds every
        // hierarchy's parent gone once it may go on.
        for dir in dirs.iter().rev() {
            if get_xattr(dir, CREATED_MARK).is_some() && !remove_cgroup(dir)? {
                return Ok(Released::InUse);
            }
        }
        Ok(Released::Undone)
    }
}

/// Moves this process into `<parent>/executors` in every hierarchy. The
/// executor calls it as soon as it has daemonized, while it is still one
/// thread (see [`join_self`]).
pub(crate) fn join_executors(parent: &CgroupParent) -> Result<(), ExecutorError> {
    let files = Layout::detect()?.self_join_files(&parent.join(EXECUTORS_LEAF));
    join_self(&files).map_err(|e| {
        ExecutorError::Cgroup(format!(
            "{e} (no agent has claimed cgroup parent {parent}?)"
        ))
    })
}

/// Moves the calling process into the cgroup of each of `files` (from
/// [`Layout::self_join_files`]) by writing `0`, "the caller". The caller
/// must be single-threaded: on v1 only the calling thread moves, which for
/// a process of one thread is the whole process.
pub(crate) fn join_self(files: &[PathBuf]) -> Result<(), ExecutorError> {
    files.iter().try_for_each(|file| {
        std::fs::write(file, "0").map_err(ExecutorError::io(format!("join {}", file.display())))
    })
}

/// Creates `dir` marked as taskgate's (what a release removes); `false` if
/// it existed. One it could not mark goes again: unmarked, no release
/// would ever remove it.
fn create_dir_once_marked(dir: &Path) -> Result<bool, ExecutorError> {
    match std::fs::create_dir(dir) {
        Ok(()) => set_xattr(dir, CREATED_MARK, "1")
            .inspect_err(|_| {
                let _ = std::fs::remove_dir(dir);
            })
            .map(|()| true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(ExecutorError::Cgroup(format!(
            "cannot create cgroup {}: {} does not exist (taskgate creates its parent, never what is above it)",
            dir.display(),
            dir.parent().unwrap_or(dir).display()
        ))),
        Err(e) => Err(ExecutorError::io(format!("create cgroup {}", dir.display()))(e)),
    }
}

fn create_dir_once(dir: &Path) -> Result<(), ExecutorError> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != ErrorKind::AlreadyExists => Err(ExecutorError::io(format!(
            "create cgroup {}",
            dir.display()
        ))(e)),
        _ => Ok(()),
    }
}

/// Removes an empty cgroup: `false` when it still holds a process or a child.
fn remove_cgroup(dir: &Path) -> Result<bool, ExecutorError> {
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::ENOTEMPTY)) => Ok(false),
        Err(e) => Err(ExecutorError::io(format!(
            "remove cgroup {}",
            dir.display()
        ))(e)),
    }
}

/// Enables the task controllers for the parent's children (v2). They must
/// be available to the parent: taskgate never enables anything above it.
fn enable_controllers(dir: &Path) -> Result<(), ExecutorError> {
    let available = read_words(&dir.join("cgroup.controllers"))?;
    let has = |c: &str| available.iter().any(|a| a == c);
    let unavailable: Vec<&str> = V2_REQUIRED.into_iter().filter(|c| !has(c)).collect();
    if !unavailable.is_empty() {
        return Err(ExecutorError::Cgroup(format!(
            "controllers {unavailable:?} are not available in {}: the cgroup above it does not \
             enable them, and taskgate never changes a cgroup outside its own (on a systemd \
             host, run the agent from its unit: Delegate=yes makes systemd enable them)",
            dir.display()
        )));
    }
    if !has("cpu") {
        tracing::warn!(
            "the cpu controller is not available in {}: tasks get no CPU weight \
             (on a systemd host, run the agent from its unit: Delegate=yes makes systemd enable it)",
            dir.display()
        );
    }
    let enabled = read_words(&dir.join("cgroup.subtree_control"))?;
    let missing: Vec<&str> = V2_CONTROLLERS
        .into_iter()
        .filter(|c| has(c) && !enabled.iter().any(|e| e == c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    make_room(dir)?;
    // Recorded before they are enabled, so an agent killed between the two
    // leaves no change unrecorded; a write that fails takes it back.
    let before = get_xattr(dir, ENABLED_MARK);
    if get_xattr(dir, CREATED_MARK).is_none() {
        let mut recorded = before.clone().unwrap_or_default();
        for c in &missing {
            if !recorded.split_whitespace().any(|r| r == *c) {
                recorded = format!("{recorded} {c}").trim().to_string();
            }
        }
        set_xattr(dir, ENABLED_MARK, &recorded)?;
    }
    let change: Vec<String> = missing.iter().map(|c| format!("+{c}")).collect();
    write_subtree_control(dir, &change.join(" ")).inspect_err(|_| {
        let _ = match &before {
            Some(recorded) => set_xattr(dir, ENABLED_MARK, recorded),
            None => remove_xattr(dir, ENABLED_MARK),
        };
    })
}

/// A v2 cgroup gives controllers to its children only while it holds no
/// process: an agent started in the parent moves into its own leaf; any
/// other process there is the caller's to move.
fn make_room(dir: &Path) -> Result<(), ExecutorError> {
    let me = std::process::id().to_string();
    let procs = read_words(&dir.join("cgroup.procs"))?;
    let others: Vec<&String> = procs.iter().filter(|p| **p != me).collect();
    if !others.is_empty() {
        return Err(ExecutorError::Cgroup(format!(
            "cgroup {} holds processes {others:?}: a cgroup v2 parent with processes cannot give \
             controllers to task cgroups; give --cgroup-parent a cgroup of its own",
            dir.display()
        )));
    }
    if procs.is_empty() {
        return Ok(());
    }
    let leaf = dir.join(AGENT_LEAF);
    if create_dir_once_marked(&leaf)? {
        tracing::info!("moved the agent into {}", leaf.display());
    }
    std::fs::write(leaf.join("cgroup.procs"), &me).map_err(ExecutorError::io(format!(
        "move the agent into {}",
        leaf.display()
    )))
}

fn disable_enabled_controllers(dir: &Path) -> Result<(), ExecutorError> {
    let Some(recorded) = get_xattr(dir, ENABLED_MARK) else {
        return Ok(());
    };
    let change: Vec<String> = recorded
        .split_whitespace()
        .map(|c| format!("-{c}"))
        .collect();
    if !change.is_empty() {
        write_subtree_control(dir, &change.join(" "))?;
    }
    remove_xattr(dir, ENABLED_MARK)
}

/// An agent that moved itself into the `agent` leaf goes back, and the
/// leaf goes, once the parent gives no controller to its children (only
/// then may the parent hold a process again). `false` while another
/// process is in the leaf (an executor the agent started that has yet to
/// join its own): the leaf stays.
fn leave_agent_leaf(dir: &Path) -> Result<bool, ExecutorError> {
    let leaf = dir.join(AGENT_LEAF);
    if get_xattr(&leaf, CREATED_MARK).is_none()
        || !read_words(&dir.join("cgroup.subtree_control"))?.is_empty()
    {
        return Ok(true);
    }
    let me = std::process::id().to_string();
    if read_words(&leaf.join("cgroup.procs"))?.contains(&me) {
        std::fs::write(dir.join("cgroup.procs"), &me).map_err(ExecutorError::io(format!(
            "move the agent back to {}",
            dir.display()
        )))?;
    }
    remove_cgroup(&leaf)
}

fn write_subtree_control(dir: &Path, change: &str) -> Result<(), ExecutorError> {
    let file = dir.join("cgroup.subtree_control");
    std::fs::write(&file, change).map_err(ExecutorError::io(format!(
        "write {change:?} to {}",
        file.display()
    )))
}

fn read_words(file: &Path) -> Result<Vec<String>, ExecutorError> {
    std::fs::read_to_string(file)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .map_err(ExecutorError::io(format!("read {}", file.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// systemd's own mark is taken; a user's, only on a cgroup root owns
    /// (its owner could have set it, and would control the tasks' limits).
    #[test]
    fn a_delegation_a_user_could_fake_is_not_taken() {
        assert!(delegation_trusted(true, false, 1000));
        assert!(delegation_trusted(false, true, 0));
        assert!(!delegation_trusted(false, true, 1000));
        assert!(!delegation_trusted(false, false, 0));
    }

    #[test]
    fn a_parent_is_a_plain_path_below_the_root() {
        for (given, taken) in [
            ("/taskgate.slice", "/taskgate.slice"),
            (
                "/system.slice/taskgate.service/",
                "/system.slice/taskgate.service",
            ),
            ("//a//", "/a"),
        ] {
            let parent = CgroupParent::new(given).unwrap();
            assert_eq!(parent.as_str(), taken);
        }
        assert_eq!(CgroupParent::new("/a/b").unwrap().join("x"), "a/b/x");
        for bad in [
            "taskgate.slice",
            "/",
            "",
            "/a/../b",
            "/a//b",
            "/./a",
            "/a/cgroup.procs",
        ] {
            assert!(CgroupParent::new(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_parent_survives_the_wire_and_refuses_garbage() {
        let parent = CgroupParent::new("/taskgate.slice").unwrap();
        let json = serde_json::to_string(&parent).unwrap();
        assert_eq!(json, "\"/taskgate.slice\"");
        assert_eq!(serde_json::from_str::<CgroupParent>(&json).unwrap(), parent);
        assert!(serde_json::from_str::<CgroupParent>("\"/\"").is_err());
    }

    fn marked<'a>(paths: &'a [&'a str]) -> impl Fn(&str) -> bool + 'a {
        move |p| paths.contains(&p)
    }

    #[test]
    fn a_delegated_cgroup_is_used_only_from_a_leaf_below_it() {
        const UNIT: &str = "/system.slice/taskgate.service";
        let unit = UNIT;
        // DelegateSubgroup=agent: systemd starts the agent in a leaf.
        assert_eq!(
            choose_parent(Some(&format!("{unit}/agent")), marked(&[UNIT])),
            ParentChoice::Delegated(CgroupParent::new(unit).unwrap())
        );
        // Delegate=yes alone: the agent sits at the top, where the next
        // one starts too; taskgate's own parent it is, and the log says why.
        match choose_parent(Some(unit), marked(&[UNIT])) {
            ParentChoice::Dedicated {
                parent,
                note: Some(note),
            } => {
                assert_eq!(parent.as_str(), DEDICATED_V2);
                assert!(note.contains("DelegateSubgroup"), "{note}");
            }
            other => panic!("{other:?}"),
        }
        // A login session: nothing delegated.
        assert_eq!(
            choose_parent(
                Some("/user.slice/user-0.slice/session-1.scope"),
                marked(&[])
            ),
            ParentChoice::Dedicated {
                parent: CgroupParent::dedicated(true),
                note: None
            }
        );
        // The root cgroup, and v1.
        assert_eq!(
            choose_parent(Some("/"), marked(&["/"])).parent().as_str(),
            DEDICATED_V2
        );
        assert_eq!(
            choose_parent(None, marked(&[])).parent().as_str(),
            DEDICATED_V1
        );
    }
}
