//! cgroup id -> path below `--cgroup`, from a walk of the tree.
//!
//! The kernel has no call from a cgroup id to its path that needs no extra capability
//! (`open_by_handle_at` needs CAP_DAC_READ_SEARCH), but the id is the directory's inode,
//! which `readdir` gives without a `stat` per directory. One walk indexes every cgroup
//! of the tree, so the connections of a new pod cost one walk, not one each. A walk
//! runs only for an id the last one did not see, and at most [`WALK_BURST`] in a row,
//! then one per [`WALK_EVERY`]: a flood of connects from unknown ids (a cgroup deeper
//! than [`MAX_DEPTH`], one removed in between) cannot keep the agent walking.

use std::{
    collections::HashMap,
    os::unix::fs::{DirEntryExt, MetadataExt},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// Levels below `--cgroup` that are walked. Kubernetes pods sit 3 (cgroupfs) to 5 (kind's
/// `kubelet.slice/kubelet-kubepods.slice/...`) levels below the cgroup2 root.
const MAX_DEPTH: usize = 10;
/// Directories indexed at most by one walk (a node has a few thousand cgroups).
const MAX_CGROUPS: usize = 100_000;
/// Walks allowed in a row before the rate limit applies.
pub(super) const WALK_BURST: u32 = 4;
/// One more walk allowed per this long.
pub(super) const WALK_EVERY: Duration = Duration::from_secs(1);

pub(super) struct CgroupPaths {
    root: PathBuf,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The last walk: id -> path relative to the root (`/` for the root).
    by_id: HashMap<u64, Arc<str>>,
    /// When the walk budget is used up (the "theoretical arrival time" of GCRA): a walk
    /// may start while it is at most `WALK_BURST - 1` periods ahead of now.
    budget_until: Option<Instant>,
    walks: u64,
}

impl CgroupPaths {
    pub(super) fn new(root: PathBuf) -> Self {
        Self {
            root,
            state: Mutex::default(),
        }
    }

    /// The path of the cgroup `id`, walking the tree again if the last walk did not see
    /// it and the rate limit allows. Callers of other ids wait for a walk in progress:
    /// it most likely finds theirs too.
    pub(super) fn find(&self, id: u64, now: Instant) -> Option<Arc<str>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(path) = state.by_id.get(&id) {
            return Some(path.clone());
        }
        if !state.may_walk(now) {
            tracing::debug!(id, "cgroup not indexed; walk rate-limited");
            return None;
        }
        let started = Instant::now();
        state.by_id = walk(&self.root);
        state.walks += 1;
        tracing::debug!(
            id,
            cgroups = state.by_id.len(),
            took_us = started.elapsed().as_micros() as u64,
            found = state.by_id.contains_key(&id),
            "walked the cgroup tree"
        );
        state.by_id.get(&id).cloned()
    }

    #[cfg(test)]
    pub(super) fn walks(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).walks
    }
}

impl State {
    fn may_walk(&mut self, now: Instant) -> bool {
        let until = self.budget_until.map_or(now, |until| until.max(now));
        if until > now + WALK_EVERY * (WALK_BURST - 1) {
            return false;
        }
        self.budget_until = Some(until + WALK_EVERY);
        true
    }
}

/// Every cgroup at most [`MAX_DEPTH`] levels below `root`: id -> path relative to it.
fn walk(root: &Path) -> HashMap<u64, Arc<str>> {
    let mut found = HashMap::new();
    let Ok(metadata) = std::fs::metadata(root) else {
        return found;
    };
    found.insert(metadata.ino(), Arc::from("/"));
    let mut dirs = vec![(root.to_path_buf(), String::new(), 0)];
    while let Some((dir, relative, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if found.len() >= MAX_CGROUPS {
                return found;
            }
            let path = format!("{relative}/{}", entry.file_name().to_string_lossy());
            found.insert(entry.ino(), Arc::from(path.as_str()));
            if depth + 1 < MAX_DEPTH {
                dirs.push((entry.path(), path, depth + 1));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_are_rate_limited_after_a_burst() {
        let mut state = State::default();
        let start = Instant::now();
        for _ in 0..WALK_BURST {
            assert!(state.may_walk(start));
        }
        assert!(!state.may_walk(start));
        assert!(!state.may_walk(start + WALK_EVERY / 2));
        assert!(state.may_walk(start + WALK_EVERY));
        assert!(!state.may_walk(start + WALK_EVERY));
        // A quiet spell earns the burst back, and no more.
        let later = start + WALK_EVERY * 100;
        for _ in 0..WALK_BURST {
            assert!(state.may_walk(later));
        }
        assert!(!state.may_walk(later));
    }

    #[test]
    fn the_walk_stops_at_its_depth() {
        let root = tempfile::tempdir().unwrap();
        let deep: PathBuf = (0..=MAX_DEPTH).map(|i| format!("d{i}")).collect();
        std::fs::create_dir_all(root.path().join(&deep)).unwrap();
        let found = walk(root.path());
        assert_eq!(found.len(), 1 + MAX_DEPTH, "the root and MAX_DEPTH levels");
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let last: PathBuf = (0..MAX_DEPTH).map(|i| format!("d{i}")).collect();
        let expected = format!("/{}", last.display());
        assert_eq!(found[&ino(&root.path().join(&last))].as_ref(), expected);
        assert!(!found.contains_key(&ino(&root.path().join(&deep))));
    }
}
