//! What marks pins as an agent's and what removes them: the layout and cgroup markers a
//! starting agent checks before it adopts pins, the marker of a host setting an agent
//! changed, and `redirector uninstall`.

use std::{
    fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use aya::programs::links::PinnedLink;

use super::{DatapathError, LAYOUT_VERSION, MAPS, PROGRAMS, PinLayout, pins::MIGRATE_REQ_MARKER};

/// Refuses pins of another layout, and marks the pins with ours.
pub(super) fn ensure_layout(layout: &PinLayout) -> Result<(), DatapathError> {
    let found = layout.layout_markers();
    claim_marker(
        layout,
        layout.layout_marker(LAYOUT_VERSION),
        found,
        |other| DatapathError::OtherLayout {
            pins: layout.root().to_path_buf(),
            found: other
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
        },
    )
}

/// Pinned links stay attached to the cgroup they were made for. A marker directory on
/// the bpffs (`cgroup-<inode of the cgroup directory>`) records it, so an agent started
/// with another `--cgroup` fails loudly instead of adopting links that redirect the wrong
/// processes.
pub(super) fn ensure_same_cgroup(
    layout: &PinLayout,
    cgroup_dir: &fs::File,
    cgroup: &Path,
) -> Result<(), DatapathError> {
    let inode = cgroup_dir
        .metadata()
        .map_err(io_error(format!("stat {}", cgroup.display())))?
        .ino();
    let found = layout.cgroup_markers();
    claim_marker(layout, layout.cgroup_marker(inode), found, |_| {
        DatapathError::OtherCgroup {
            pins: layout.root().to_path_buf(),
            cgroup: cgroup.to_path_buf(),
        }
    })
}

/// Refuses the pins if `found` holds a marker other than `ours` (the error `other`
/// makes), else creates `ours`.
fn claim_marker(
    layout: &PinLayout,
    ours: PathBuf,
    found: io::Result<Vec<PathBuf>>,
    other: impl FnOnce(&PathBuf) -> DatapathError,
) -> Result<(), DatapathError> {
    let found = found.map_err(io_error(format!("list {}", layout.root().display())))?;
    if let Some(marker) = found.iter().find(|marker| **marker != ours) {
        return Err(other(marker));
    }
    match fs::create_dir(&ours) {
        Err(error) if error.kind() != io::ErrorKind::AlreadyExists => {
            Err(io_error(format!("create {}", ours.display()))(error))
        }
        _ => Ok(()),
    }
}

/// `net.ipv4.tcp_migrate_req` as it was before an agent set it to 1, and the network
/// namespace (the inode of its nsfs file) it was set in: the marker directory
/// `tcp_migrate_req-was-<value>-netns-<inode>`, so that `redirector uninstall` can put it
/// back, and only in that namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrateReqWas {
    pub value: u8,
    pub netns: u64,
}

impl MigrateReqWas {
    fn marker(self, layout: &PinLayout) -> PathBuf {
        let Self { value, netns } = self;
        layout
            .root()
            .join(format!("{MIGRATE_REQ_MARKER}{value}-netns-{netns}"))
    }

    fn parse(marker: &Path) -> Option<Self> {
        let name = marker.file_name()?.to_str()?;
        let (value, netns) = name
            .strip_prefix(MIGRATE_REQ_MARKER)?
            .split_once("-netns-")?;
        Some(Self {
            value: value.parse().ok()?,
            netns: netns.parse().ok()?,
        })
    }
}

/// Records `was` beside the pins, unless a value is recorded for its network namespace
/// already: that one is from before any agent changed the setting (a restart, or a second
/// agent joining during an upgrade, finds 1 set by the first). Returns whether it recorded.
pub fn record_migrate_req(layout: &PinLayout, was: MigrateReqWas) -> Result<bool, DatapathError> {
    let recorded = recorded_migrate_req(layout)
        .map_err(io_error(format!("list {}", layout.root().display())))?;
    if recorded.iter().any(|(_, old)| old.netns == was.netns) {
        return Ok(false);
    }
    let marker = was.marker(layout);
    match fs::create_dir(&marker) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(error) => Err(io_error(format!("create {}", marker.display()))(error)),
    }
}

/// The values of `net.ipv4.tcp_migrate_req` recorded by [`record_migrate_req`], with their
/// markers (none if nothing is pinned).
pub fn recorded_migrate_req(layout: &PinLayout) -> io::Result<Vec<(PathBuf, MigrateReqWas)>> {
    let markers = layout.migrate_req_markers()?;
    let parsed = markers.into_iter().filter_map(|path| {
        let was = MigrateReqWas::parse(&path)?;
        Some((path, was))
    });
    Ok(parsed.collect())
}

fn io_error(what: String) -> impl FnOnce(io::Error) -> DatapathError {
    move |source| DatapathError::Io { what, source }
}

/// Detaches every program and removes every pin under `layout`, and the markers (also the
/// [`recorded_migrate_req`] ones: read them first). Returns what it removed.
pub fn uninstall(layout: &PinLayout) -> Result<Vec<PathBuf>, DatapathError> {
    let mut removed = Vec::new();
    for name in PROGRAMS {
        let path = layout.link(name);
        if !path.exists() {
            continue;
        }
        let link = PinnedLink::from_pin(&path).map_err(|source| DatapathError::Link {
            path: path.clone(),
            source: source.into(),
        })?;
        // Unpinning hands back the last reference; dropping it detaches the program.
        let fd_link = link.unpin().map_err(|source| DatapathError::Io {
            what: format!("unpin {}", path.display()),
            source,
        })?;
        drop(fd_link);
        removed.push(path);
    }
    for name in MAPS {
        let path = layout.map(name);
        match fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(DatapathError::Io {
                    what: format!("remove {}", path.display()),
                    source,
                });
            }
        }
    }
    let mut markers = layout.cgroup_markers().unwrap_or_default();
    markers.extend(layout.layout_markers().unwrap_or_default());
    markers.extend(layout.id_key_markers().unwrap_or_default());
    let recorded = recorded_migrate_req(layout).unwrap_or_default();
    markers.extend(recorded.into_iter().map(|(marker, _)| marker));
    let dirs = [
        layout.links_dir(),
        layout.maps_dir(),
        layout.root().to_path_buf(),
    ];
    for dir in markers.into_iter().chain(dirs) {
        match fs::remove_dir(&dir) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(DatapathError::Io {
                    what: format!(
                        "remove {} (it holds pins not made by redirector?)",
                        dir.display()
                    ),
                    source,
                });
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_value_reads_back_from_its_marker_name() {
        let layout = PinLayout::new("/sys/fs/bpf/redirector");
        let was = MigrateReqWas {
            value: 0,
            netns: 4026531840,
        };
        let marker = was.marker(&layout);
        assert_eq!(
            marker,
            Path::new("/sys/fs/bpf/redirector/tcp_migrate_req-was-0-netns-4026531840")
        );
        assert_eq!(MigrateReqWas::parse(&marker), Some(was));
        for other in ["layout-2", "cgroup-7", "tcp_migrate_req-was-x-netns-1"] {
            assert_eq!(MigrateReqWas::parse(&layout.root().join(other)), None);
        }
    }
}
