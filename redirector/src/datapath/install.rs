//! What marks pins as an agent's and what removes them: the layout and cgroup markers a
//! starting agent checks before it adopts pins, and `redirector uninstall`.

use std::{
    fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use aya::programs::links::PinnedLink;

use super::{DatapathError, LAYOUT_VERSION, MAPS, PROGRAMS, PinLayout};

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

fn io_error(what: String) -> impl FnOnce(io::Error) -> DatapathError {
    move |source| DatapathError::Io { what, source }
}

/// Detaches every program and removes every pin under `layout`. Returns what it removed.
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
