//! The agent's DaemonSet pod on the test bed's node: `deploy/daemonset.yaml` in its
//! DIRECTORY MODE variant, run from the image under podman, with the node's hostPaths
//! standing in for by the test bed's own cgroup and bpffs. And the uninstall DaemonSet's
//! init container (`deploy/uninstall/`), run to its exit.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{PodSpec, Probe};

use super::{Podman, RunSpec, RunningContainer, spec::Node};
use crate::{
    manifest,
    netlab::{Finished, NODE_POD_V4, Topology, agent::READY_TIMEOUT, cgroup2_mount},
};

/// The hostPaths of the manifests, and what stands in for them on the test bed.
pub const HOST_BPFFS: &str = "/sys/fs/bpf";
pub const HOST_CGROUP: &str = "/sys/fs/cgroup";

/// What the test bed's node gives the agent's pod: its bpffs is `bpffs` (a test-made
/// mount, never the host's), its cgroup2 root the pod cgroup of `topology` (a cgroup the
/// test made, never the machine's root), the files of the `backends` ConfigMap volume
/// are in `backends` (given the volume's `defaultMode` here, as the kubelet writes them),
/// and the downward API says the node IP is the node's address on the pod link.
///
/// The pod's cgroup goes below the pod cgroup too, as a pod's goes below the node's
/// cgroup root; the returned guard removes what podman leaves of that in the cgroup v1
/// hierarchies of a hybrid host. Keep it until the pods are gone.
pub fn test_bed_node(
    topology: &Topology,
    bpffs: &Path,
    backends: &Path,
) -> Result<(Node, CgroupParent)> {
    let daemon_set = manifest::agent_in_directory_mode()?;
    let volume = (manifest::pod_spec(&daemon_set)?.volumes.iter().flatten())
        .find(|v| v.name == "backends")
        .context("the directory-mode DaemonSet has no backends volume")?;
    if let Some(mode) = volume.projected.as_ref().and_then(|p| p.default_mode) {
        use std::os::unix::fs::PermissionsExt;
        let mode = u32::try_from(mode).context("projected.defaultMode is negative")?;
        for entry in std::fs::read_dir(backends)? {
            let path = entry?.path();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .with_context(|| format!("cannot chmod {}", path.display()))?;
        }
    }
    let namespace = (daemon_set.metadata.namespace.clone())
        .context("the agent DaemonSet has no metadata.namespace")?;
    let etc = topology.node.etc_dir();
    let parent = CgroupParent::below(topology.pod_cgroup.path())?;
    let node = Node {
        host_paths: BTreeMap::from([
            (HOST_BPFFS.to_owned(), bpffs.to_owned()),
            (
                HOST_CGROUP.to_owned(),
                topology.pod_cgroup.path().to_owned(),
            ),
        ]),
        volume_dirs: BTreeMap::from([("backends".to_owned(), backends.to_owned())]),
        fields: BTreeMap::from([
            ("status.hostIP".to_owned(), NODE_POD_V4.to_string()),
            ("spec.nodeName".to_owned(), topology.node.name().to_owned()),
            ("metadata.namespace".to_owned(), namespace),
        ]),
        hosts_file: Some(etc.join("hosts")),
        resolv_conf: Some(etc.join("resolv.conf")),
        cgroup_parent: Some(parent.name.clone()),
    };
    Ok((node, parent))
}

/// A cgroup used as podman's `--cgroup-parent`: on a hybrid host podman also makes it
/// in every cgroup v1 hierarchy, with conmon's cgroup below it, and leaves both there;
/// removed (if empty) on drop.
pub struct CgroupParent {
    /// Its path from the root of the hierarchy (`/rdpod123-0`).
    name: String,
}

impl CgroupParent {
    fn below(cgroup: &Path) -> Result<CgroupParent> {
        let mount = cgroup2_mount()?;
        let relative = (cgroup.strip_prefix(&mount))
            .with_context(|| format!("{} is not below {}", cgroup.display(), mount.display()))?;
        Ok(CgroupParent {
            name: format!("/{}", relative.display()),
        })
    }
}

impl Drop for CgroupParent {
    fn drop(&mut self) {
        let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        // "id parent maj:min root mount-point options ... - fstype source ..."
        let v1_mounts = (mountinfo.lines()).filter_map(|line| {
            let mount_point = line.split(' ').nth(4)?;
            let fstype = line.split(" - ").nth(1)?.split(' ').next()?;
            (fstype == "cgroup").then_some(mount_point)
        });
        for mount in v1_mounts {
            let dir = Path::new(mount).join(self.name.trim_start_matches('/'));
            // podman puts conmon, the container's monitor, in `<parent>/conmon`.
            for dir in [dir.join("conmon"), dir] {
                match std::fs::remove_dir(&dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        eprintln!("pod: cannot remove cgroup {}: {e}", dir.display());
                    }
                    _ => {}
                }
            }
        }
    }
}

/// One agent pod.
pub struct AgentPod {
    container: RunningContainer,
    spec: PodSpec,
    /// The `podman run` it was started with.
    pub run: RunSpec,
    /// The ready line it logged.
    pub ready_line: String,
}

impl AgentPod {
    /// Starts the agent container of the directory-mode DaemonSet in the node's network
    /// namespace and waits for its ready line.
    pub fn start(podman: &Podman, topology: &Topology, node: &Node) -> Result<AgentPod> {
        let daemon_set = manifest::agent_in_directory_mode()?;
        let spec = manifest::pod_spec(&daemon_set)?.clone();
        let run = super::run_spec(&spec, "agent", node)?;
        let mut container = RunningContainer::start(podman, topology.node.name(), "agent", &run)?;
        let ready_line = match container.wait_for_log("ready:", READY_TIMEOUT) {
            Ok(line) => line,
            Err(e) => bail!(
                "{e:#}\nthe agent container logged:\n{}",
                container.logs().join("\n")
            ),
        };
        Ok(AgentPod {
            container,
            spec,
            run,
            ready_line,
        })
    }

    /// Runs the manifest's readiness (`ready`) or liveness (`live`) exec probe in the
    /// container, as the kubelet does.
    pub fn probe(&self, which: &str) -> Result<Output> {
        let container = manifest::container(&self.spec, "agent")?;
        let probe: &Probe = match which {
            "ready" => container.readiness_probe.as_ref(),
            "live" => container.liveness_probe.as_ref(),
            other => bail!("no {other} probe: ready or live"),
        }
        .with_context(|| format!("the agent container has no {which} probe"))?;
        let command = (probe.exec.as_ref())
            .and_then(|exec| exec.command.clone())
            .with_context(|| format!("the {which} probe is not an exec probe"))?;
        self.container.exec(&command)
    }

    /// `terminationGracePeriodSeconds` (Kubernetes' default 30 s if absent).
    pub fn grace(&self) -> Duration {
        let seconds = self.spec.termination_grace_period_seconds.unwrap_or(30);
        Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
    }

    /// Stops the pod as the kubelet does: SIGTERM, SIGKILL after the grace period.
    pub fn stop(self) -> Result<(Finished, Duration)> {
        let grace = self.grace();
        self.container.stop(grace)
    }

    /// Waits for the next log line containing `needle`.
    pub fn wait_for_log(&mut self, needle: &str) -> Result<String> {
        self.container.wait_for_log(needle, READY_TIMEOUT)
    }

    /// Everything it logged so far.
    pub fn logs(&self) -> Vec<String> {
        self.container.logs()
    }
}

/// The uninstall DaemonSet's init container (`redirector uninstall`) on the test bed's
/// node, run to its exit: the bpffs hostPath is `bpffs`.
pub fn uninstall(
    podman: &Podman,
    topology: &Topology,
    bpffs: &Path,
) -> Result<(Finished, RunSpec)> {
    let daemon_set = manifest::daemon_set(manifest::UNINSTALL)?;
    let spec = manifest::pod_spec(&daemon_set)?;
    let node = Node {
        host_paths: BTreeMap::from([(HOST_BPFFS.to_owned(), PathBuf::from(bpffs))]),
        ..Node::default()
    };
    let run = super::run_spec(spec, "uninstall", &node)?;
    let mut container = RunningContainer::start(podman, topology.node.name(), "uninst", &run)?;
    let finished = container.finish(READY_TIMEOUT)?;
    Ok((finished, run))
}
