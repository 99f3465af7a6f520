//! What each block of a jobspec may contain.

/// What a body may contain, for unknown-name and duplicate checks.
pub(super) struct Schema {
    pub attrs: &'static [&'static str],
    /// Blocks that take one name label and may repeat.
    pub named: &'static [&'static str],
    /// Unlabeled blocks that may appear at most once.
    pub single: &'static [&'static str],
}

pub(super) const TOP_LEVEL: Schema = Schema {
    attrs: &[],
    named: &["job"],
    single: &[],
};
pub(super) const JOB: Schema = Schema {
    attrs: &[],
    named: &["group"],
    single: &[],
};
pub(super) const GROUP: Schema = Schema {
    attrs: &[],
    named: &["task"],
    single: &["restart"],
};
pub(super) const TASK: Schema = Schema {
    attrs: &["driver", "leader", "kill_timeout", "kill_signal", "user"],
    named: &[],
    single: &["config", "env", "resources", "lifecycle", "restart", "logs"],
};
pub(super) const CONFIG: Schema = Schema {
    attrs: &["command", "args"],
    named: &[],
    single: &[],
};
pub(super) const RESOURCES: Schema = Schema {
    attrs: &["cpu", "memory"],
    named: &[],
    single: &[],
};
pub(super) const LIFECYCLE: Schema = Schema {
    attrs: &["hook", "sidecar"],
    named: &[],
    single: &[],
};
pub(super) const RESTART: Schema = Schema {
    attrs: &["attempts", "interval", "delay", "mode"],
    named: &[],
    single: &[],
};
pub(super) const LOGS: Schema = Schema {
    attrs: &["max_files", "max_file_size"],
    named: &[],
    single: &[],
};
