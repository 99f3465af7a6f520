//! Starting the task process: clone into namespaces, join the cgroup, build
//! the root, drop privileges, exec. The parent learns the outcome through a
//! close-on-exec pipe: EOF means the exec happened, a JSON error means it did not.

pub(crate) mod caps;
pub(crate) mod cgroup;
pub mod device_filter;
mod namespaces;
pub(crate) mod rootfs;
mod seccomp;
mod syscalls;

use crate::error::ExecutorError;
use crate::spec::TaskSpec;
use crate::sys::pidfd_open;
use crate::validate::Credentials;
use cgroup::TaskCgroup;
use namespaces::{clone_task, set_up_namespaces, Forked};
use nix::fcntl::OFlag;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use std::convert::Infallible;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use syscalls::LinuxSyscalls;
use taskgate_faults::{points, Faults};

const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

/// What the task process is started with.
pub(crate) struct TaskLaunch<'a> {
    pub spec: &'a TaskSpec,
    pub creds: Credentials,
    pub root_dir: &'a Path,
    pub cgroup: &'a TaskCgroup,
    /// The executor's fault points (this process is one task's run).
    pub faults: &'a Faults,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// Starts the task and returns its pid and a pidfd on it once it has exec'd.
///
/// # Safety
/// The caller must be single-threaded (see [`clone_task`]).
pub(crate) unsafe fn spawn_task(launch: TaskLaunch<'_>) -> Result<(Pid, OwnedFd), ExecutorError> {
    let argv = cstrings(
        std::iter::once(&launch.spec.command).chain(&launch.spec.args),
        "argument",
    )?;
    let envp = cstrings(&task_env(launch.spec), "environment entry")?;
    let filters = seccomp::default_filters()?;
    let (go_r, go_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    match clone_task(launch.spec.network_isolation)? {
        Forked::Child => {
            drop((go_w, err_r));
            // A panic must not unwind into the executor's code in this copy of its process.
            let run = AssertUnwindSafe(|| child_main(&launch, go_r, &argv, &envp, &filters));
            let err = match std::panic::catch_unwind(run) {
                Ok(Err(e)) => e,
                Ok(Ok(never)) => match never {},
                Err(_) => ExecutorError::Isolation("the task process panicked before exec".into()),
            };
            let mut report = File::from(err_w);
            let _ = report.write_all(&serde_json::to_vec(&err).unwrap_or_default());
            libc::_exit(1)
        }
        Forked::Parent(pid) => {
            drop((go_r, err_w, launch.stdout, launch.stderr));
            // It cannot be reaped before it is released, so its pid is still its own.
            let ready = pidfd_open(pid.as_raw()).and_then(|pidfd| release(go_w).map(|()| pidfd));
            let pidfd = match ready {
                Ok(pidfd) => pidfd,
                Err(e) => {
                    let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
                    let _ = waitpid(pid, None);
                    return Err(e);
                }
            };
            let mut report = Vec::new();
            let read = File::from(err_r).read_to_end(&mut report);
            if report.is_empty() && read.is_ok() {
                return Ok((pid, pidfd));
            }
            let _ = waitpid(pid, None);
            Err(serde_json::from_slice(&report).unwrap_or_else(|_| {
                ExecutorError::Isolation("the task process died before exec".into())
            }))
        }
    }
}

/// Runs in the task process; returns only on failure.
fn child_main(
    launch: &TaskLaunch<'_>,
    go: OwnedFd,
    argv: &[CString],
    envp: &[CString],
    filters: &[seccompiler::BpfProgram],
) -> Result<Infallible, ExecutorError> {
    let spec = launch.spec;
    let scope = spec.task_name.as_str();
    let mut byte = [0u8; 1];
    if !matches!(File::from(go).read(&mut byte), Ok(1)) {
        return Err(ExecutorError::Isolation(
            "executor gave up before the task started".into(),
        ));
    }
    // Into its cgroup before anything of the task's own runs, and before
    // its cgroup namespace is rooted where it stands.
    launch.cgroup.join()?;
    // The executor ignores SIGPIPE (Rust runtime) and may block signals:
    // the task must not inherit either.
    reset_signals()?;
    nix::unistd::setsid().map_err(ExecutorError::io("setsid"))?;
    set_up_namespaces(
        &LinuxSyscalls,
        launch.faults,
        spec,
        launch.root_dir,
        &launch.creds,
    )?;
    caps::apply_rlimits(&spec.rlimits)?;
    caps::apply_oom_score_adj(spec.oom_score_adj)?;
    redirect_stdio(&launch.stdout, &launch.stderr)?;
    let program = resolve_command(&spec.command, envp)?;
    caps::drop_privileges(&launch.creds)?;
    taskgate_faults::fault_point!(launch.faults, points::EX_BEFORE_EXEC, scope, |msg| Err(
        ExecutorError::Injected(msg)
    ));
    // Every inherited fd past stdio (spec, ready pipe, socket, error pipe)
    // closes on exec; a kernel without CLOSE_RANGE_CLOEXEC (before 5.11)
    // fails the start rather than hand the task an open fd.
    // SAFETY: plain syscall, no pointers.
    let closed = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if closed != 0 {
        return Err(ExecutorError::io("close_range(3.., CLOEXEC)")(
            std::io::Error::last_os_error(),
        ));
    }
    // Last: from here on the task's own restrictions apply to this process.
    seccomp::install(filters)?;
    let e = nix::unistd::execve(&program, argv, envp).unwrap_err();
    Err(ExecutorError::Exec {
        command: spec.command.clone(),
        message: e.to_string(),
    })
}

fn reset_signals() -> Result<(), ExecutorError> {
    use nix::sys::signal::{signal, SigHandler};
    // SAFETY: restoring the default disposition installs no handler code.
    unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) }
        .map_err(ExecutorError::io("reset SIGPIPE"))?;
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
        .map_err(ExecutorError::io("unblock signals"))
}

fn redirect_stdio(stdout: &OwnedFd, stderr: &OwnedFd) -> Result<(), ExecutorError> {
    let null =
        File::open("/dev/null").map_err(ExecutorError::io("open /dev/null in the task root"))?;
    for (fd, target) in [
        (null.as_raw_fd(), 0),
        (stdout.as_raw_fd(), 1),
        (stderr.as_raw_fd(), 2),
    ] {
        nix::unistd::dup2(fd, target)
            .map_err(ExecutorError::io(format!("dup2 onto fd {target}")))?;
    }
    Ok(())
}

/// Finds the command inside the task root: as given if it has a `/`, else on the task's PATH.
fn resolve_command(command: &str, envp: &[CString]) -> Result<CString, ExecutorError> {
    let not_found = |message: String| ExecutorError::Exec {
        command: command.to_string(),
        message,
    };
    let path = if command.contains('/') {
        PathBuf::from(command)
    } else {
        let search = envp
            .iter()
            .find_map(|e| e.to_str().ok()?.strip_prefix("PATH="))
            .unwrap_or(DEFAULT_PATH);
        search
            .split(':')
            .map(|dir| Path::new(dir).join(command))
            .find(|p| p.is_file())
            .ok_or_else(|| not_found(format!("not found on PATH {search}")))?
    };
    if !path.exists() {
        return Err(not_found(format!(
            "{} does not exist in the task root",
            path.display()
        )));
    }
    CString::new(path.into_os_string().into_encoded_bytes())
        .map_err(|_| not_found("contains NUL".into()))
}

/// The task's environment is exactly its spec's, plus a PATH if it has none.
fn task_env(spec: &TaskSpec) -> Vec<String> {
    let mut env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !spec.env.contains_key("PATH") {
        env.push(format!("PATH={DEFAULT_PATH}"));
    }
    env
}

fn cstrings<'a>(
    items: impl IntoIterator<Item = &'a String>,
    what: &str,
) -> Result<Vec<CString>, ExecutorError> {
    items
        .into_iter()
        .map(|s| {
            CString::new(s.as_str()).map_err(|_| ExecutorError::Exec {
                command: s.clone(),
                message: format!("{what} contains NUL"),
            })
        })
        .collect()
}

fn pipe() -> Result<(OwnedFd, OwnedFd), ExecutorError> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(ExecutorError::io("pipe"))
}

fn release(go: OwnedFd) -> Result<(), ExecutorError> {
    File::from(go)
        .write_all(&[1])
        .map_err(ExecutorError::io("release the task process"))
}
