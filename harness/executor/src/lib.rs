//! The executor: starts one task process under isolation and supervises it.
//!
//! [`launch`] (the engine's side) spawns `taskgate-executor`, which
//! daemonizes, builds the task's cgroup and root, execs the task and then
//! serves [`Executor`] requests on a Unix socket until shut down ([`server::run`]).
mod client;
pub mod confined;
mod error;
mod fixture;
mod isolation;
mod logs;
mod protocol;
pub mod server;
mod signal;
mod spawn;
pub mod spec;
mod sys;
pub use sys::{now_ms, pidfd_open_if_alive, pidfd_send_signal, same_file};
mod task_lock;
mod validate;

pub use client::{
    destroy_remains, launch, Executor, ExecutorConfig, ExecutorFaults, ExitPeek, Remains,
    FAILPOINTS_ENV,
};
pub use error::ExecutorError;
pub use fixture::build_busybox_root;
pub use isolation::caps::DEFAULT_CAPS;
pub use isolation::cgroup::parent::{
    auto_parent, choose_parent, CgroupParent, CgroupTree, ParentChoice, Released, AGENT_LEAF,
    DEDICATED_V1, DEDICATED_V2, EXECUTORS_LEAF,
};
pub use isolation::cgroup::task_cgroup_name;
pub use isolation::device_filter;
pub use logs::{log_file_indexes, log_file_name, LogStream, LOGS_DIR};
pub use protocol::{
    check_socket_path, is_socket_of, lock_path, socket_path, spec_file_name, Doom, SPEC_FD,
};
pub use signal::KillSignal;
pub use spec::*;
pub use validate::{
    check_chroot_env, component_problem, task_name_problem, EXECUTOR_LOG, SECRETS_DIR,
    SHARED_ALLOC_DIR, TASK_SUBDIRS,
};
