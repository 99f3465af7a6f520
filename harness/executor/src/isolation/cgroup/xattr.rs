//! Extended attributes on cgroup directories: how systemd marks a cgroup it
//! delegated, and how taskgate marks what it made or changed in its parent.

use crate::error::ExecutorError;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("cgroup paths hold no NUL")
}

pub(super) fn get_xattr(path: &Path, name: &str) -> Option<String> {
    let (cpath, cname) = (c_path(path), CString::new(name).ok()?);
    let mut buf = [0u8; 256];
    // SAFETY: valid C strings and a buffer of the length given.
    let n = unsafe {
        libc::getxattr(
            cpath.as_ptr(),
            cname.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| String::from_utf8_lossy(&buf[..n as usize]).into_owned())
}

pub(super) fn set_xattr(path: &Path, name: &str, value: &str) -> Result<(), ExecutorError> {
    let (cpath, cname) = (c_path(path), CString::new(name).expect("no NUL"));
    // SAFETY: valid C strings and a value of the length given.
    let rc = unsafe {
        libc::setxattr(
            cpath.as_ptr(),
            cname.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc < 0 {
        return Err(ExecutorError::io(format!(
            "mark {} with {name}",
            path.display()
        ))(std::io::Error::last_os_error()));
    }
    Ok(())
}

pub(super) fn remove_xattr(path: &Path, name: &str) -> Result<(), ExecutorError> {
    let (cpath, cname) = (c_path(path), CString::new(name).expect("no NUL"));
    // SAFETY: valid C strings.
    let rc = unsafe { libc::removexattr(cpath.as_ptr(), cname.as_ptr()) };
    let err = std::io::Error::last_os_error();
    if rc < 0 && err.raw_os_error() != Some(libc::ENODATA) {
        return Err(ExecutorError::io(format!(
            "unmark {} ({name})",
            path.display()
        ))(err));
    }
    Ok(())
}
