//! Per-namespace scoping: which pod cgroup belongs to which namespace.
//!
//! With `--backend-scope namespace`, a Backend applies only to pods of its own namespace.
//! The connect hooks find the caller's scope by walking its cgroup ancestry through the
//! `SCOPES` map (cgroup id -> scope of the namespace); this task keeps that map equal to
//! the pods of this node, whose cgroup directories it finds under `--pod-cgroup-root`.
//! A process in no known pod cgroup (host processes, other runtimes) gets the cluster
//! scope only: Backends of a namespace never apply to it.
//!
//! A pod the agent has not mapped yet (its cgroup appeared after the last look) must not
//! go direct either: the top of the kubelet's pod tree (`kubepods`, `kubepods.slice`) is
//! listed as [`POD_TREE`], and the hooks refuse connects to Backend addresses from below
//! it that reach no listed pod. While pods wait for their cgroup the tree is looked at
//! again, every [`RETRY_FIRST`] at first, so such a refusal is short for a pod that
//! starts as soon as it is bound; the period doubles up to [`RETRY_MAX`] for pods whose
//! cgroup takes long to appear (volumes to mount) or never will (finished pods).

use std::{
    collections::BTreeMap,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use redirector_common::POD_TREE;

use crate::{datapath::ScopeMap, table::namespace_scope, workload::Pods};

/// How deep below the root pod cgroups are looked for (kubepods/<qos>/pod<uid>).
const SEARCH_DEPTH: usize = 4;
/// First retry period while a pod's cgroup has not been created yet (the kubelet creates
/// it after the API has bound the pod to this node, which is when we hear of it).
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// Longest retry period, reached after about 3 s of the same pods missing.
const RETRY_MAX: Duration = Duration::from_secs(2);
/// How deep below the root the top of the pod tree is looked for
/// (`kubelet.slice/kubelet-kubepods.slice` in kind is the deepest known layout).
const TREE_DEPTH: usize = 2;

/// How long a scoped agent waits for the first list of its node's pods.
const POD_LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// This node's pods, once the API server has listed them.
pub async fn first_pods(pods: &mut watch::Receiver<Pods>) -> anyhow::Result<Pods> {
    let listed = async {
        if pods.borrow().is_empty() {
            let _ = pods.changed().await;
        }
        pods.borrow_and_update().clone()
    };
    tokio::time::timeout(POD_LIST_TIMEOUT, listed)
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "this node's pods were not listed within {POD_LIST_TIMEOUT:?}: with \
             --backend-scope namespace the agent needs list and watch on pods \
             (deploy/ grants them)"
            )
        })
}

/// Keeps `SCOPES` equal to the pods of this node.
pub struct ScopeSync {
    map: ScopeMap,
    root: PathBuf,
    /// Whether the last look found the pod tree (to log only when that changes).
    tree_found: Option<bool>,
}

impl ScopeSync {
    pub fn new(map: ScopeMap, root: PathBuf) -> Self {
        Self {
            map,
            root,
            tree_found: None,
        }
    }

    /// Maps every pod of `pods` whose cgroup exists; returns how many have none yet.
    pub fn sync(&mut self, pods: &Pods) -> usize {
        let found = pod_cgroups(&self.root, pods.keys().map(String::as_str));
        tracing::debug!(root = %self.root.display(), pods = pods.len(), found = found.len(), "pod cgroups");
        let trees = pod_trees(&self.root);
        self.log_trees(&trees);
        let desired: BTreeMap<u64, u64> = (trees.iter().map(|tree| (*tree, POD_TREE)))
            .chain(found.iter().filter_map(|(uid, cgroup)| {
                pods.get(uid)
                    .map(|pod| (*cgroup, namespace_scope(&pod.namespace)))
            }))
            .collect();
        match self.map.sync(&desired) {
            Ok((0, 0)) => {}
            Ok((written, removed)) => {
                let pods = desired.len() - trees.len();
                tracing::info!(
                    written,
                    removed,
                    pods,
                    trees = trees.len(),
                    "pod scopes updated"
                );
            }
            Err(error) => tracing::error!(%error, "updating pod scopes"),
        }
        let missing = pods.len() - found.len();
        if missing > 0 {
            tracing::debug!(missing, "pods without a cgroup yet; looking again shortly");
        }
        missing
    }

    fn log_trees(&mut self, trees: &[u64]) {
        let found = !trees.is_empty();
        if self.tree_found == Some(found) {
            return;
        }
        self.tree_found = Some(found);
        if found {
            tracing::info!(root = %self.root.display(), "pod cgroup tree found: connects to Backends from pods not mapped yet are refused until they are");
        } else {
            tracing::warn!(root = %self.root.display(), "no kubepods cgroup found below --pod-cgroup-root: a pod's connects to Backends made before the agent maps it (at most 100 ms after its cgroup appears) go direct; pass --pod-cgroup-root");
        }
    }

    /// Follows `pods` until `shutdown`, looking again while a pod's cgroup has not been
    /// created yet (every [`RETRY_FIRST`] after a change of the pods, backing off to
    /// [`RETRY_MAX`]).
    pub async fn run(mut self, mut pods: watch::Receiver<Pods>, shutdown: CancellationToken) {
        let mut retry = RETRY_FIRST;
        loop {
            let current = pods.borrow_and_update().clone();
            let missing = self.sync(&current);
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = pods.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    retry = RETRY_FIRST;
                }
                () = tokio::time::sleep(retry), if missing > 0 => {
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
        }
    }
}

/// The cgroup ids of the tops of the kubelet's pod tree at or below `root`: directories
/// named `kubepods` (cgroupfs driver), `kubepods.slice` or `*-kubepods.slice` (systemd).
pub fn pod_trees(root: &Path) -> Vec<u64> {
    let mut trees = Vec::new();
    let mut dirs = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| is_pod_tree_name(&n)) {
            if let Ok(metadata) = std::fs::metadata(&dir) {
                trees.push(metadata.ino());
            }
            continue;
        }
        if depth == TREE_DEPTH {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push((entry.path(), depth + 1));
            }
        }
    }
    trees
}

fn is_pod_tree_name(name: &str) -> bool {
    name == "kubepods" || name == "kubepods.slice" || name.ends_with("-kubepods.slice")
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

    #[test]
    fn finds_the_top_of_the_pod_tree_in_each_layout() {
        let ino = |path: &Path| std::fs::metadata(path).unwrap().ino();
        for layout in [
            "kubepods",
            "kubepods.slice",
            "kubelet.slice/kubelet-kubepods.slice",
        ] {
            let root = tempfile::tempdir().unwrap();
            let tree = root.path().join(layout);
            // A nested look-alike is part of the tree, not a second top.
            std::fs::create_dir_all(tree.join("besteffort/kubepods")).unwrap();
            std::fs::create_dir_all(root.path().join("system.slice/kubepods-like")).unwrap();
            assert_eq!(pod_trees(root.path()), [ino(&tree)], "{layout}");
            assert_eq!(pod_trees(&tree), [ino(&tree)], "the root itself: {layout}");
        }
        let empty = tempfile::tempdir().unwrap();
        assert!(pod_trees(empty.path()).is_empty());
    }
}
