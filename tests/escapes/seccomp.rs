//! The seccomp filter: what it refuses, and what ordinary programs still do.

use crate::common::Sandbox;
use crate::{assert_held, attempt, script};
use rstest::rstest;
use serial_test::serial;
use std::path::Path;

/// No new user namespace, where the task would hold every capability again
/// (the seccomp filter answers EPERM, so a program can fall back).
#[rstest]
#[serial]
fn user_namespaces_cannot_be_created(#[values("root", "nobody")] user: &str) {
    let out = attempt(user, &script("try userns unshare -U true"));
    assert_held(&out, &["userns"]);
    assert!(out.contains("Operation not permitted"), "{out}");
}

/// Ordinary programs still work under the filter: the shell, core tools,
/// and a dynamically linked binary from the host's /usr (on the host, GNU
/// coreutils; in the qemu guests, the dynamically linked tools shipped there).
#[test]
#[serial]
fn ordinary_programs_work_under_the_filter() {
    let dynamic = [
        "/usr/bin/env",
        "/usr/bin/ls",
        "/usr/sbin/ip",
        "/usr/bin/runc",
        "/usr/sbin/runc",
    ]
    .into_iter()
    .find(|p| is_dynamic_elf(Path::new(p)))
    .expect("no dynamically linked program on this machine to run");
    let sb = Sandbox::new();
    let mut spec = sb.spec(
        "t",
        &format!(
            "set -e; echo a b | sort -r | wc -w; ls / >/dev/null; sh -c 'exit 0'; \
             sleep 0 & wait; {dynamic} --version >/dev/null 2>&1 || {dynamic} -V >/dev/null; echo done"
        ),
    );
    // The host's tree, as the default chroot_env binds it.
    spec.chroot_env = taskgate_executor::default_chroot_env()
        .into_iter()
        .filter(|(host, _)| host.exists())
        .collect();
    spec.user = "nobody".into();
    let exec = sb.launch(&spec).expect("launch");
    let result = exec.wait().expect("wait");
    exec.shutdown().expect("shutdown");
    let out = sb.read_log("t", "stdout");
    assert!(
        result.successful(),
        "{result:?}\nstdout: {out}\nstderr: {}",
        sb.read_log("t", "stderr")
    );
    assert_eq!(out, "2\ndone\n");
    sb.assert_no_leftovers();
}

/// An ELF file with a program interpreter (`PT_INTERP`): dynamically linked.
fn is_dynamic_elf(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    bytes.starts_with(b"\x7fELF")
        && bytes
            .windows(b"ld-linux".len())
            .take(4096)
            .any(|w| w == b"ld-linux")
}

/// Set in a task's environment: the test binary, run inside the task, acts
/// as the syscall probe instead of running tests.
const PROBE_ENV: &str = "TASKGATE_ESCAPE_PROBE";

/// Every rule of the filter, made for real inside a task by this very test
/// binary (bound into the task's root read-only), as root and as nobody,
/// through every entry point that reaches the kernel: the native x86_64
/// call, the i386 ABI (`int 0x80`) and the x32 ABI. Natively a denied call
/// fails with EPERM (clone3 with ENOSYS), so a program can fall back; the
/// two other ABIs are refused whole, the caller killed with SIGSYS.
#[rstest]
#[serial]
fn the_filter_refuses_each_denied_call(#[values("root", "nobody")] user: &str) {
    let me = std::env::current_exe().expect("the test binary");
    let sb = Sandbox::new();
    let mut spec = sb.spec("t", "");
    spec.command = "/probe/escapes".into();
    spec.args = vec![
        "--exact".into(),
        "seccomp::syscall_probe".into(),
        "--nocapture".into(),
    ];
    spec.env = [(PROBE_ENV.to_string(), "1".to_string())].into();
    spec.chroot_env = taskgate_executor::default_chroot_env()
        .into_iter()
        .filter(|(host, _)| host.exists())
        .collect();
    spec.chroot_env.insert(me.clone(), "/probe/escapes".into());
    spec.user = user.to_string();
    let exec = sb.launch(&spec).expect("launch");
    let result = exec.wait().expect("wait");
    exec.shutdown().expect("shutdown");
    let out = sb.read_log("t", "stdout");
    assert!(
        result.successful(),
        "{result:?}\nstdout: {out}\nstderr: {}",
        sb.read_log("t", "stderr")
    );
    let probed: Vec<&str> = out.lines().filter(|l| l.starts_with("probe ")).collect();
    assert_eq!(probed.len(), PROBES.len() * Abi::ALL.len(), "{out}");
    for probe in &PROBES {
        for abi in Abi::ALL {
            let want = format!("probe {abi:?} {} {}", probe.name, probe.expected(abi));
            let got = probed
                .iter()
                .find(|l| l.starts_with(&format!("probe {abi:?} {} ", probe.name)))
                .unwrap_or_else(|| panic!("no line for {abi:?} {}\n{out}", probe.name));
            assert_eq!(
                *got, want,
                "ESCAPED as {user}: {got}, expected {want}\n{out}"
            );
        }
    }
    sb.assert_no_leftovers();
}

/// The ways into the kernel from an x86_64 process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abi {
    Native,
    I386,
    X32,
}

impl Abi {
    const ALL: [Abi; 3] = [Abi::Native, Abi::I386, Abi::X32];
}

/// What the filter answers natively.
#[derive(Debug, Clone, Copy)]
enum Native {
    Eperm,
    Enosys,
    Allowed,
}

/// One rule of the filter, as a call: its number in each ABI, and
/// arguments that do something harmless or fail on their own merits.
struct Probe {
    name: &'static str,
    numbers: [libc::c_long; 3],
    args: [libc::c_long; 3],
    native: Native,
}

impl Probe {
    fn expected(&self, abi: Abi) -> &'static str {
        match (abi, self.native) {
            (Abi::I386 | Abi::X32, _) => "SIGSYS",
            (Abi::Native, Native::Eperm) => "EPERM",
            (Abi::Native, Native::Enosys) => "ENOSYS",
            (Abi::Native, Native::Allowed) => "ALLOWED",
        }
    }

    fn number(&self, abi: Abi) -> libc::c_long {
        self.numbers[abi as usize]
    }
}

const NEWUSER: libc::c_long = libc::CLONE_NEWUSER as libc::c_long;
const READ_IMPLIES_EXEC: libc::c_long = 0x0040_0000;
const ADDR_NO_RANDOMIZE: libc::c_long = 0x0004_0000;
/// `clone3`'s argument: filled in by the probe (a pointer, so not here).
const CLONE_ARGS: libc::c_long = -2;

/// Numbers: x86_64, i386, x32 (x32 shares x86_64's but for compat calls).
const PROBES: [Probe; 20] = [
    probe("keyctl", [250, 288, 250], [0, 0, 0], Native::Eperm),
    probe("add_key", [248, 286, 248], [0, 0, 0], Native::Eperm),
    probe("request_key", [249, 287, 249], [0, 0, 0], Native::Eperm),
    probe("bpf", [321, 357, 321], [0, 0, 0], Native::Eperm),
    probe(
        "perf_event_open",
        [298, 336, 298],
        [0, 0, -1],
        Native::Eperm,
    ),
    probe("kexec_load", [246, 283, 528], [0, 0, 0], Native::Eperm),
    probe("init_module", [175, 128, 175], [0, 0, 0], Native::Eperm),
    probe(
        "open_by_handle_at",
        [304, 342, 304],
        [-1, 0, 0],
        Native::Eperm,
    ),
    probe("userfaultfd", [323, 374, 323], [0, 0, 0], Native::Eperm),
    probe(
        "unshare(NEWUSER)",
        [272, 310, 272],
        [NEWUSER, 0, 0],
        Native::Eperm,
    ),
    probe(
        "clone(NEWUSER)",
        [56, 120, 56],
        [NEWUSER | libc::SIGCHLD as libc::c_long, 0, 0],
        Native::Eperm,
    ),
    probe(
        "clone3(NEWUSER)",
        [435, 435, 435],
        [CLONE_ARGS, 88, 0],
        Native::Enosys,
    ),
    probe("io_uring_setup", [425, 425, 425], [1, 0, 0], Native::Eperm),
    probe("io_uring_enter", [426, 426, 426], [-1, 0, 0], Native::Eperm),
    probe(
        "io_uring_register",
        [427, 427, 427],
        [-1, 0, 0],
        Native::Eperm,
    ),
    probe(
        "personality(READ_IMPLIES_EXEC)",
        [135, 136, 135],
        [READ_IMPLIES_EXEC, 0, 0],
        Native::Eperm,
    ),
    probe(
        "personality(ADDR_NO_RANDOMIZE)",
        [135, 136, 135],
        [ADDR_NO_RANDOMIZE, 0, 0],
        Native::Eperm,
    ),
    probe(
        "personality(PER_LINUX32|UNAME26)",
        [135, 136, 135],
        [0x0002_0008, 0, 0],
        Native::Allowed,
    ),
    probe(
        "personality(query)",
        [135, 136, 135],
        [0xffff_ffff, 0, 0],
        Native::Allowed,
    ),
    probe(
        "personality(PER_LINUX)",
        [135, 136, 135],
        [0, 0, 0],
        Native::Allowed,
    ),
];

const fn probe(
    name: &'static str,
    numbers: [libc::c_long; 3],
    args: [libc::c_long; 3],
    native: Native,
) -> Probe {
    Probe {
        name,
        numbers,
        args,
        native,
    }
}

/// Not a test of its own: the probe [`the_filter_refuses_each_denied_call`]
/// runs inside a task. Outside one it does nothing. Each call is made in a
/// child of its own: a refused ABI kills the caller, and a clone that got
/// through must not run on as a copy of the probe.
#[test]
fn syscall_probe() {
    if std::env::var_os(PROBE_ENV).is_none() {
        return;
    }
    for probe in &PROBES {
        for abi in Abi::ALL {
            println!("probe {abi:?} {} {}", probe.name, in_child(probe, abi));
        }
    }
}

/// Makes the call in a forked child and says how it went: `EPERM`,
/// `ENOSYS`, `errno N`, `ALLOWED` (no error), or the signal that killed it.
fn in_child(probe: &Probe, abi: Abi) -> String {
    // SAFETY: the child only makes raw system calls and _exits.
    match unsafe { libc::fork() } {
        0 => {
            let ret = unsafe { call(probe, abi) };
            let code = match ret {
                // The new process of a clone that got through.
                0 if probe.name.starts_with("clone") => 0,
                r if (-4095..0).contains(&r) => -r as i32,
                _ => 255,
            };
            unsafe { libc::_exit(code) }
        }
        -1 => panic!("fork: {}", std::io::Error::last_os_error()),
        child => {
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(child, &mut status, 0) };
            if libc::WIFSIGNALED(status) {
                return match libc::WTERMSIG(status) {
                    libc::SIGSYS => "SIGSYS".to_string(),
                    sig => format!("signal {sig}"),
                };
            }
            match libc::WEXITSTATUS(status) {
                libc::EPERM => "EPERM".to_string(),
                libc::ENOSYS => "ENOSYS".to_string(),
                255 => "ALLOWED".to_string(),
                e => format!("errno {e}"),
            }
        }
    }
}

/// Makes `probe`'s call through `abi`; returns the kernel's raw answer.
///
/// # Safety
/// Every argument is a null pointer, -1, a flag word or a pointer to a
/// local: nothing the kernel would write through outside this process.
unsafe fn call(probe: &Probe, abi: Abi) -> libc::c_long {
    let mut clone_args = [0u64; 11];
    clone_args[0] = libc::CLONE_NEWUSER as u64;
    clone_args[4] = libc::SIGCHLD as u64;
    let [mut a, b, c] = probe.args;
    if a == CLONE_ARGS {
        a = clone_args.as_mut_ptr() as libc::c_long;
    }
    let nr = probe.number(abi);
    let ret: libc::c_long;
    match abi {
        Abi::Native => {
            let rc = libc::syscall(nr, a, b, c, 0, 0, 0);
            return if rc == -1 {
                -(std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as libc::c_long)
            } else {
                rc
            };
        }
        // rbx is LLVM's: the first argument is swapped into it around the call.
        Abi::I386 => std::arch::asm!(
            "xchg {arg0}, rbx",
            "int 0x80",
            "xchg {arg0}, rbx",
            arg0 = inout(reg) a => _,
            inlateout("rax") nr => ret,
            in("rcx") b,
            in("rdx") c,
        ),
        Abi::X32 => std::arch::asm!(
            "syscall",
            inlateout("rax") nr | 0x4000_0000 => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            lateout("rcx") _,
            lateout("r11") _,
        ),
    }
    ret
}
