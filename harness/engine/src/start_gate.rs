//! The start gate: the one place where "start this task now" is decided.
//!
//! The report's race: the task runner checked "should I shut down?", an alloc
//! stop landed, prestart hooks were skipped, and the driver was started anyway
//! because nothing tied the check to the start. Here the decision and every
//! stop/kill take the same lock, so they are totally ordered:
//!
//! * [`StartGate::commit_start`] is the **linearization point** of a start.
//!   It succeeds only if the alloc is not terminal, the task has not been
//!   told to die, and the caller holds a [`PrestartReceipt`] for this very
//!   attempt — a receipt only `TaskRunner::prestart` can mint, after every
//!   prestart hook succeeded. A skipped prestart has no receipt, so it can
//!   never be followed by a start.
//! * [`StartGate::set_terminal`] / [`StartGate::kill`] run under the same lock.
//!   An update that lands before a commit makes the commit fail (the task is
//!   never exec'd); one that lands after it finds the task in the committed
//!   set, and the kill path kills it.
//! * [`StartGate::hold`] does the same for a user restart: from the moment
//!   it is accepted, no task starts until its targets are down and
//!   [`StartGate::release`] lets the lifecycle order take over again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// Proof that every prestart hook ran and succeeded for `attempt` of `task`.
/// Deliberately not `Clone`: one receipt, one start.
#[derive(Debug)]
pub struct PrestartReceipt {
    task: String,
    attempt: u32,
}

impl PrestartReceipt {
    /// Only the task runner's prestart path may mint receipts.
    pub(crate) fn mint(task: &str, attempt: u32) -> Self {
        PrestartReceipt {
            task: task.to_string(),
            attempt,
        }
    }

    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// Why a start was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartRefused {
    #[error("allocation is terminal")]
    AllocTerminal,
    #[error("task was killed before it started")]
    Killed,
    #[error("attempt {0} was already started")]
    Duplicate(u32),
    #[error("a restart holds every start until its targets are down")]
    Held,
}

#[derive(Debug, Default)]
struct GateState {
    terminal: bool,
    /// A user restart is taking its targets down.
    held: bool,
    killed: BTreeSet<String>,
    /// Last committed attempt per task.
    committed: BTreeMap<String, u32>,
}

/// Shared by the alloc runner and all of its task runners.
#[derive(Debug, Default)]
pub struct StartGate {
    state: Mutex<GateState>,
}

impl StartGate {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        crate::lock(&self.state)
    }

    /// The linearization point of a task start (see the module docs).
    /// `may_start_after_terminal` is true for poststop tasks, which exist to
    /// run once the alloc is stopping.
    pub fn commit_start(
        &self,
        receipt: PrestartReceipt,
        may_start_after_terminal: bool,
    ) -> Result<u32, StartRefused> {
        let mut st = self.lock();
        if st.terminal && !may_start_after_terminal {
            return Err(StartRefused::AllocTerminal);
        }
        if st.killed.contains(&receipt.task) {
            return Err(StartRefused::Killed);
        }
        // Poststop tasks never overlap a restart: it is refused once they
        // may start.
        if st.held && !may_start_after_terminal {
            return Err(StartRefused::Held);
        }
        if st
            .committed
            .get(&receipt.task)
            .is_some_and(|&a| a >= receipt.attempt)
        {
            return Err(StartRefused::Duplicate(receipt.attempt));
        }
        st.committed.insert(receipt.task, receipt.attempt);
        Ok(receipt.attempt)
    }

    /// Marks the alloc terminal; every later `commit_start` of a non-poststop
    /// task fails. Returns whether this call made it terminal.
    pub fn set_terminal(&self) -> bool {
        let mut st = self.lock();
        !std::mem::replace(&mut st.terminal, true)
    }

    /// Marks a task as told to die; a later `commit_start` for it fails.
    pub fn kill(&self, task: &str) {
        self.lock().killed.insert(task.to_string());
    }

    /// Holds every later `commit_start` (of a non-poststop task) until
    /// [`StartGate::release`]. Refused (false) once the alloc is terminal.
    pub fn hold(&self) -> bool {
        let mut st = self.lock();
        st.held = !st.terminal;
        st.held
    }

    pub fn release(&self) {
        self.lock().held = false;
    }

    /// Lets a task told to die start again: a restart of all tasks brings
    /// it back. Only while the alloc is not terminal (false otherwise).
    pub fn revive(&self, task: &str) -> bool {
        let mut st = self.lock();
        if st.terminal {
            return false;
        }
        st.killed.remove(task);
        true
    }

    /// Records an attempt restored from the state database as committed, so
    /// a restored agent can never start the same attempt again.
    pub fn restore_committed(&self, task: &str, attempt: u32) {
        self.lock().committed.insert(task.to_string(), attempt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_after_terminal_is_refused() {
        let gate = StartGate::new();
        assert!(gate.set_terminal());
        let r = gate.commit_start(PrestartReceipt::mint("t", 1), false);
        assert_eq!(r, Err(StartRefused::AllocTerminal));
    }

    #[test]
    fn poststop_may_start_after_terminal() {
        let gate = StartGate::new();
        gate.set_terminal();
        assert_eq!(
            gate.commit_start(PrestartReceipt::mint("t", 1), true),
            Ok(1)
        );
    }

    #[test]
    fn commit_before_terminal_wins_and_kill_refuses_later() {
        let gate = StartGate::new();
        assert_eq!(
            gate.commit_start(PrestartReceipt::mint("t", 1), false),
            Ok(1)
        );
        gate.kill("t");
        assert_eq!(
            gate.commit_start(PrestartReceipt::mint("t", 2), false),
            Err(StartRefused::Killed)
        );
    }

    #[test]
    fn a_restart_holds_starts_until_released() {
        let gate = StartGate::new();
        assert!(gate.hold());
        let held = gate.commit_start(PrestartReceipt::mint("t", 1), false);
        assert_eq!(held, Err(StartRefused::Held));
        gate.release();
        assert_eq!(
            gate.commit_start(PrestartReceipt::mint("t", 2), false),
            Ok(2)
        );
    }

    #[test]
    fn a_stopped_alloc_is_neither_held_nor_revived() {
        let gate = StartGate::new();
        gate.kill("t");
        gate.set_terminal();
        assert!(!gate.hold());
        assert!(!gate.revive("t"));
        assert_eq!(
            gate.commit_start(PrestartReceipt::mint("t", 1), false),
            Err(StartRefused::AllocTerminal)
        );
    }

    #[test]
    fn a_revived_task_may_start_again() {
        let gate = StartGate::new();
        gate.kill("t");
        assert!(gate.revive("t"));
        assert_eq!(
            gate.commit_start(PrestartReceipt::mint("t", 1), false),
            Ok(1)
        );
    }

    #[test]
    fn an_attempt_starts_once() {
        let gate = StartGate::new();
        gate.restore_committed("t", 3);
        assert_eq!(
            gate.commit_start(PrestartReceipt::mint("t", 3), false),
            Err(StartRefused::Duplicate(3))
        );
        assert_eq!(
            gate.commit_start(PrestartReceipt::mint("t", 4), false),
            Ok(4)
        );
    }
}
