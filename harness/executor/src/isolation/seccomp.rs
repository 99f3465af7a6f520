//! The task's default seccomp filter: everything an ordinary program needs
//! is allowed; what only serves to attack the kernel or leave the sandbox
//! fails with EPERM (not a kill, so a program can fall back). Nomad's exec
//! driver has no filter; this is Docker's default profile's intent, kept to
//! a short deny-list:
//!
//! - new user namespaces (`unshare`/`clone` with CLONE_NEWUSER), where a
//!   task would hold every capability again over its own namespaces, and
//!   `clone3`, whose flags a filter cannot read: it answers ENOSYS, so libc
//!   falls back to `clone`, as under Docker;
//! - the kernel keyring (`keyctl`, `add_key`, `request_key`): not namespaced;
//! - `bpf` and `perf_event_open`: kernel attack surface, host-wide tracing;
//! - loading kernels and modules (`kexec_*`, `*init_module`, `delete_module`);
//! - `open_by_handle_at` (the "shocker" escape from a bind mount to the
//!   host's file system) and `userfaultfd` (a tool for kernel race exploits);
//! - host-wide state: `acct`, `swapon`/`swapoff`, `reboot`, `syslog`,
//!   `settimeofday`/`clock_settime`/`adjtimex`, `quotactl`, `lookup_dcookie`.

use crate::error::ExecutorError;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// Denied whatever their arguments.
const DENIED: [libc::c_long; 22] = [
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_open_by_handle_at,
    libc::SYS_userfaultfd,
    libc::SYS_acct,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_syslog,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_adjtimex,
    libc::SYS_quotactl,
    libc::SYS_lookup_dcookie,
];

/// Denied when their first argument (the flags) asks for a user namespace.
const NO_NEW_USER_NS: [libc::c_long; 2] = [libc::SYS_unshare, libc::SYS_clone];

/// The filters to install, built before the task is cloned (building
/// allocates; the child only installs them).
pub(crate) fn default_filters() -> Result<Vec<BpfProgram>, ExecutorError> {
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| seccomp_error("target architecture")(e))?;
    let user_ns = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(libc::CLONE_NEWUSER as u64),
        libc::CLONE_NEWUSER as u64,
    )
    .map_err(seccomp_error("CLONE_NEWUSER condition"))?;
    let new_user_ns =
        SeccompRule::new(vec![user_ns]).map_err(seccomp_error("CLONE_NEWUSER rule"))?;
    let mut eperm: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&call| (call, Vec::new())).collect();
    eperm.extend(
        NO_NEW_USER_NS
            .iter()
            .map(|&call| (call, vec![new_user_ns.clone()])),
    );
    let enosys = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    [(eperm, libc::EPERM as u32), (enosys, libc::ENOSYS as u32)]
        .into_iter()
        .map(|(rules, errno)| {
            let filter = SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(errno),
                arch,
            )
            .map_err(seccomp_error("filter"))?;
            BpfProgram::try_from(filter).map_err(seccomp_error("compile the filter"))
        })
        .collect()
}

/// Installs the filters on the calling thread: the task's last step before
/// its exec (no_new_privs must already be set).
pub(crate) fn install(filters: &[BpfProgram]) -> Result<(), ExecutorError> {
    filters
        .iter()
        .try_for_each(|f| seccompiler::apply_filter(f).map_err(seccomp_error("install the filter")))
}

fn seccomp_error<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> ExecutorError + '_ {
    move |e| ExecutorError::Isolation(format!("seccomp: {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_machine() {
        let filters = default_filters().unwrap();
        assert_eq!(filters.len(), 2);
        assert!(filters.iter().all(|f| !f.is_empty()));
    }
}
