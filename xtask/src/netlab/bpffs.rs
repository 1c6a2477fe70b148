//! A private bpffs instance, so a test's pinned programs and maps never meet the host's
//! `/sys/fs/bpf` or another test's pins.

use super::unique_name;
use anyhow::{Context, Result, bail};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A bpffs mounted on a fresh directory under the temp dir; unmounted and removed on drop.
///
/// Each mount of bpffs is a separate instance, so dropping it also releases every pin made
/// in it (programs stay attached only while something else holds a reference).
#[derive(Debug)]
pub struct Bpffs {
    path: PathBuf,
}

impl Bpffs {
    /// Creates `$TMPDIR/rdbpf<pid>-<n>` and mounts bpffs on it.
    pub fn new() -> Result<Bpffs> {
        let path = std::env::temp_dir().join(unique_name("bpf"));
        std::fs::create_dir(&path).with_context(|| format!("cannot create {}", path.display()))?;
        if let Err(e) = mount_bpf(&path) {
            let _ = std::fs::remove_dir(&path);
            return Err(e);
        }
        Ok(Bpffs { path })
    }

    /// The mount point (pass it to `redirector run --bpffs`).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        // Lazy: a process that still has a pin open (a killed agent being reaped) must not
        // keep the mount point busy and leak it.
        if let Err(e) = c_path(&self.path).and_then(|p| {
            // SAFETY: `p` is a valid NUL-terminated path that outlives the call.
            let rc = unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) };
            if rc != 0 {
                bail!("umount2: {}", std::io::Error::last_os_error());
            }
            Ok(())
        }) {
            eprintln!(
                "netlab: cannot unmount bpffs {}: {e:#}",
                self.path.display()
            );
            // Do not remove the directory: that would delete the pins of a live mount.
            return;
        }
        if let Err(e) = std::fs::remove_dir(&self.path) {
            eprintln!("netlab: cannot remove {}: {e}", self.path.display());
        }
    }
}

fn mount_bpf(path: &Path) -> Result<()> {
    let target = c_path(path)?;
    // SAFETY: all pointers are valid NUL-terminated strings (or null `data`, which mount(2)
    // accepts) that outlive the call.
    let rc = unsafe {
        libc::mount(
            c"bpf".as_ptr(),
            target.as_ptr(),
            c"bpf".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        bail!(
            "cannot mount bpffs on {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("path {} contains a NUL byte", path.display()))
}
