//! Who made a connection: the cgroup id the connect hook records -> a [`Workload`].
//!
//! A cgroup v2 id is the inode of the cgroup's directory, so the directory is found by
//! walking the `--cgroup` tree (`paths.rs`, rate-limited); its path relative to
//! `--cgroup` names the workload on a host. On Kubernetes the path's pod component (the
//! kubelet's `pod<uid>` directory, cgroupfs or systemd layout) names the pod, and this
//! node's pods (watched by `kubernetes/pods.rs`) give its namespace, name and service
//! account.
//!
//! Resolved once per connection and cached by id, so a connection from a known cgroup
//! costs a hash lookup. The cache never says what is no longer true: an entry is dropped
//! when its pod's identity changes (a pod resolved before its API object arrived, a pod
//! deleted), and the whole cache when it is full. Removed cgroups leave entries behind
//! until then, unused: cgroup ids are not reused while the node runs.

mod paths;
#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    path::PathBuf,
    sync::{Arc, RwLock},
    time::Instant,
};

use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use paths::CgroupPaths;

/// Cached workloads at most; a full cache is emptied (a node has far fewer cgroups
/// that connect: this only bounds what removed ones leave behind).
const CACHE_MAX: usize = 16 * 1024;

/// Where a connection came from, as the access log's `source` object shows it: keys
/// that do not apply are left out, `cgroup` is always there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Workload {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Not logged: the cgroup path carries it already.
    #[serde(skip)]
    pub pod_uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// The cgroup's path relative to `--cgroup` (`/` for `--cgroup` itself), or its id
    /// in decimal when no directory of the tree has it (removed, or too deep).
    pub cgroup: String,
}

impl Workload {
    /// A cgroup whose directory was not found.
    pub fn unknown(cgroup_id: u64) -> Self {
        Self {
            namespace: None,
            pod: None,
            pod_uid: None,
            service_account: None,
            cgroup: cgroup_id.to_string(),
        }
    }

    /// The namespace, for metric labels: `""` outside Kubernetes (and for processes
    /// outside any known pod).
    pub fn source_namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }
}

/// `namespace/pod` for a known pod, else the cgroup path (log lines).
impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.namespace, &self.pod) {
            (Some(namespace), Some(pod)) => write!(f, "{namespace}/{pod}"),
            _ => f.write_str(&self.cgroup),
        }
    }
}

/// A pod of this node, as identity needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIdentity {
    pub namespace: String,
    pub name: String,
    /// `spec.serviceAccountName`.
    pub service_account: Option<String>,
}

/// This node's pods, by the uid their cgroup is named after.
pub type Pods = BTreeMap<String, PodIdentity>;

/// cgroup id -> workload, shared by every connection.
pub struct Workloads {
    paths: CgroupPaths,
    /// `None` outside Kubernetes: paths are then never read as pods.
    pods: RwLock<Option<Arc<Pods>>>,
    cache: RwLock<Cache>,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<u64, Arc<Workload>>,
    /// Bumped when the pods change: a workload resolved with the pods before is not
    /// cached after.
    generation: u64,
}

impl Workloads {
    /// Workloads below `root` (`--cgroup`); on Kubernetes, pods once [`Self::set_pods`]
    /// says which there are.
    pub fn new(root: PathBuf, kubernetes: bool) -> Self {
        Self {
            paths: CgroupPaths::new(root),
            pods: RwLock::new(kubernetes.then(Arc::default)),
            cache: RwLock::default(),
        }
    }

    /// The workload of `cgroup_id`. A miss looks in the last walk of the tree, and walks
    /// it again if the id is not there and the rate limit allows (this blocks: see
    /// [`Self::resolve`]).
    pub fn of(&self, cgroup_id: u64) -> Arc<Workload> {
        self.of_at(cgroup_id, Instant::now())
    }

    fn of_at(&self, cgroup_id: u64, now: Instant) -> Arc<Workload> {
        if let Some(hit) = self.cached(cgroup_id) {
            return hit;
        }
        let generation = self.read_cache().generation;
        let Some(path) = self.paths.find(cgroup_id, now) else {
            // Not cached: the directory may appear in the next walk.
            return Arc::new(Workload::unknown(cgroup_id));
        };
        let pods = self.pods.read().unwrap_or_else(|p| p.into_inner()).clone();
        let workload = Arc::new(identify(&path, pods.as_deref()));
        let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
        if cache.generation == generation {
            if cache.entries.len() >= CACHE_MAX {
                cache.entries.clear();
            }
            cache.entries.insert(cgroup_id, workload.clone());
        }
        workload
    }

    /// The cached workload of `cgroup_id`, if any (a hash lookup).
    pub fn cached(&self, cgroup_id: u64) -> Option<Arc<Workload>> {
        self.read_cache().entries.get(&cgroup_id).cloned()
    }

    /// [`Self::of`] for async callers: a miss, which may walk the cgroup tree, runs on
    /// the blocking pool.
    pub async fn resolve(self: &Arc<Self>, cgroup_id: u64) -> Arc<Workload> {
        if let Some(hit) = self.cached(cgroup_id) {
            return hit;
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.of(cgroup_id))
            .await
            .unwrap_or_else(|_| Arc::new(Workload::unknown(cgroup_id)))
    }

    /// This node's pods are now `pods`: cached workloads whose pod they describe
    /// differently (or no longer) are resolved again when next asked for.
    pub fn set_pods(&self, pods: Pods) {
        let pods = Arc::new(pods);
        let mut current = self.pods.write().unwrap_or_else(|p| p.into_inner());
        if current.is_none() {
            // Not on Kubernetes: nothing reads them.
            return;
        }
        *current = Some(pods.clone());
        drop(current);
        let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
        cache.generation += 1;
        cache
            .entries
            .retain(|_, workload| still_true(workload, &pods));
    }

    /// Follows this node's pods until `shutdown` or until their sender is gone.
    pub async fn follow(
        self: Arc<Self>,
        mut pods: watch::Receiver<Pods>,
        shutdown: CancellationToken,
    ) {
        loop {
            let current = pods.borrow_and_update().clone();
            self.set_pods(current);
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = pods.changed() => if changed.is_err() { return },
            }
        }
    }

    fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.cache.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether a cached workload still says what `pods` say of its pod.
fn still_true(workload: &Workload, pods: &Pods) -> bool {
    let Some(uid) = &workload.pod_uid else {
        return true;
    };
    let pod = pods.get(uid);
    pod.map(|p| &p.namespace) == workload.namespace.as_ref()
        && pod.map(|p| &p.name) == workload.pod.as_ref()
        && pod.and_then(|p| p.service_account.as_ref()) == workload.service_account.as_ref()
}

/// The workload of the cgroup at `path` (relative to `--cgroup`); `pods` on Kubernetes.
fn identify(path: &str, pods: Option<&Pods>) -> Workload {
    let pod_uid = pods.and_then(|_| pod_uid_in(path));
    let pod = pod_uid.as_ref().and_then(|uid| pods?.get(uid));
    Workload {
        namespace: pod.map(|p| p.namespace.clone()),
        pod: pod.map(|p| p.name.clone()),
        service_account: pod.and_then(|p| p.service_account.clone()),
        pod_uid,
        cgroup: path.to_owned(),
    }
}

/// The uid of the pod whose cgroup `path` is in, from its first pod component in either
/// kubelet layout: cgroupfs `pod<uid>`, systemd `kubepods-<qos>-pod<uid with _>.slice`
/// (as `scopes::pod_cgroups` finds them).
fn pod_uid_in(path: &str) -> Option<String> {
    path.split('/').find_map(|component| {
        let uid = match component.strip_suffix(".slice") {
            Some(slice) => slice
                .rsplit_once("-pod")
                .map(|(_, uid)| uid)
                .or_else(|| slice.strip_prefix("pod"))?,
            None => component.strip_prefix("pod")?,
        };
        let uid_like =
            uid.len() >= 8 && (uid.chars()).all(|c| c.is_ascii_hexdigit() || c == '-' || c == '_');
        uid_like.then(|| uid.replace('_', "-"))
    })
}
