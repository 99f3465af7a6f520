//! What a report says about where it ran: the engine build (which the
//! binary knows: its features and the seeded bug it carries), the kernel
//! and the host's cgroup layout.

use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The engine build, as the binary describes itself.
    pub build: String,
    /// `uname -sr`.
    pub kernel: String,
    /// The cgroup layout (see [`cgroup_mode`]).
    pub cgroups: String,
}

impl Host {
    /// This host, running the engine `build`.
    pub fn detect(build: String) -> Host {
        let kernel = nix::sys::utsname::uname().map_or_else(
            |e| format!("unknown ({e})"),
            |u| {
                format!(
                    "{} {}",
                    u.sysname().to_string_lossy(),
                    u.release().to_string_lossy()
                )
            },
        );
        let cgroups = std::fs::read_to_string("/proc/self/mountinfo")
            .map_or_else(|e| format!("unknown ({e})"), |m| cgroup_mode(&m));
        Host {
            build,
            kernel,
            cgroups,
        }
    }
}

/// The cgroup layout a mount table shows: pure v2 (cgroup2 at
/// `/sys/fs/cgroup`), hybrid (v1 controllers, and a cgroup2 elsewhere),
/// or pure v1.
pub fn cgroup_mode(mountinfo: &str) -> String {
    let mut v2_at = None;
    let mut v1 = false;
    for line in mountinfo.lines() {
        // Fields: ... mount-point (5th) ... " - " fstype source options.
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split(' ').nth(4).unwrap_or("");
        match right.split(' ').next() {
            Some("cgroup2") => v2_at = v2_at.or(Some(mount_point.to_string())),
            Some("cgroup") => v1 = true,
            _ => {}
        }
    }
    match (v2_at, v1) {
        (Some(at), false) if Path::new(&at) == Path::new("/sys/fs/cgroup") => "v2 (unified)".into(),
        (Some(at), true) => format!("v1 (hybrid: cgroup2 also at {at})"),
        (Some(at), false) => format!("v2 at {at}"),
        (None, true) => "v1".into(),
        (None, false) => "none mounted".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V2: &str = "35 24 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw\n";
    const HYBRID: &str = "\
25 24 0:22 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw
28 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw shared:12 - cgroup cgroup rw,cpu,cpuacct
";

    #[test]
    fn the_cgroup_layouts_are_told_apart() {
        assert_eq!(cgroup_mode(V2), "v2 (unified)");
        assert_eq!(
            cgroup_mode(HYBRID),
            "v1 (hybrid: cgroup2 also at /sys/fs/cgroup/unified)"
        );
        assert_eq!(cgroup_mode(&HYBRID.replace("cgroup2", "x")), "v1");
        assert_eq!(cgroup_mode(""), "none mounted");
    }
}
