//! A cgroup v2 directory: what the agent attaches its connect hooks to, and where a test
//! puts the client it wants redirected.

use super::unique_name;
use anyhow::{Context, Result, anyhow};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A fresh cgroup directory directly under the cgroup2 mount, removed on drop.
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// Creates `<cgroup2 mount>/rd<prefix><pid>-<n>`.
    pub fn new(prefix: &str) -> Result<Cgroup> {
        let root = cgroup2_mount()?;
        let path = root.join(unique_name(prefix));
        std::fs::create_dir(&path)
            .with_context(|| format!("cannot create cgroup {}", path.display()))?;
        Ok(Cgroup { path })
    }

    /// Creates `<this cgroup>/<name>` (e.g. a kubelet-style `pod<uid>` below the attached
    /// cgroup), removed on drop; drop it before its parent.
    pub fn child(&self, name: &str) -> Result<Cgroup> {
        let path = self.path.join(name);
        std::fs::create_dir(&path)
            .with_context(|| format!("cannot create cgroup {}", path.display()))?;
        Ok(Cgroup { path })
    }

    /// The cgroup directory (pass it to `redirector run --cgroup`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `<path>/cgroup.procs`: writing a pid there moves that process in.
    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// Moves process `pid` into this cgroup.
    pub fn add_pid(&self, pid: u32) -> Result<()> {
        let file = self.procs_file();
        std::fs::write(&file, pid.to_string())
            .with_context(|| format!("cannot move pid {pid} into {}", file.display()))
    }

    /// The pids currently in this cgroup.
    pub fn pids(&self) -> Result<Vec<u32>> {
        let file = self.procs_file();
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// Whether `cgroup.events` says no process is left in this cgroup or below it.
    fn unpopulated(&self) -> bool {
        std::fs::read_to_string(self.path.join("cgroup.events"))
            .map(|t| t.lines().any(|l| l.trim() == "populated 0"))
            .unwrap_or(false)
    }

    /// Moves every remaining process to the parent cgroup (never kills anything: the test
    /// owns its processes, and a stray one may belong to someone else).
    fn evacuate(&self) {
        let Some(parent) = self.path.parent() else {
            return;
        };
        let parent_procs = parent.join("cgroup.procs");
        for pid in self.pids().unwrap_or_default() {
            if let Err(e) = std::fs::write(&parent_procs, pid.to_string()) {
                // ESRCH: it exited meanwhile, which is what we want anyway.
                if e.raw_os_error() != Some(libc::ESRCH) {
                    eprintln!(
                        "netlab: cannot move pid {pid} out of {}: {e}",
                        self.path.display()
                    );
                }
            }
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // A process forking while we move it out can leave a new child behind, and an
        // exiting process is still counted until the kernel finishes reaping it: loop,
        // watching `cgroup.events`, for a bounded time.
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            self.evacuate();
            if self.unpopulated() {
                match std::fs::remove_dir(&self.path) {
                    Ok(()) => return,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                    Err(e) if Instant::now() >= deadline => {
                        eprintln!("netlab: cannot remove cgroup {}: {e}", self.path.display());
                        return;
                    }
                    Err(_) => {}
                }
            } else if Instant::now() >= deadline {
                eprintln!(
                    "netlab: cgroup {} still populated (pids {:?}); leaving it",
                    self.path.display(),
                    self.pids().unwrap_or_default()
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The cgroup v2 mount point, read from `/proc/mounts` (it is `/sys/fs/cgroup` on most
/// hosts but e.g. `/sys/fs/cgroup/unified` on hybrid layouts, so never assume).
pub fn cgroup2_mount() -> Result<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").context("cannot read /proc/mounts")?;
    parse_cgroup2_mount(&mounts).ok_or_else(|| anyhow!("no cgroup2 filesystem in /proc/mounts"))
}

fn parse_cgroup2_mount(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_source, target, fstype) = (fields.next()?, fields.next()?, fields.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(unescape_mount_field(target)))
    })
}

/// Undoes the octal escapes (`\040` for a space, ...) the kernel uses in `/proc/mounts`.
fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let s = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(s, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_hybrid_cgroup2_mount() {
        let mounts = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            parse_cgroup2_mount(mounts),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(parse_cgroup2_mount("proc /proc proc rw 0 0\n"), None);
    }

    #[test]
    fn unescapes_spaces() {
        assert_eq!(unescape_mount_field(r"/a\040b"), "/a b");
        assert_eq!(unescape_mount_field(r"/a\b"), r"/a\b");
    }
}
