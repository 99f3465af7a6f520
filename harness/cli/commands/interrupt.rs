//! Ctrl-C (and SIGTERM, SIGHUP) for the commands that build things up and
//! must take them down: the first signal asks them to stop between two
//! steps, a second one ends the process at once.

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the first SIGINT, SIGTERM or SIGHUP: the step in progress (a
/// gate's run, a bench's start) ends, no other starts, and what the
/// command made is taken down (a lab's tasks, cgroups and mount; a bench's
/// scratch dir and executors). Killed outright, it would leave them all.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether a signal asked the command to stop after the step in progress.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

extern "C" fn on_interrupt(_: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe; a second signal means now.
        unsafe { libc::_exit(130) };
    }
    let said = b"\ninterrupted: ending the step in progress, then taking down what it made (again to quit at once, leaving it behind)\n";
    // SAFETY: write(2) is async-signal-safe, on a buffer that lives forever.
    unsafe { libc::write(2, said.as_ptr().cast(), said.len()) };
}

/// A handler, not a blocked mask: handlers are reset at exec, so the
/// agents, executors and tasks a run starts keep the default dispositions.
pub fn catch() -> nix::Result<()> {
    let action = SigAction::new(
        SigHandler::Handler(on_interrupt),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only touches an atomic and calls
        // async-signal-safe functions.
        unsafe { sigaction(signal, &action)? };
    }
    Ok(())
}
