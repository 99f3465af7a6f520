//! The oracle's rule for one pending exec, from facts the engine cannot
//! fake: the task's layout on disk, and the fault history the harness
//! recorded (which boundaries the engine really passed, in which order).

use crate::gate::{PendingExec, Verdict};
use crate::layout::check_task_layout;
use std::collections::BTreeSet;
use std::path::Path;
use taskgate_faults::{points, Hit};

/// Denial reasons start with the invariant they protect, so a history
/// reader can tell a missing layout from a start after terminal.
pub const DENY_LAYOUT: &str = "layout missing";
pub const DENY_TERMINAL: &str = "started after alloc terminal";

/// What the judge knows about the run whose execs it answers.
pub struct RunFacts<'a> {
    /// `<allocs_root>/<alloc id>` is an alloc's directory.
    pub allocs_root: &'a Path,
    /// Tasks allowed to start once the alloc is terminal (poststop).
    pub may_start_late: &'a BTreeSet<String>,
    pub history: &'a [Hit],
}

/// Allows an exec of a task (or of its executor) only if the task's
/// directory and log files exist and the task runner's last start decision
/// did not come after the alloc became terminal. Execs of anything else are
/// allowed; the gate records them with their identity.
pub fn judge(facts: &RunFacts<'_>, exec: &PendingExec) -> Verdict {
    let (Some(alloc_id), Some(task)) = (exec.identity.alloc_id(), exec.identity.task()) else {
        return Verdict::Allow;
    };
    if let Err(missing) = check_task_layout(&facts.allocs_root.join(alloc_id), task) {
        let missing: Vec<String> = missing.iter().map(|p| p.display().to_string()).collect();
        return Verdict::Deny(format!("{DENY_LAYOUT}: {}", missing.join(", ")));
    }
    if facts.may_start_late.contains(task) {
        return Verdict::Allow;
    }
    match terminal_before_decision(facts.history, task) {
        Some(why) => Verdict::Deny(format!("{DENY_TERMINAL}: {why}")),
        None => Verdict::Allow,
    }
}

/// Whether the alloc became terminal (`ar.alloc_terminal`: a stop shut
/// its start gate) before the task runner passed its last start decision
/// (`tr.before_driver_start`).
pub fn terminal_before_decision(history: &[Hit], task: &str) -> Option<String> {
    // Positions, not sequence numbers: the history may span an agent
    // restart, and each process numbers its own hits.
    let last_decision = history
        .iter()
        .rposition(|h| h.is(Some(task), points::TR_BEFORE_DRIVER_START))?;
    let terminal = history
        .iter()
        .position(|h| h.is(None, points::AR_ALLOC_TERMINAL))?;
    (terminal < last_decision).then(|| {
        format!(
            "alloc terminal at fault #{} before the start decision at fault #{}",
            terminal + 1,
            last_decision + 1
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::ExecIdentity;
    use crate::layout::build_for_test as build;
    use std::path::PathBuf;

    fn hit(seq: u64, name: &str) -> Hit {
        Hit {
            detail: None,
            seq,
            point: name.parse().unwrap(),
            action: None,
            at_us: 0,
        }
    }

    fn exec(alloc: &str, task: &str) -> PendingExec {
        PendingExec {
            pid: 1,
            exe: PathBuf::from("/bin/x"),
            identity: ExecIdentity::Executor {
                alloc_id: alloc.into(),
                task: task.into(),
            },
        }
    }

    #[test]
    fn layout_is_checked_for_the_identified_task() {
        let root = tempfile::tempdir().unwrap();
        build(&root.path().join("a1"), "web");
        let late = BTreeSet::new();
        let facts = RunFacts {
            allocs_root: root.path(),
            may_start_late: &late,
            history: &[],
        };
        assert_eq!(judge(&facts, &exec("a1", "web")), Verdict::Allow);
        assert!(
            matches!(judge(&facts, &exec("a1", "db")), Verdict::Deny(r) if r.starts_with(DENY_LAYOUT))
        );
        assert!(
            matches!(judge(&facts, &exec("a2", "web")), Verdict::Deny(r) if r.starts_with(DENY_LAYOUT))
        );
        let unknown = PendingExec {
            identity: ExecIdentity::Unknown,
            ..exec("a1", "web")
        };
        assert_eq!(judge(&facts, &unknown), Verdict::Allow);
    }

    #[test]
    fn a_start_decided_after_terminal_is_denied_unless_poststop() {
        let root = tempfile::tempdir().unwrap();
        build(&root.path().join("a1"), "web");
        let history = [
            hit(1, points::AR_ALLOC_TERMINAL),
            hit(2, "web:tr.before_driver_start"),
        ];
        let none = BTreeSet::new();
        let facts = RunFacts {
            allocs_root: root.path(),
            may_start_late: &none,
            history: &history,
        };
        assert!(
            matches!(judge(&facts, &exec("a1", "web")), Verdict::Deny(r) if r.starts_with(DENY_TERMINAL))
        );
        let late: BTreeSet<String> = ["web".to_string()].into();
        let facts = RunFacts {
            may_start_late: &late,
            ..facts
        };
        assert_eq!(judge(&facts, &exec("a1", "web")), Verdict::Allow);
    }

    #[test]
    fn a_start_decided_before_terminal_is_allowed() {
        let history = [
            hit(1, "web:tr.before_driver_start"),
            hit(2, points::AR_ALLOC_TERMINAL),
        ];
        assert_eq!(terminal_before_decision(&history, "web"), None);
        assert_eq!(terminal_before_decision(&history[..1], "web"), None);
    }
}
