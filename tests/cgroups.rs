//! The cgroup rule at the executor's level: a task's cgroup is a child of
//! the agent's parent (never of its launcher's or executor's cgroup), the
//! executor sits in the parent's `executors` leaf, and a parent is made
//! only where tasks need it. The agent's whole life under the rule is in
//! tests/agent.rs. Run as root:
//! `cargo test --features privileged --test cgroups -- --test-threads=1`.

mod common;

use common::Sandbox;
use serial_test::serial;
use std::path::{Path, PathBuf};

/// The task's cgroup is a child of the agent's parent (here the sandbox's),
/// never of the cgroup its launcher or executor happened to be in; the
/// executor sits in the parent's `executors` leaf, out of its launcher's.
#[test]
#[serial]
fn limits_apply_to_a_task_cgroup_under_the_agents_parent() {
    let sb = Sandbox::new();
    let mut spec = sb.spec("lim", "read x < /local/go");
    spec.resources = taskgate_executor::Resources {
        cpu_shares: 512,
        memory_mb: 48,
        pids_max: 21,
    };
    let go = sb.fifo("lim", "go");
    let exec = sb.launch(&spec).expect("launch");
    let info = exec.reattach_info();
    let parent = PathBuf::from(sb.cgroups.parent().as_str().trim_start_matches('/'));
    let leaf = parent.join(format!("taskgate.{}.lim", sb.alloc_id));
    let executors = parent.join(taskgate_executor::EXECUTORS_LEAF);
    let task = common::cgroups_of(&info.task_pid.to_string());
    let executor = common::cgroups_of(&info.executor_pid.to_string());
    let cg = PathBuf::from("/sys/fs/cgroup");
    let read =
        |p: PathBuf| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        assert_eq!(task[""], leaf);
        assert_eq!(executor[""], executors);
        let dir = cg.join(&leaf);
        assert_eq!(
            read(dir.join("memory.max")).trim(),
            (48u64 << 20).to_string()
        );
        assert_eq!(read(dir.join("pids.max")).trim(), "21");
        assert_eq!(
            read(dir.join("cpu.weight")).trim(),
            (1 + (510 * 9999) / 262_142).to_string()
        );
    } else {
        for ctrl in ["memory", "pids", "cpu", "devices", "freezer"] {
            assert_eq!(task[ctrl], leaf, "{ctrl}");
            assert_eq!(executor[ctrl], executors, "{ctrl}");
        }
        // Nothing of cpuset's or systemd's own hierarchy is taskgate's.
        let own = common::cgroups_of("self");
        for ctrl in ["cpuset", "name=systemd"] {
            if own.contains_key(ctrl) {
                assert_eq!(task[ctrl], own[ctrl], "{ctrl}");
            }
        }
        let dir = |ctrl: &str| cg.join(ctrl).join(&leaf);
        assert_eq!(
            read(dir("memory").join("memory.limit_in_bytes")).trim(),
            (48u64 << 20).to_string()
        );
        assert_eq!(read(dir("pids").join("pids.max")).trim(), "21");
        assert_eq!(read(dir("cpu").join("cpu.shares")).trim(), "512");
    }
    common::write_fifo(&go, "go\n");
    assert!(exec.wait().expect("wait").successful());
    exec.shutdown().expect("shutdown");
    sb.assert_no_leftovers();
}

/// A parent is made only where tasks need it, and given back whole. On v1:
/// in the memory, pids, cpu, devices and freezer hierarchies, never in
/// cpuset (a new cpuset cgroup has no CPUs) or systemd's own. On v2, under
/// a cgroup that hands down memory and pids but not cpu (the agent never
/// changes the cgroup above its parent): tasks still run, without a CPU
/// weight.
#[test]
#[serial]
fn a_parent_is_made_only_where_tasks_need_it() {
    let sb = Sandbox::new();
    let cg = Path::new("/sys/fs/cgroup");
    if !cg.join("cgroup.controllers").exists() {
        let parent = sb.cgroups.parent().as_str().trim_start_matches('/');
        for ctrl in ["memory", "pids", "cpu", "devices", "freezer"] {
            assert!(cg.join(ctrl).join(parent).is_dir(), "no {ctrl} cgroup");
        }
        for ctrl in ["cpuset", "blkio", "systemd"] {
            assert!(!cg.join(ctrl).join(parent).exists(), "a {ctrl} cgroup");
        }
        sb.assert_no_leftovers();
        return;
    }
    let above = cg.join(format!("taskgate-test-nocpu-{}", sb.alloc_id));
    std::fs::create_dir(&above).unwrap();
    std::fs::write(above.join("cgroup.subtree_control"), "+memory +pids").unwrap();
    let parent = taskgate_executor::CgroupParent::new(&format!(
        "/{}/tasks",
        above.file_name().unwrap().to_string_lossy()
    ))
    .unwrap();
    let tree = taskgate_executor::CgroupTree::claim(&parent).expect("claim without cpu");
    let enabled = std::fs::read_to_string(above.join("tasks/cgroup.subtree_control")).unwrap();
    assert_eq!(enabled.trim(), "memory pids");
    let config = taskgate_executor::ExecutorConfig {
        cgroup_parent: parent,
        ..sb.config()
    };
    let spec = sb.spec("web", "read x < /local/go");
    let go = sb.fifo("web", "go");
    let exec = taskgate_executor::launch(&config, &spec).expect("launch without cpu");
    let leaf = above.join(format!("tasks/taskgate.{}.web", sb.alloc_id));
    assert_eq!(
        std::fs::read_to_string(leaf.join("memory.max"))
            .unwrap()
            .trim(),
        (64u64 << 20).to_string()
    );
    assert!(!leaf.join("cpu.weight").exists());
    common::write_fifo(&go, "go\n");
    assert!(exec.wait().expect("wait").successful());
    exec.shutdown().expect("shutdown");
    assert_eq!(tree.release().unwrap(), taskgate_executor::Released::Undone);
    assert!(!above.join("tasks").exists());
    std::fs::remove_dir(&above).unwrap();
    sb.assert_no_leftovers();
}

/// A claim that fails part way gives back what it made: here the parent's
/// own parent is missing from one hierarchy (v1; each in turn), or gives
/// its children no controllers (v2), so the claim fails after it created
/// the parent elsewhere.
#[test]
#[serial]
fn a_claim_that_fails_leaves_nothing_it_made() {
    let sb = Sandbox::new();
    let cg = Path::new("/sys/fs/cgroup");
    let above = format!("taskgate-test-claim-{}", sb.alloc_id);
    let parent = taskgate_executor::CgroupParent::new(&format!("/{above}/sub")).unwrap();
    let hierarchies: Vec<PathBuf> = if cg.join("cgroup.controllers").exists() {
        vec![cg.to_path_buf()]
    } else {
        ["memory", "pids", "cpu", "devices", "freezer"]
            .map(|c| cg.join(c))
            .to_vec()
    };
    let mut left = Vec::new();
    // On v2 the one hierarchy has `above`, giving nothing to its children.
    let skipped = if hierarchies.len() == 1 {
        vec![None]
    } else {
        (0..hierarchies.len()).map(Some).collect()
    };
    for missing in skipped {
        let made: Vec<&PathBuf> = (hierarchies.iter().enumerate())
            .filter(|(i, _)| Some(*i) != missing)
            .map(|(_, h)| h)
            .collect();
        for h in &made {
            std::fs::create_dir(h.join(&above)).unwrap();
        }
        let claimed = taskgate_executor::CgroupTree::claim(&parent);
        assert!(claimed.is_err(), "claimed {parent} without {missing:?}");
        for h in &hierarchies {
            let sub = h.join(&above).join("sub");
            if sub.exists() {
                std::fs::remove_dir(&sub).unwrap();
                left.push(sub);
            }
        }
        for h in made {
            std::fs::remove_dir(h.join(&above)).unwrap();
        }
    }
    sb.assert_no_leftovers();
    assert!(left.is_empty(), "a failed claim left {left:?}");
}

/// Two agents, each with its data dir, may claim one parent (the default
/// one, say). The first to go gives back nothing the other still holds:
/// its idle `executors` leaf gone, the other's next task could not start.
#[test]
#[serial]
fn a_parent_another_agent_claims_is_kept() {
    let sb = Sandbox::new();
    let other = taskgate_executor::CgroupTree::claim(sb.cgroups.parent()).expect("a second claim");
    let released = other.release().expect("release");
    drop(other);
    let spec = sb.spec("web", "true");
    let started = sb.launch(&spec).map(|exec| {
        assert!(exec.wait().expect("wait").successful());
        exec.shutdown().expect("shutdown");
    });
    sb.assert_no_leftovers();
    assert!(
        released == taskgate_executor::Released::Shared && started.is_ok(),
        "the second agent's release {released:?}, then a task's launch {started:?}"
    );
}

/// Two agents that exit at once each release while the other's claim
/// still stands: the last release gives the parent back, and nothing is
/// left for no one.
#[test]
#[serial]
fn releases_at_once_give_the_parent_back() {
    let sb = Sandbox::new();
    let other = taskgate_executor::CgroupTree::claim(sb.cgroups.parent()).expect("a second claim");
    let first = other.release().expect("the first release");
    let last = sb.cgroups.release().expect("the last release");
    drop(other);
    assert!(
        first == taskgate_executor::Released::Shared && last == taskgate_executor::Released::Undone,
        "the first release {first:?}, the last {last:?}"
    );
    sb.assert_no_leftovers();
}

/// A claim released twice (an agent's exit, then its engine's drop) gives
/// back nothing the second time: the parent it held is gone, and one at
/// the same path now is another agent's claim, whose leaf its next task
/// joins.
#[test]
#[serial]
fn a_second_release_leaves_a_later_claim_alone() {
    let sb = Sandbox::new();
    let first = taskgate_executor::CgroupTree::claim(&common::test_cgroup_parent(&format!(
        "twice-{}",
        sb.alloc_id
    )))
    .expect("a claim");
    assert_eq!(
        first.release().unwrap(),
        taskgate_executor::Released::Undone
    );
    let later = taskgate_executor::CgroupTree::claim(first.parent()).expect("a later claim");
    let again = first.release().unwrap();
    let leaves_kept =
        (later.dirs().iter()).all(|d| d.join(taskgate_executor::EXECUTORS_LEAF).is_dir());
    drop(first);
    assert_eq!(
        later.release().unwrap(),
        taskgate_executor::Released::Undone
    );
    common::assert_parent_gone(later.parent());
    sb.assert_no_leftovers();
    assert!(
        again == taskgate_executor::Released::Undone && leaves_kept,
        "the second release {again:?}, the later claim's leaves kept: {leaves_kept}"
    );
}
