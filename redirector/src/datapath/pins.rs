//! Where the datapath lives on the bpf filesystem.
//!
//! ```text
//! <bpffs>/maps/<MAP NAME>      the maps, shared by every program generation
//! <bpffs>/links/<program>      the cgroup links; while they are pinned the programs
//!                              stay attached, also when no agent runs
//! <bpffs>/cgroup-<inode>       empty directory naming the cgroup the links attach to
//! <bpffs>/tcp_migrate_req-was-<value>-netns-<inode>
//!                              empty directory: the agent set net.ipv4.tcp_migrate_req
//!                              in that network namespace, and `uninstall` puts <value>
//!                              back (datapath/install.rs)
//! ```

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::DatapathError;

/// Name prefix of the `tcp_migrate_req-was-<value>-netns-<inode>` markers.
pub const MIGRATE_REQ_MARKER: &str = "tcp_migrate_req-was-";
pub const ID_KEY_MARKER: &str = "id-key-";

#[derive(Debug, Clone)]
pub struct PinLayout {
    root: PathBuf,
}

impl PinLayout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn maps_dir(&self) -> PathBuf {
        self.root.join("maps")
    }

    pub fn links_dir(&self) -> PathBuf {
        self.root.join("links")
    }

    pub fn map(&self, name: &str) -> PathBuf {
        self.maps_dir().join(name)
    }

    pub fn link(&self, program: &str) -> PathBuf {
        self.links_dir().join(program)
    }

    /// Marker of the cgroup the links are attached to (see `ensure_same_cgroup`).
    pub fn cgroup_marker(&self, inode: u64) -> PathBuf {
        self.root.join(format!("cgroup-{inode}"))
    }

    /// Every cgroup marker present.
    pub fn cgroup_markers(&self) -> std::io::Result<Vec<PathBuf>> {
        self.markers("cgroup-")
    }

    /// Marker of the maps' layout version (see `ensure_layout`).
    pub fn layout_marker(&self, version: u32) -> PathBuf {
        self.root.join(format!("layout-{version}"))
    }

    /// Every layout marker present.
    pub fn layout_markers(&self) -> std::io::Result<Vec<PathBuf>> {
        self.markers("layout-")
    }

    /// Marker holding the node's id key, in hex (see `id_key`).
    pub fn id_key_marker(&self, hex: &str) -> PathBuf {
        self.root.join(format!("{ID_KEY_MARKER}{hex}"))
    }

    /// Every id key marker present.
    pub fn id_key_markers(&self) -> std::io::Result<Vec<PathBuf>> {
        self.markers(ID_KEY_MARKER)
    }

    /// Every marker of `net.ipv4.tcp_migrate_req`'s value before an agent set it (see
    /// `record_migrate_req`); none if nothing is pinned.
    pub fn migrate_req_markers(&self) -> std::io::Result<Vec<PathBuf>> {
        match self.markers(MIGRATE_REQ_MARKER) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            markers => markers,
        }
    }

    fn markers(&self, prefix: &str) -> std::io::Result<Vec<PathBuf>> {
        let mut markers = Vec::new();
        for entry in fs::read_dir(&self.root)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(prefix) {
                markers.push(entry.path());
            }
        }
        Ok(markers)
    }

    /// Fails unless `root` is (or would be created) on a bpf filesystem, then creates the
    /// directories.
    pub fn prepare(&self) -> Result<(), DatapathError> {
        ensure_on_bpffs(&self.root)?;
        for dir in [self.maps_dir(), self.links_dir()] {
            fs::create_dir_all(&dir).map_err(|source| DatapathError::Io {
                what: format!("create {}", dir.display()),
                source,
            })?;
        }
        Ok(())
    }
}

/// Pins only work on a bpf filesystem; say how to mount one instead of failing later
/// with EPERM from the kernel.
fn ensure_on_bpffs(path: &Path) -> Result<(), DatapathError> {
    let mountinfo =
        fs::read_to_string("/proc/self/mountinfo").map_err(|source| DatapathError::Io {
            what: "read /proc/self/mountinfo".into(),
            source,
        })?;
    let path = absolute(path);
    match mount_of(&mountinfo, &path) {
        Some((mount_point, "bpf")) => {
            tracing::debug!(mount_point, "pin directory is on a bpf filesystem");
            Ok(())
        }
        found => Err(DatapathError::NotBpffs {
            path,
            found: found
                .map(|(m, t)| format!("{t} mounted at {m}"))
                .unwrap_or_default(),
        }),
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The mount point that contains `path` (the longest matching prefix) and its fstype.
fn mount_of<'a>(mountinfo: &'a str, path: &Path) -> Option<(&'a str, &'a str)> {
    mountinfo
        .lines()
        .filter_map(|line| {
            // "id parent maj:min root mount-point options ... - fstype source super-options"
            let mut fields = line.split(' ');
            let mount_point = fields.nth(4)?;
            let fstype = line.split(" - ").nth(1)?.split(' ').next()?;
            Some((mount_point, fstype))
        })
        .filter(|(mount_point, _)| path.starts_with(mount_point))
        .max_by_key(|(mount_point, _)| mount_point.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 0:21 / / rw - ext4 /dev/vda rw
30 22 0:26 / /sys rw,nosuid - sysfs sysfs rw
41 30 0:35 / /sys/fs/bpf rw,nosuid - bpf bpf rw
52 22 0:45 / /tmp/x rw - bpf bpf rw
";

    #[test]
    fn finds_the_innermost_mount() {
        let found = mount_of(MOUNTINFO, Path::new("/sys/fs/bpf/redirector"));
        assert_eq!(found, Some(("/sys/fs/bpf", "bpf")));
        assert_eq!(
            mount_of(MOUNTINFO, Path::new("/sys/kernel")),
            Some(("/sys", "sysfs"))
        );
        assert_eq!(
            mount_of(MOUNTINFO, Path::new("/tmp/x/r")),
            Some(("/tmp/x", "bpf"))
        );
        assert_eq!(
            mount_of(MOUNTINFO, Path::new("/tmp/xy")),
            Some(("/", "ext4"))
        );
    }
}
