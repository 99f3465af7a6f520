//! The last privileged steps before exec: rlimits, the user switch, Nomad's
//! default exec-driver capability set, and no_new_privs.

use crate::error::ExecutorError;
use crate::spec::Rlimits;
use crate::validate::Credentials;
use caps::{CapSet, Capability, CapsHashSet};
use nix::sys::resource::{getrlimit, setrlimit};

/// Nomad's exec-driver defaults (drivers/shared/capabilities).
pub const DEFAULT_CAPS: [Capability; 13] = [
    Capability::CAP_AUDIT_WRITE,
    Capability::CAP_CHOWN,
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_FOWNER,
    Capability::CAP_FSETID,
    Capability::CAP_KILL,
    Capability::CAP_MKNOD,
    Capability::CAP_NET_BIND_SERVICE,
    Capability::CAP_SETFCAP,
    Capability::CAP_SETGID,
    Capability::CAP_SETPCAP,
    Capability::CAP_SETUID,
    Capability::CAP_SYS_CHROOT,
];

/// Sets every limit of the spec. One above the executor's own hard limit
/// is lowered to it when raising it is refused (no CAP_SYS_RESOURCE).
pub(crate) fn apply_rlimits(r: &Rlimits) -> Result<(), ExecutorError> {
    for (res, limit) in r.each() {
        let set = |soft, hard| setrlimit(res, soft, hard);
        set(limit.soft, limit.hard)
            .or_else(|e| match (e, getrlimit(res)) {
                (nix::errno::Errno::EPERM, Ok((_, own_hard))) => {
                    set(limit.soft.min(own_hard), limit.hard.min(own_hard))
                }
                (e, _) => Err(e),
            })
            .map_err(isolation(format!(
                "setrlimit {res:?} = {}/{}",
                limit.soft, limit.hard
            )))?;
    }
    Ok(())
}

/// Sets the task's `oom_score_adj`, whatever the executor's own.
pub(crate) fn apply_oom_score_adj(value: i32) -> Result<(), ExecutorError> {
    std::fs::write("/proc/self/oom_score_adj", value.to_string())
        .map_err(isolation(format!("set oom_score_adj {value}")))
}

/// Like Nomad: root keeps the default set in every capability set; any other
/// user gets it only as the bounding set, i.e. runs with no capabilities.
pub(crate) fn drop_privileges(creds: &Credentials) -> Result<(), ExecutorError> {
    let allowed: CapsHashSet = DEFAULT_CAPS.into_iter().collect();
    // Shrinking the bounding set needs CAP_SETPCAP, so it comes before the user switch.
    for cap in caps::runtime::thread_all_supported().difference(&allowed) {
        caps::drop(None, CapSet::Bounding, *cap)
            .map_err(isolation(format!("drop {cap} from the bounding set")))?;
    }
    nix::unistd::setgroups(&[creds.gid]).map_err(isolation("setgroups"))?;
    nix::unistd::setresgid(creds.gid, creds.gid, creds.gid).map_err(isolation("setresgid"))?;
    nix::unistd::setresuid(creds.uid, creds.uid, creds.uid).map_err(isolation("setresuid"))?;
    let granted = if creds.uid.is_root() {
        allowed
    } else {
        CapsHashSet::new()
    };
    // Order matters: effective must shrink before permitted, and ambient
    // needs its capabilities in both permitted and inheritable.
    for set in [
        CapSet::Effective,
        CapSet::Permitted,
        CapSet::Inheritable,
        CapSet::Ambient,
    ] {
        caps::set(None, set, &granted).map_err(isolation(format!("set {set:?} capabilities")))?;
    }
    nix::sys::prctl::set_no_new_privs().map_err(isolation("set no_new_privs"))
}

fn isolation<E: std::fmt::Display>(what: impl Into<String>) -> impl FnOnce(E) -> ExecutorError {
    let what = what.into();
    move |e| ExecutorError::Isolation(format!("{what}: {e}"))
}
