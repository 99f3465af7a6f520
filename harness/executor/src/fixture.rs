//! A tiny task root for tests and the harness: a static busybox and just
//! enough of /etc to resolve root and nobody.

use crate::error::ExecutorError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's busybox-static: statically linked, so no /lib is needed in the root.
const BUSYBOX: &str = "/bin/busybox";

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
const GROUP: &str = "root:x:0:\nnobody:x:65534:\n";

/// Creates `dir/bin` (busybox and a symlink per applet) and `dir/etc`
/// (passwd, group), and returns the matching `chroot_env`:
/// `{dir/bin -> /bin, dir/etc -> /etc}`. Calling it again on the same
/// directory gives the same tree.
pub fn build_busybox_root(dir: &Path) -> Result<BTreeMap<PathBuf, PathBuf>, ExecutorError> {
    let bin = dir.join("bin");
    let etc = dir.join("etc");
    for d in [&bin, &etc] {
        std::fs::create_dir_all(d).map_err(ExecutorError::io(format!("create {}", d.display())))?;
    }
    // Copy, then rename: overwriting a busybox a running task executes fails with ETXTBSY.
    let staged = bin.join(".busybox.new");
    std::fs::copy(BUSYBOX, &staged).map_err(ExecutorError::io(format!(
        "copy {BUSYBOX} (install Debian's busybox-static)"
    )))?;
    std::fs::rename(&staged, bin.join("busybox")).map_err(ExecutorError::io(format!(
        "install {}/busybox",
        bin.display()
    )))?;
    for applet in applets()? {
        let link = bin.join(&applet);
        match std::os::unix::fs::symlink("busybox", &link) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(ExecutorError::io(format!("symlink {}", link.display()))(e))
            }
            _ => {}
        }
    }
    for (name, body) in [("passwd", PASSWD), ("group", GROUP)] {
        let path = etc.join(name);
        std::fs::write(&path, body)
            .map_err(ExecutorError::io(format!("write {}", path.display())))?;
    }
    Ok(BTreeMap::from([
        (bin, PathBuf::from("/bin")),
        (etc, PathBuf::from("/etc")),
    ]))
}

fn applets() -> Result<Vec<String>, ExecutorError> {
    let out = Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .map_err(ExecutorError::io(format!("run {BUSYBOX} --list")))?;
    if !out.status.success() {
        return Err(ExecutorError::Io {
            context: format!("run {BUSYBOX} --list"),
            message: out.status.to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(str::to_owned)
        .collect())
}
