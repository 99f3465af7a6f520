//! How much argv and environment one task may hand to `execve`: the
//! kernel's ARG_MAX, and what the engine keeps of it for itself.

/// The kernel's limit on one argument or environment string (32 pages).
pub const MAX_ARG_STRLEN: usize = 32 * 4096;

/// What the engine's own task environment (NOMAD_* and friends) may take of
/// ARG_MAX; the job gets the rest.
pub const ENGINE_ENV_RESERVE: usize = 4096;

/// The kernel's ARG_MAX on this machine.
pub fn arg_max() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::ARG_MAX)
        .ok()
        .flatten()
        .map_or(128 * 1024, |n| n as usize)
}

/// Bytes `execve` counts for these strings: each with its NUL, plus a
/// pointer per string and the terminating null pointer.
pub fn exec_size<'a>(strings: impl IntoIterator<Item = &'a str>) -> usize {
    let (bytes, count) = strings
        .into_iter()
        .fold((0, 0), |(b, n), s| (b + s.len() + 1, n + 1));
    bytes + (count + 1) * std::mem::size_of::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_sizes_count_nuls_and_pointers() {
        assert_eq!(exec_size(["ab", "c"]), 5 + 3 * std::mem::size_of::<usize>());
        assert!(arg_max() >= 128 * 1024);
    }
}
