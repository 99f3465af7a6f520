//! The task's `/dev` and the files that mask `/proc`: its own nodes, made
//! in its own tmpfs, never the host's inodes. A root task holds CAP_FOWNER
//! and CAP_CHOWN: on a host inode its `chmod 000 /dev/null` would break the
//! host. The test never lets it try one: a node found to be the host's is
//! reported, not changed, and the host's inodes are checked (and put back,
//! should a regression change them) afterwards.

use crate::common::Sandbox;
use rstest::rstest;
use serial_test::serial;
use std::os::unix::fs::MetadataExt;

const DEV_NODES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// `/proc` files this or that kernel has, masked in the task.
const MASKED: [&str; 9] = [
    "/proc/kcore",
    "/proc/kpagecount",
    "/proc/kpageflags",
    "/proc/kpagecgroup",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/latency_stats",
];

/// What of a host inode a task could change.
#[derive(Debug, PartialEq, Eq)]
struct Inode {
    path: String,
    mode: u32,
    uid: u32,
    gid: u32,
}

fn host_inodes() -> Vec<(Inode, String)> {
    DEV_NODES
        .iter()
        .map(|n| {
            let path = format!("/dev/{n}");
            let m = std::fs::metadata(&path).unwrap();
            let inode = Inode {
                path,
                mode: m.mode(),
                uid: m.uid(),
                gid: m.gid(),
            };
            (inode, format!("{}:{}", m.dev(), m.ino()))
        })
        .collect()
}

/// Every node and masked file is the task's own, and chmod and chown of
/// each leave the host's inodes as they were, as root and as nobody.
#[rstest]
#[serial]
fn dev_nodes_and_masks_are_the_tasks_own(#[values("root", "nobody")] user: &str) {
    let before = host_inodes();
    let ids: Vec<&str> = before.iter().map(|(_, id)| id.as_str()).collect();
    let files: Vec<String> = DEV_NODES
        .iter()
        .map(|n| format!("/dev/{n}"))
        .chain(MASKED.iter().map(|m| m.to_string()))
        .collect();
    let sb = Sandbox::new();
    let mut spec = sb.spec(
        "t",
        &format!(
            "for f in {files}; do [ -e $f ] || continue; id=$(stat -c '%d:%i' $f); \
               case \" $HOST_INODES \" in *\" $id \"*) echo \"host-inode $f\"; continue;; esac; \
               chmod 000 $f 2>/dev/null && echo \"chmod $f\"; \
               chown 65534:65534 $f 2>/dev/null && echo \"chown $f\"; \
               echo \"own $f\"; done; \
             echo x >/dev/null && [ $(head -c 5 /dev/zero | wc -c) = 5 ] && echo nodes-work",
            files = files.join(" ")
        ),
    );
    spec.user = user.to_string();
    spec.env.insert("HOST_INODES".into(), ids.join(" "));
    let exec = sb.launch(&spec).expect("launch");
    let result = exec.wait().expect("wait");
    exec.shutdown().expect("shutdown");
    let out = sb.read_log("t", "stdout");
    // The host first: whatever happened, its inodes are put back.
    let after = host_inodes();
    for ((was, _), (now, _)) in before.iter().zip(&after) {
        if was != now {
            std::os::unix::fs::chown(&was.path, Some(was.uid), Some(was.gid)).unwrap();
            let perm = std::os::unix::fs::PermissionsExt::from_mode(was.mode & 0o7777);
            std::fs::set_permissions(&was.path, perm).unwrap();
        }
    }
    assert_eq!(before, after, "ESCAPED: the host's inodes changed\n{out}");
    assert!(result.successful(), "{result:?}\n{out}");
    let shared: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("host-inode"))
        .collect();
    assert!(shared.is_empty(), "ESCAPED: {shared:?}\n{out}");
    assert!(
        out.contains("own /dev/null") && out.contains("own /proc/keys"),
        "{out}"
    );
    assert!(out.contains("nodes-work"), "{out}");
    sb.assert_no_leftovers();
}
