//! Fault configuration for the executor process. Nothing can release a park
//! across processes, so only park-free actions are meaningful here.

use crate::error::ExecutorError;
use taskgate_faults::Action;

/// Applies `FAILPOINTS` (`<scope>:<point>=<action>;…`, actions as
/// [`Action`] parses them) to this process's fault registry.
pub(crate) fn configure_from_env() -> Result<(), ExecutorError> {
    let Ok(all) = std::env::var("FAILPOINTS") else { return Ok(()) };
    for entry in all.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, action) = entry
            .split_once('=')
            .ok_or_else(|| ExecutorError::Failpoints(format!("{entry:?} is not name=action")))?;
        let action: Action = action.trim().parse().map_err(ExecutorError::Failpoints)?;
        taskgate_faults::configure(None, name.trim(), action);
    }
    Ok(())
}
