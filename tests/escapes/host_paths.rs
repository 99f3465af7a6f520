//! What a task can plant where the host side writes: its `/alloc` is the
//! host's `<alloc dir>/alloc`, and the executor (host root, host mount
//! namespace) opens the logs there. A symlink, FIFO or device node a root
//! task left at a log path, or at the logs dir itself, must never be
//! followed or opened: no host file may change.

use crate::common::Sandbox;
use nix::sys::stat::{mknod, Mode, SFlag};
use rstest::rstest;
use serial_test::serial;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What a task left at a path the host side opens.
#[derive(Debug, Clone, Copy)]
enum Planted {
    /// A symlink to a host file (or, at the logs dir, a host dir).
    Symlink,
    /// A FIFO the task reads from: whatever the host writes there, it gets.
    Fifo,
    /// A character device node (here /dev/null's numbers; a task could
    /// name a disk).
    Device,
}

/// Where it was left.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// The log file the next attempt appends to.
    CurrentLog,
    /// The next generation, created when the log rotates.
    NextGeneration,
    /// `alloc/logs` itself.
    LogsDir,
}

/// A host file outside anything the task can see, and what it held.
struct Victim {
    path: PathBuf,
}

impl Victim {
    const CONTENT: &'static str = "host data\n";

    fn new(sb: &Sandbox, dir: bool) -> Victim {
        let path = sb.path().join("victim");
        if dir {
            std::fs::create_dir(&path).unwrap();
        } else {
            std::fs::write(&path, Self::CONTENT).unwrap();
        }
        Victim { path }
    }

    /// The host file is as it was: same content, or the dir still empty.
    fn assert_unchanged(&self) {
        if self.path.is_dir() {
            let entries: Vec<_> = std::fs::read_dir(&self.path).unwrap().collect();
            assert!(
                entries.is_empty(),
                "ESCAPED: host dir written to: {entries:?}"
            );
        } else {
            let now = std::fs::read_to_string(&self.path).unwrap();
            assert_eq!(
                now,
                Self::CONTENT,
                "ESCAPED: host file {} changed",
                self.path.display()
            );
        }
    }
}

fn plant(path: &Path, planted: Planted, victim: &Victim) {
    match planted {
        Planted::Symlink => std::os::unix::fs::symlink(&victim.path, path).unwrap(),
        Planted::Fifo => nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o666)).unwrap(),
        Planted::Device => mknod(
            path,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap(),
    }
}

/// A task that writes `lines` lines of output; its logs rotate every 64 bytes.
fn chatty_spec(sb: &Sandbox, task: &str, lines: u32) -> taskgate_executor::TaskSpec {
    let mut spec = sb.spec(
        task,
        &format!("i=0; while [ $i -lt {lines} ]; do echo line-$i-0123456789; i=$((i+1)); done"),
    );
    spec.logs.max_file_size_bytes = 64;
    spec
}

/// Every kind of plant at every place the executor opens: the task either
/// is refused with the path named, or runs with that log's output dropped
/// and the refusal in `executor.out`; the host file never changes, and no
/// FIFO reader ever gets a byte.
#[rstest]
#[case::symlink_at_log(Planted::Symlink, Place::CurrentLog)]
#[case::symlink_at_next_generation(Planted::Symlink, Place::NextGeneration)]
#[case::symlink_as_logs_dir(Planted::Symlink, Place::LogsDir)]
#[case::fifo_at_log(Planted::Fifo, Place::CurrentLog)]
#[case::fifo_at_next_generation(Planted::Fifo, Place::NextGeneration)]
#[case::fifo_as_logs_dir(Planted::Fifo, Place::LogsDir)]
#[case::device_at_log(Planted::Device, Place::CurrentLog)]
#[case::device_at_next_generation(Planted::Device, Place::NextGeneration)]
#[case::device_as_logs_dir(Planted::Device, Place::LogsDir)]
#[serial]
fn the_executor_never_follows_what_a_task_planted(#[case] planted: Planted, #[case] place: Place) {
    let sb = Sandbox::new();
    let logs = sb.shared_alloc_dir().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let victim = Victim::new(
        &sb,
        matches!((planted, place), (Planted::Symlink, Place::LogsDir)),
    );
    let at = match place {
        Place::CurrentLog => logs.join("t.stdout.0"),
        Place::NextGeneration => {
            std::fs::write(logs.join("t.stdout.0"), "").unwrap();
            logs.join("t.stdout.1")
        }
        Place::LogsDir => {
            std::fs::remove_dir(&logs).unwrap();
            logs.clone()
        }
    };
    plant(&at, planted, &victim);
    // A reader on the FIFO, as the task would be: it must get nothing.
    let reader = matches!(planted, Planted::Fifo).then(|| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&at)
            .unwrap()
    });
    let spec = chatty_spec(&sb, "t", 20);
    match sb.launch(&spec) {
        Err(err) => assert!(
            err.to_string().contains(&at.display().to_string()),
            "ESCAPED: the refusal must name {}: {err}",
            at.display()
        ),
        Ok(exec) => {
            exec.wait().expect("wait");
            exec.shutdown().expect("shutdown");
            let log = std::fs::read_to_string(sb.task_dir("t").join("executor.out")).unwrap();
            assert!(
                log.contains(&at.display().to_string()),
                "ESCAPED: opened without a refusal in executor.out, {}: {log}",
                at.display()
            );
        }
    }
    victim.assert_unchanged();
    if let Some(mut fifo) = reader {
        let mut got = Vec::new();
        let _ = fifo.read_to_end(&mut got);
        assert!(got.is_empty(), "ESCAPED: the FIFO's reader got {got:?}");
    }
    let meta = std::fs::symlink_metadata(&at).unwrap();
    match planted {
        Planted::Symlink => assert!(meta.file_type().is_symlink()),
        Planted::Fifo => assert!(meta.file_type().is_fifo()),
        Planted::Device => assert!(meta.file_type().is_char_device()),
    }
    sb.assert_no_leftovers();
}

/// The attack end to end: a root task swaps its own stderr log for a
/// symlink to a host file, then its next attempt writes to stderr; and a
/// root prestart task plants the main task's stdout log before it starts.
#[rstest]
#[case::across_a_restart(false)]
#[case::from_a_sibling_prestart_task(true)]
#[serial]
fn a_root_task_cannot_redirect_logs_into_a_host_file(#[case] sibling: bool) {
    let sb = Sandbox::new();
    let victim = Victim::new(&sb, false);
    let (planter, target, stream) = if sibling {
        ("pre", "main", "stdout")
    } else {
        ("t", "t", "stderr")
    };
    let plant = sb.spec(
        planter,
        &format!(
            "rm -f /alloc/logs/{target}.{stream}.0 && ln -s {} /alloc/logs/{target}.{stream}.0",
            victim.path.display()
        ),
    );
    let exec = sb.launch(&plant).expect("launch the planting task");
    assert!(exec.wait().expect("wait").successful());
    exec.shutdown().expect("shutdown");
    let next = sb.spec(target, "echo pwned >&1; echo pwned >&2");
    match sb.launch(&next) {
        Err(err) => assert!(
            err.to_string().contains(&format!("{target}.{stream}.0")),
            "ESCAPED: the refusal must name the log: {err}"
        ),
        Ok(exec) => {
            exec.wait().expect("wait");
            exec.shutdown().expect("shutdown");
        }
    }
    victim.assert_unchanged();
    sb.assert_no_leftovers();
}

/// A task named after the alloc's shared dir would get `<alloc dir>/alloc`
/// as its task dir: its `local/` inside every sibling's `/alloc`, where a
/// sibling could swap it for a link the executor then binds. The name is
/// refused, by the executor and the jobspec alike.
#[test]
#[serial]
fn a_task_cannot_take_the_shared_dirs_name() {
    let sb = Sandbox::new();
    let spec = sb.spec("alloc", "true");
    match sb.launch(&spec) {
        Err(taskgate_executor::ExecutorError::InvalidTaskName { name, .. }) => {
            assert_eq!(name, "alloc")
        }
        other => {
            if let Ok(exec) = other {
                let _ = exec.wait();
                let _ = exec.shutdown();
            }
            panic!("ESCAPED: a task named alloc was launched");
        }
    }
    sb.assert_no_leftovers();
}

/// A task dir's `local/` or `tmp/` that is a link (to a host dir) is
/// refused before anything is bound, so the task never gets the host dir
/// read-write.
#[rstest]
#[case::local("local")]
#[case::tmp("tmp")]
#[serial]
fn a_task_subdir_that_is_a_link_is_refused(#[case] sub: &str) {
    let sb = Sandbox::new();
    let victim = Victim::new(&sb, true);
    let spec = sb.spec("t", "touch /local/x /tmp/x");
    let at = spec.task_dir.join(sub);
    std::fs::remove_dir(&at).unwrap();
    plant(&at, Planted::Symlink, &victim);
    let err = sb
        .launch(&spec)
        .expect_err("ESCAPED: launched on a linked subdir");
    assert!(err.to_string().contains(&at.display().to_string()), "{err}");
    victim.assert_unchanged();
    sb.assert_no_leftovers();
}
