//! The prestart hooks that build the alloc dir, against what a task could
//! have planted there: the shared `alloc/` (and its `logs/`) is the task's
//! `/alloc`, writable by any root task of the alloc. Needs no root: the
//! task runs as the user running the test.

use super::{HookContext, LogFilesHook, PrestartHook, TaskDirHook, TaskSetup};
use crate::alloc_dir::AllocDir;
use crate::job::Task;
use crate::state::TaskRecord;
use std::path::Path;

/// The user running the test: the task's user, so the hooks' chown works.
fn me() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .expect("the test's user has a name")
        .name
}

/// Runs the standard task dir and log file hooks for `web` in `alloc_dir`.
fn prestart(alloc_dir: &AllocDir) -> Result<(), super::HookError> {
    let mut task = Task::new("web", "/bin/true", vec![]);
    task.user = Some(me());
    let mut record = TaskRecord::new("web");
    let mut ctx = HookContext {
        alloc_id: "a1",
        task: &task,
        alloc_dir,
        attempt: 1,
        record: &mut record,
    };
    let mut setup = TaskSetup::default();
    TaskDirHook::new(&me()).prestart(&mut ctx, &mut setup)?;
    LogFilesHook.prestart(&mut ctx, &mut setup)
}

/// A host dir and file outside the alloc dir, and a check that neither
/// was written through a link.
struct Victim {
    dir: std::path::PathBuf,
    file: std::path::PathBuf,
}

impl Victim {
    fn new(home: &Path) -> Victim {
        let dir = home.join("victim-dir");
        std::fs::create_dir(&dir).unwrap();
        let file = home.join("victim-file");
        Victim { dir, file }
    }

    fn assert_untouched(&self) {
        let entries: Vec<_> = std::fs::read_dir(&self.dir).unwrap().collect();
        assert!(entries.is_empty(), "ESCAPED: host dir written: {entries:?}");
        assert!(
            !self.file.exists(),
            "ESCAPED: host file {} created",
            self.file.display()
        );
    }
}

/// A link planted at the logs dir or at a log file is refused, with the
/// path named, and what it points to is left as it was.
#[rstest::rstest]
#[case::logs_dir_linked_to_a_host_dir(true)]
#[case::log_file_linked_to_a_host_file(false)]
fn the_hooks_never_follow_a_planted_link(#[case] at_logs_dir: bool) {
    let home = tempfile::tempdir().unwrap();
    let alloc_dir = AllocDir::new(home.path().join("alloc-1"));
    let victim = Victim::new(home.path());
    let logs = alloc_dir.shared().join(taskgate_executor::LOGS_DIR);
    if at_logs_dir {
        std::fs::create_dir_all(alloc_dir.shared()).unwrap();
        std::os::unix::fs::symlink(&victim.dir, &logs).unwrap();
    } else {
        std::fs::create_dir_all(&logs).unwrap();
        std::os::unix::fs::symlink(&victim.file, logs.join("web.stdout.0")).unwrap();
    }
    let err = prestart(&alloc_dir).err();
    victim.assert_untouched();
    let err = err.expect("the hooks must refuse the link");
    assert!(
        err.to_string().contains(&logs.display().to_string()),
        "{err}"
    );
}

/// The hook points' names are what scenario files and the gate name: they
/// stay exactly these, in the order an attempt passes them.
#[test]
fn hook_points_are_named_by_phase_edge_and_hook() {
    let expected: Vec<String> = [
        ("prestart", "validate"),
        ("prestart", "task_dir"),
        ("prestart", "log_files"),
        ("prestart", "task_env"),
        ("poststart", "persist_handle"),
        ("prekill", "shutdown_delay"),
        ("update", "task_env"),
        ("exited", "executor_shutdown"),
        ("stop", "forget_handle"),
    ]
    .iter()
    .flat_map(|(phase, hook)| ["before", "after"].map(|edge| format!("hook.{phase}.{edge}.{hook}")))
    .collect();
    assert_eq!(super::hook_points(), expected);
    assert_eq!(
        super::HookPhase::Prestart.point(taskgate_faults::points::Edge::Before, "task_dir"),
        "hook.prestart.before.task_dir"
    );
}
