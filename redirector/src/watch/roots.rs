//! The watched directories: where the events that can change what they hold happen, and
//! which inode each watch is on.

use std::{
    ffi::OsString,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::SystemTime,
};

use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher};

use super::WatchError;

/// Where each Backend directory is seen from: its own (recursive) watch, and its entry
/// in its parent's (non-recursive) watch, which is how a swap of the directory as a
/// whole shows (a symlink retargeted by renaming another over it, as git-sync and
/// ConfigMap volumes do; a directory moved over it or made anew).
///
/// Anything else in a parent is none of the agent's business: an agent logging into the
/// parent of its Backend directory (`> /srv/rd/agent.log` beside `/srv/rd/backends`),
/// or its access log there, must not reload at every line it writes, which it then
/// logged, which was another event (232 reloads in 12 s, nothing changed).
#[derive(Debug, Clone)]
pub struct Places {
    dirs: Vec<Place>,
}

#[derive(Debug, Clone)]
struct Place {
    /// As given (notify reports events of the directory's watch below this path).
    given: PathBuf,
    absolute: PathBuf,
    /// Watched for swaps; `None` for `/`.
    parent: Option<PathBuf>,
    /// The directory's entry in `parent`; `None` when the path ends in `..`, whose
    /// entry cannot be named (then anything in the parent counts).
    name: Option<OsString>,
}

impl Places {
    pub fn new(dirs: &[PathBuf]) -> Self {
        let dirs = dirs
            .iter()
            .map(|given| {
                // Absolute: `backends` alone has an empty parent.
                let absolute = std::path::absolute(given).unwrap_or_else(|_| given.clone());
                Place {
                    given: given.clone(),
                    parent: absolute.parent().map(Path::to_path_buf),
                    name: absolute.file_name().map(ToOwned::to_owned),
                    absolute,
                }
            })
            .collect();
        Self { dirs }
    }

    /// Whether `event` can change what the Backend directories hold. Errors and events
    /// without a path (notify lost some: rescan) count, to be safe; reading counts not.
    pub fn matters(&self, event: &notify::Result<Event>) -> bool {
        match event {
            Err(_) => true,
            Ok(event) if event.kind.is_access() => false,
            Ok(event) if event.paths.is_empty() => true,
            Ok(event) => event.paths.iter().any(|path| self.touches(path)),
        }
    }

    /// Whether `path` is a Backend directory, inside one, or its entry in its parent.
    fn touches(&self, path: &Path) -> bool {
        if (self.dirs.iter()).any(|d| path.starts_with(&d.given) || path.starts_with(&d.absolute)) {
            return true;
        }
        let mut beside = (self.dirs.iter())
            .filter(|d| d.parent.is_some() && d.parent.as_deref() == path.parent())
            .peekable();
        // From no watch set here (notify reports watched paths as they were given):
        // nothing tells what it is, so it counts.
        if beside.peek().is_none() {
            return true;
        }
        beside.any(|d| d.name.is_none() || d.name.as_deref() == path.file_name())
    }
}

/// The watched directories, and what each was when its watch was set: a directory
/// swapped as a whole (a retargeted symlink, as git-sync makes; a directory moved or
/// made anew over it) is another inode, whose watch must be set again. The parent of
/// each is watched too (not recursively), so such a swap is seen at all.
pub struct Roots {
    pub dirs: Vec<PathBuf>,
    watched: Vec<Option<(u64, u64, Option<SystemTime>)>>,
}

impl Roots {
    pub fn watch(
        watcher: &mut RecommendedWatcher,
        dirs: Vec<PathBuf>,
        places: &Places,
    ) -> Result<Self, WatchError> {
        let mut watched = Vec::with_capacity(dirs.len());
        for (dir, place) in dirs.iter().zip(&places.dirs) {
            watcher.watch(dir, RecursiveMode::Recursive)?;
            watched.push(identity(dir));
            if let Some(parent) = &place.parent {
                watcher.watch(parent, RecursiveMode::NonRecursive)?;
            }
        }
        Ok(Self { dirs, watched })
    }

    /// Sets the watch again on every directory that is not the one watched any more.
    pub fn follow(&mut self, watcher: &mut RecommendedWatcher) {
        for (dir, watched) in self.dirs.iter().zip(&mut self.watched) {
            let now = identity(dir);
            if now == *watched || now.is_none() {
                continue;
            }
            // The old inode's watch may be gone with it already.
            let _ = watcher.unwatch(dir);
            match watcher.watch(dir, RecursiveMode::Recursive) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "the Backend directory was swapped; watching the new one");
                    *watched = now;
                }
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "cannot watch the swapped Backend directory; trying again at the next change")
                }
            }
        }
    }
}

/// The directory `path` leads to (symlinks followed): device, inode and birth time (a
/// directory made anew may get the inode number of the one it replaced).
fn identity(path: &Path) -> Option<(u64, u64, Option<SystemTime>)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino(), meta.created().ok()))
}
