//! What each block of a jobspec may contain.

/// What a body may contain, for unknown-name and duplicate checks.
pub struct Schema {
    pub attrs: &'static [&'static str],
    /// Blocks that take one name label and may repeat.
    pub named: &'static [&'static str],
    /// Unlabeled blocks that may appear at most once.
    pub single: &'static [&'static str],
    /// Unlabeled blocks that may repeat.
    pub repeated: &'static [&'static str],
}

pub(super) const TOP_LEVEL: Schema = Schema {
    attrs: &[],
    named: &["job"],
    single: &[],
    repeated: &[],
};
pub(super) const JOB: Schema = Schema {
    attrs: &["type"],
    named: &["group"],
    single: &[],
    repeated: &[],
};
pub(super) const GROUP: Schema = Schema {
    attrs: &[],
    named: &["task"],
    single: &["restart"],
    repeated: &[],
};
pub(super) const TASK: Schema = Schema {
    attrs: &[
        "driver",
        "leader",
        "kill_timeout",
        "kill_signal",
        "shutdown_delay",
        "user",
    ],
    named: &[],
    single: &[
        "config",
        "env",
        "meta",
        "resources",
        "lifecycle",
        "restart",
        "logs",
    ],
    repeated: &[],
};
pub(super) const CONFIG: Schema = Schema {
    attrs: &["command", "args"],
    named: &[],
    single: &[],
    repeated: &[],
};
pub(super) const RESOURCES: Schema = Schema {
    attrs: &["cpu", "memory"],
    named: &[],
    single: &[],
    repeated: &[],
};
pub(super) const LIFECYCLE: Schema = Schema {
    attrs: &["hook", "sidecar"],
    named: &[],
    single: &[],
    repeated: &[],
};
pub(super) const RESTART: Schema = Schema {
    attrs: &["attempts", "interval", "delay", "mode"],
    named: &[],
    single: &[],
    repeated: &[],
};
pub(super) const LOGS: Schema = Schema {
    attrs: &["max_files", "max_file_size"],
    named: &[],
    single: &[],
    repeated: &[],
};
