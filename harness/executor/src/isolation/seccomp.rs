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
//!   `settimeofday`/`clock_settime`/`adjtimex`, `quotactl`, `lookup_dcookie`;
//! - io_uring (`io_uring_setup`, `_enter`, `_register`): the operations a
//!   ring carries out never pass through seccomp, so a ring would reach
//!   every call denied here (Docker denies it too);
//! - `personality` but for Docker's allowed values (`PER_LINUX`,
//!   `PER_LINUX32`, `UNAME26`, both, and the query): no
//!   `READ_IMPLIES_EXEC`, no `ADDR_NO_RANDOMIZE`.
//!
//! The rules are written for the x86_64 ABI; the two other ABIs an x86_64
//! process can call the kernel through are refused whole, the caller killed
//! with SIGSYS: i386 (`int 0x80`), by the architecture check every filter
//! starts with, and x32 (numbers with `__X32_SYSCALL_BIT`, under the x86_64
//! architecture), by a filter of its own, whether or not the kernel has
//! x32 enabled. A 32-bit program therefore cannot run in a task.

use crate::error::ExecutorError;
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// Denied whatever their arguments.
const DENIED: [libc::c_long; 25] = [
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
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
];

/// The only `personality` arguments allowed (Docker's): `PER_LINUX`,
/// `PER_LINUX32`, `UNAME26`, `PER_LINUX32 | UNAME26`, and the query.
const PERSONALITIES: [u64; 5] = [0x0, 0x8, 0x0002_0000, 0x0002_0008, 0xffff_ffff];

/// `AUDIT_ARCH_X86_64`: EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE.
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
/// Marks an x32 call's number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Denied when their first argument (the flags) asks for a user namespace.
const NO_NEW_USER_NS: [libc::c_long; 2] = [libc::SYS_unshare, libc::SYS_clone];

/// The filters to install, built before the task is cloned (building
/// allocates; the child only installs them).
pub(crate) fn default_filters() -> Result<Vec<BpfProgram>, ExecutorError> {
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| seccomp_error("target architecture")(e))?;
    let rule = |conditions: Vec<SeccompCondition>| {
        SeccompRule::new(conditions).map_err(seccomp_error("rule"))
    };
    let new_user_ns = rule(vec![condition(
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(libc::CLONE_NEWUSER as u64),
        libc::CLONE_NEWUSER as u64,
    )?])?;
    // The kernel reads an unsigned int: compare the low 32 bits only.
    let odd_personality = rule(
        PERSONALITIES
            .iter()
            .map(|&p| condition(SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, p))
            .collect::<Result<_, _>>()?,
    )?;
    let mut eperm: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&call| (call, Vec::new())).collect();
    eperm.extend(
        NO_NEW_USER_NS
            .iter()
            .map(|&call| (call, vec![new_user_ns.clone()])),
    );
    eperm.insert(libc::SYS_personality, vec![odd_personality]);
    let enosys = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let mut filters = [(eperm, libc::EPERM as u32), (enosys, libc::ENOSYS as u32)]
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
        .collect::<Result<Vec<_>, _>>()?;
    filters.push(no_x32());
    Ok(filters)
}

/// A condition on the first argument.
fn condition(
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, ExecutorError> {
    SeccompCondition::new(0, len, op, value).map_err(seccomp_error("condition"))
}

/// Kills the caller of any x32 call; seccompiler's rules match numbers
/// exactly, so without this one an x32 number would pass them all. Other
/// architectures are left to the rule filters' own check.
fn no_x32() -> BpfProgram {
    let stmt = |code: u32, k: u32| sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code: u32, k: u32, jt: u8, jf: u8| sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    const ARCH_OFFSET: u32 = 4;
    const NR_OFFSET: u32 = 0;
    vec![
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, ARCH_OFFSET),
        jump(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            AUDIT_ARCH_X86_64,
            0,
            3,
        ),
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, NR_OFFSET),
        jump(
            libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K,
            X32_SYSCALL_BIT,
            0,
            1,
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
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
        assert_eq!(filters.len(), 3);
        assert!(filters.iter().all(|f| !f.is_empty()));
    }
}
