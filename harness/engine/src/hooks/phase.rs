//! The phases a task runner runs hooks in, and the hooks' trait per phase:
//! what names their fault points (`hook.<phase>.<before|after>.<hook>`).

use super::*;
use taskgate_faults::points::{hook_point, Edge, GUARDED_HOOK_PHASE};

/// A phase of a task's attempt that runs hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPhase {
    Prestart,
    Poststart,
    Prekill,
    Update,
    Exited,
    Stop,
}

impl HookPhase {
    /// Every phase, in the order [`hook_points`] lists them.
    pub const ALL: [HookPhase; 6] = [
        HookPhase::Prestart,
        HookPhase::Poststart,
        HookPhase::Prekill,
        HookPhase::Update,
        HookPhase::Exited,
        HookPhase::Stop,
    ];

    /// The phase's name in its fault points (scenario files name them).
    pub fn as_str(self) -> &'static str {
        match self {
            HookPhase::Prestart => "prestart",
            HookPhase::Poststart => "poststart",
            HookPhase::Prekill => "prekill",
            HookPhase::Update => "update",
            HookPhase::Exited => "exited",
            HookPhase::Stop => "stop",
        }
    }

    /// The fault point at `edge` of `hook` in this phase, e.g.
    /// `hook.prestart.before.task_dir`.
    pub fn point(self, edge: Edge, hook: &str) -> String {
        hook_point(self.as_str(), edge, hook)
    }

    /// Hooks after the start are best effort, as in Nomad: a failure is an
    /// event, not a reason to tear down a running task. Prestart (no
    /// receipt without every hook) and update (deferred whole) are not.
    pub fn best_effort(self) -> bool {
        !matches!(self, HookPhase::Prestart | HookPhase::Update)
    }

    /// Whether a hook's fault points run inside its panic guard: an update
    /// hook's are its own, so a panic there defers the update like an
    /// error does; elsewhere a panic at a point is the task runner's.
    pub fn points_in_guard(self) -> bool {
        self.as_str() == GUARDED_HOOK_PHASE
    }
}

/// What every hook has, whatever its phase.
pub trait Hook: Send + Sync {
    /// The hook's name in its fault points and failures.
    fn name(&self) -> &'static str;
}

/// A phase's hook trait (`dyn PrestartHook`, ...): its phase, and where a
/// [`HookSet`] keeps its hooks.
pub trait PhaseHook: Hook {
    const PHASE: HookPhase;
    fn of(set: &HookSet) -> &[Box<Self>];
}

macro_rules! phase_hook {
    ($($trait:ident => $phase:ident, $field:ident;)*) => {$(
        impl PhaseHook for dyn $trait {
            const PHASE: HookPhase = HookPhase::$phase;
            fn of(set: &HookSet) -> &[Box<Self>] {
                &set.$field
            }
        }
    )*};
}

phase_hook! {
    PrestartHook => Prestart, prestart;
    PoststartHook => Poststart, poststart;
    PrekillHook => Prekill, prekill;
    UpdateHook => Update, update;
    ExitedHook => Exited, exited;
    StopHook => Stop, stop;
}

impl HookSet {
    /// The names of the hooks this set runs in `phase`, in order.
    pub fn names(&self, phase: HookPhase) -> Vec<&'static str> {
        fn names<H: PhaseHook + ?Sized>(set: &HookSet) -> Vec<&'static str> {
            H::of(set).iter().map(|hook| hook.name()).collect()
        }
        match phase {
            HookPhase::Prestart => names::<dyn PrestartHook>(self),
            HookPhase::Poststart => names::<dyn PoststartHook>(self),
            HookPhase::Prekill => names::<dyn PrekillHook>(self),
            HookPhase::Update => names::<dyn UpdateHook>(self),
            HookPhase::Exited => names::<dyn ExitedHook>(self),
            HookPhase::Stop => names::<dyn StopHook>(self),
        }
    }
}

/// Every hook point of the standard hook set, `hook.<phase>.<edge>.<name>`,
/// in the order an attempt passes them: what scenario files may name.
pub fn hook_points() -> Vec<String> {
    let set = HookSet::standard("nobody");
    HookPhase::ALL
        .into_iter()
        .flat_map(|phase| {
            set.names(phase).into_iter().flat_map(move |name| {
                [Edge::Before, Edge::After].map(|edge| phase.point(edge, name))
            })
        })
        .collect()
}
