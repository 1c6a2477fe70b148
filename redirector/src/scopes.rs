//! Per-namespace scoping: which pod cgroup belongs to which namespace.
//!
//! With `--backend-scope namespace`, a Backend applies only to pods of its own namespace.
//! The connect hooks find the caller's scope by walking its cgroup ancestry through the
//! `SCOPES` map (cgroup id -> scope of the namespace); this task keeps that map equal to
//! the pods of this node, whose cgroup directories it finds under `--pod-cgroup-root`.
//! A process in no known pod cgroup (host processes, other runtimes) gets the cluster
//! scope only: Backends of a namespace never apply to it.

use std::{
    collections::BTreeMap,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::{datapath::ScopeMap, table::namespace_scope};

/// How deep below the root pod cgroups are looked for (kubepods/<qos>/pod<uid>).
const SEARCH_DEPTH: usize = 4;
/// Retry period while a pod's cgroup has not been created yet.
const RETRY: Duration = Duration::from_secs(1);

/// Pods of this node: uid -> namespace.
pub type Pods = BTreeMap<String, String>;

/// Keeps `SCOPES` equal to the pods of this node.
pub struct ScopeSync {
    map: ScopeMap,
    root: PathBuf,
}

impl ScopeSync {
    pub fn new(map: ScopeMap, root: PathBuf) -> Self {
        Self { map, root }
    }

    /// Maps every pod of `pods` whose cgroup exists; returns how many have none yet.
    pub fn sync(&mut self, pods: &Pods) -> usize {
        let found = pod_cgroups(&self.root, pods.keys().map(String::as_str));
        tracing::debug!(root = %self.root.display(), pods = pods.len(), found = found.len(), "pod cgroups");
        let desired: BTreeMap<u64, u64> = found
            .iter()
            .filter_map(|(uid, cgroup)| {
                pods.get(uid)
                    .map(|namespace| (*cgroup, namespace_scope(namespace)))
            })
            .collect();
        match self.map.sync(&desired) {
            Ok((0, 0)) => {}
            Ok((written, removed)) => {
                tracing::info!(written, removed, pods = desired.len(), "pod scopes updated");
            }
            Err(error) => tracing::error!(%error, "updating pod scopes"),
        }
        let missing = pods.len() - found.len();
        if missing > 0 {
            tracing::debug!(missing, "pods without a cgroup yet; looking again shortly");
        }
        missing
    }

    /// Follows `pods` until `shutdown`, looking again every second while a pod's cgroup
    /// has not been created yet.
    pub async fn run(mut self, mut pods: watch::Receiver<Pods>, shutdown: CancellationToken) {
        loop {
            let current = pods.borrow_and_update().clone();
            let missing = self.sync(&current);
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = pods.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(RETRY), if missing > 0 => {}
            }
        }
    }
}

/// The cgroup id (the directory's inode) of each pod in `uids` whose cgroup exists under
/// `root`, in either kubelet layout: cgroupfs (`pod<uid>`) or systemd
/// (`kubepods-<qos>-pod<uid with _ for ->.slice`).
pub fn pod_cgroups<'a>(root: &Path, uids: impl Iterator<Item = &'a str>) -> BTreeMap<String, u64> {
    let wanted: BTreeMap<String, &str> = uids
        .flat_map(|uid| {
            [
                (format!("pod{uid}"), uid),
                (format!("pod{}.slice", uid.replace('-', "_")), uid),
            ]
        })
        .collect();
    let mut found = BTreeMap::new();
    let mut dirs = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            if !metadata.is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let matched = wanted
                .iter()
                .find(|(suffix, _)| name == **suffix || name.ends_with(&format!("-{suffix}")));
            match matched {
                Some((_, uid)) => {
                    found.insert((*uid).to_owned(), metadata.ino());
                }
                None if depth < SEARCH_DEPTH => dirs.push((entry.path(), depth + 1)),
                None => {}
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_pods_in_both_kubelet_layouts() {
        let root = tempfile::tempdir().unwrap();
        let cgroupfs = root.path().join("kubepods/burstable/pod1111-aaaa");
        let systemd = root.path().join(
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod2222_bbbb.slice",
        );
        let container = cgroupfs.join("cri-containerd-xyz.scope");
        for dir in [&cgroupfs, &systemd, &container] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let found = pod_cgroups(
            root.path(),
            ["1111-aaaa", "2222-bbbb", "3333-cccc"].into_iter(),
        );
        assert_eq!(found.len(), 2);
        assert_eq!(
            found["1111-aaaa"],
            std::fs::metadata(&cgroupfs).unwrap().ino()
        );
        assert_eq!(
            found["2222-bbbb"],
            std::fs::metadata(&systemd).unwrap().ino()
        );
    }
}
