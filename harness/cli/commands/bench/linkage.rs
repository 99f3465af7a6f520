//! Whether the executor binary the bench times is linked statically, as
//! `dist/build-release.sh` links the one users install, or dynamically, as
//! a plain `cargo build` does: the figures differ (docs/benchmarks.md).

use anyhow::{ensure, Context};
use serde::Serialize;
use std::os::unix::fs::FileExt;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Linkage {
    Static,
    Dynamic,
    /// Not an ELF64 little-endian binary this bench can read.
    Unknown,
}

/// An ELF program header's type naming the dynamic loader.
const PT_INTERP: u32 = 3;
/// An ELF64 program header's size.
const PHDR_SIZE: u16 = 56;
/// A program header count saying the real count is elsewhere.
const PN_XNUM: u16 = 0xffff;

impl Linkage {
    /// Reads `binary`'s ELF64 program headers: a dynamically linked one
    /// names its loader (`PT_INTERP`), a static one (static-pie too) none.
    pub(super) fn of(binary: &Path) -> anyhow::Result<Linkage> {
        let file =
            std::fs::File::open(binary).with_context(|| format!("reading {}", binary.display()))?;
        let read = |offset: u64, len: usize| -> anyhow::Result<Vec<u8>> {
            let mut buf = vec![0; len];
            file.read_exact_at(&mut buf, offset)
                .with_context(|| format!("{}: not a whole ELF file", binary.display()))?;
            Ok(buf)
        };
        let header = read(0, 64)?;
        ensure!(
            header.starts_with(b"\x7fELF\x02\x01"),
            "{}: not a little-endian 64-bit ELF binary",
            binary.display()
        );
        let u16_at = |at: usize| u16::from_le_bytes([header[at], header[at + 1]]);
        let mut phoff = [0; 8];
        phoff.copy_from_slice(&header[32..40]);
        let (phoff, entry_size, entries) = (u64::from_le_bytes(phoff), u16_at(54), u16_at(56));
        // An executable has program headers, each of ELF64's size; 0xffff
        // would say their count is elsewhere, which no executable needs.
        ensure!(
            entry_size == PHDR_SIZE && (1..PN_XNUM).contains(&entries),
            "{}: not an ELF64 executable ({entries} program headers of {entry_size} bytes)",
            binary.display()
        );
        let headers = read(phoff, usize::from(PHDR_SIZE) * usize::from(entries))?;
        let names_loader = headers
            .chunks_exact(usize::from(PHDR_SIZE))
            .any(|ph| u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]) == PT_INTERP);
        Ok(if names_loader {
            Linkage::Dynamic
        } else {
            Linkage::Static
        })
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Linkage::Static => "static",
            Linkage::Dynamic => "dynamic",
            Linkage::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's busybox-static (the task roots' shell) is static, its
    /// coreutils dynamic; this crate's own test binary is dynamic too.
    #[test]
    fn the_loader_tells_static_from_dynamic() {
        assert_eq!(
            Linkage::of(Path::new("/bin/busybox")).unwrap(),
            Linkage::Static
        );
        assert_eq!(
            Linkage::of(Path::new("/bin/true")).unwrap(),
            Linkage::Dynamic
        );
        let me = std::env::current_exe().unwrap();
        assert_eq!(Linkage::of(&me).unwrap(), Linkage::Dynamic);
    }

    #[test]
    fn a_file_that_is_no_elf_binary_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
        let err = Linkage::of(&script).unwrap_err();
        assert!(format!("{err:#}").contains("not a"), "{err:#}");
    }
}
