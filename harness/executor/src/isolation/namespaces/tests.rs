//! The task process's namespaces, against the recording fake (no root).

use super::*;
use crate::isolation::rootfs::tests::{creds, host, spec, ROOT};
use crate::isolation::syscalls::recording::{Call, RecordingSyscalls};
use nix::errno::Errno;
use rstest::rstest;

/// Mount, PID, UTS and IPC always; the network only when isolated. No
/// cgroup namespace yet: the task joins its cgroup first, and no user
/// namespace: the task's ids are the host's.
#[rstest]
#[case::sharing_the_hosts_network(false, CloneFlags::empty())]
#[case::network_isolated(true, CloneFlags::CLONE_NEWNET)]
fn the_task_is_cloned_into_its_namespaces(#[case] isolated: bool, #[case] network: CloneFlags) {
    let always = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWIPC;
    assert_eq!(clone_flags(isolated), always | network);
}

// `Faults` is a unit struct in a build of this crate alone without fault
// points; `default()` builds it in every build.
#[allow(clippy::default_constructed_unit_structs)]
fn set_up(sys: &RecordingSyscalls, network_isolation: bool) -> Result<(), ExecutorError> {
    let spec = TaskSpec {
        network_isolation,
        ..spec()
    };
    set_up_namespaces(
        sys,
        &Faults::default(),
        &spec,
        Path::new(ROOT),
        &creds(1234, 2345),
    )
}

/// The cgroup namespace before anything else, then the whole root, then
/// the hostname (in the task's UTS namespace, after the pivot), then `lo`
/// when the task has a network namespace of its own.
#[rstest]
#[case::sharing_the_hosts_network(false, &[])]
#[case::network_isolated(true, &[Call::BringUpLoopback])]
fn the_namespaces_are_set_up_in_order(#[case] isolated: bool, #[case] network: &[Call]) {
    let root_only = host();
    rootfs::enter_root(&root_only, Path::new(ROOT), &spec(), &creds(1234, 2345)).unwrap();
    let mut expected = vec![Call::Unshare {
        flags: CloneFlags::CLONE_NEWCGROUP,
    }];
    expected.extend(root_only.calls());
    expected.push(Call::Sethostname { name: "web".into() });
    expected.extend_from_slice(network);

    let sys = host();
    set_up(&sys, isolated).unwrap();
    assert_eq!(sys.calls(), expected);
}

/// A failed step is the last: no root is built in the host's cgroup
/// namespace, no hostname is set on a root half built.
#[rstest]
#[case::the_cgroup_namespace(
    |c: &Call| matches!(c, Call::Unshare { .. }),
    "unshare the cgroup namespace: EPERM"
)]
#[case::the_root(|c: &Call| matches!(c, Call::PivotRoot { .. }), "mount /run/taskgate/a1.web/root: pivot_root: EPERM")]
#[case::the_hostname(|c: &Call| matches!(c, Call::Sethostname { .. }), "sethostname: EPERM")]
#[case::the_loopback(|c: &Call| *c == Call::BringUpLoopback, "task isolation: bring up lo: EPERM")]
fn a_failed_step_ends_the_set_up(#[case] fails: fn(&Call) -> bool, #[case] message: &str) {
    let sys = host().failing_when(fails, Errno::EPERM);
    let err = set_up(&sys, true).unwrap_err().to_string();
    assert!(err.starts_with(message), "{err:?} should start {message:?}");
    let calls = sys.calls();
    assert!(fails(calls.last().unwrap()), "{calls:#?}");
}
