//! The signal that asks a task to stop, checked once, where it is read: a
//! jobspec, a spec file, a state record or a protocol message naming an
//! unknown signal fails to load, and nothing downstream parses it again.

use crate::error::ExecutorError;
use nix::sys::signal::Signal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KillSignal(Signal);

impl KillSignal {
    pub const SIGINT: KillSignal = KillSignal(Signal::SIGINT);
    pub const SIGTERM: KillSignal = KillSignal(Signal::SIGTERM);
    pub const SIGKILL: KillSignal = KillSignal(Signal::SIGKILL);

    /// Accepts "SIGTERM" and "TERM": the one rule for signal names.
    pub fn parse(name: &str) -> Result<KillSignal, ExecutorError> {
        let full = if name.starts_with("SIG") {
            name.to_string()
        } else {
            format!("SIG{name}")
        };
        Signal::from_str(&full)
            .map(KillSignal)
            .map_err(|_| ExecutorError::InvalidSignal {
                signal: name.to_string(),
            })
    }

    pub fn signal(self) -> Signal {
        self.0
    }

    /// The full name, e.g. "SIGTERM".
    pub fn name(self) -> &'static str {
        self.0.as_str()
    }
}

impl std::fmt::Display for KillSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for KillSignal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for KillSignal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        KillSignal::parse(&name).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_or_without_sig_and_nothing_else() {
        assert_eq!(KillSignal::parse("SIGINT").unwrap(), KillSignal::SIGINT);
        assert_eq!(KillSignal::parse("TERM").unwrap(), KillSignal::SIGTERM);
        assert!(matches!(
            KillSignal::parse("SIGNOPE"),
            Err(ExecutorError::InvalidSignal { .. })
        ));
    }

    #[test]
    fn round_trips_as_its_name_and_refuses_an_unknown_one_on_load() {
        let json = serde_json::to_string(&KillSignal::SIGTERM).unwrap();
        assert_eq!(json, "\"SIGTERM\"");
        assert_eq!(
            serde_json::from_str::<KillSignal>(&json).unwrap(),
            KillSignal::SIGTERM
        );
        let bad = serde_json::from_str::<KillSignal>("\"SIGNOPE\"").unwrap_err();
        assert!(
            bad.to_string().contains("unknown signal \"SIGNOPE\""),
            "{bad}"
        );
    }
}
