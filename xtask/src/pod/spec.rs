//! One container of a pod spec as `podman run` options, field by field, the way the
//! kubelet and a CRI runtime would set it up. A field this translation does not know is
//! refused, never skipped: a privilege or mount the manifest relies on must not vanish
//! on the way to the runtime.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Container, PodSpec, SecurityContext, Volume, VolumeMount};

use crate::manifest;
use quantity::bytes;

mod quantity;

/// What the node and its kubelet provide to the pod: the directories standing in for its
/// hostPath volumes and for the files of its ConfigMap/Secret volumes, the downward API
/// values, and the files a host-network pod gets from the node.
#[derive(Debug, Clone, Default)]
pub struct Node {
    /// hostPath `path` as the manifest writes it -> the directory used for it.
    pub host_paths: BTreeMap<String, PathBuf>,
    /// Volume name -> the directory holding its files (configMap, secret, projected).
    pub volume_dirs: BTreeMap<String, PathBuf>,
    /// Downward API: `fieldPath` -> value (`status.hostIP` -> the node IP...).
    pub fields: BTreeMap<String, String>,
    /// The node's `/etc/hosts` (the kubelet gives it to host-network pods).
    pub hosts_file: Option<PathBuf>,
    /// The resolv.conf the pod's `dnsPolicy` gives it.
    pub resolv_conf: Option<PathBuf>,
    /// The cgroup (path in the hierarchy) the kubelet puts the pod's cgroup below: its
    /// kubepods tree, which is below the node's cgroup root.
    pub cgroup_parent: Option<String>,
}

/// The `podman run` command line of one container, and what each option stands for.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Options before the image.
    pub options: Vec<String>,
    pub image: String,
    /// The container's args, `$(VAR)` expanded (after the image).
    pub args: Vec<String>,
    /// `(manifest field, podman option)`: every privilege and mount granted.
    pub grants: Vec<(String, String)>,
}

impl RunSpec {
    fn grant(&mut self, field: impl Into<String>, options: &[String]) {
        self.options.extend_from_slice(options);
        self.grants.push((field.into(), options.join(" ")));
    }
}

/// The `podman run` options of container `name` of `spec` on `node`.
pub fn run_spec(spec: &PodSpec, name: &str, node: &Node) -> Result<RunSpec> {
    let container = manifest::container(spec, name)?;
    let image = (container.image.clone()).with_context(|| format!("container {name}: no image"))?;
    let env = manifest::environment(container, &node.fields)?;
    let mut run = RunSpec {
        options: Vec::new(),
        image,
        args: manifest::expanded_args(container, &env)?,
        grants: Vec::new(),
    };
    pod_level(spec, node, &mut run)?;
    container_level(container, &env, &mut run)?;
    if let Some(context) = &container.security_context {
        security_context(context, &mut run)?;
    }
    for mount in container.volume_mounts.iter().flatten() {
        let volume = (spec.volumes.iter().flatten())
            .find(|v| v.name == mount.name)
            .with_context(|| format!("volumeMount {}: no such volume", mount.name))?;
        volume_mount(volume, mount, node, &mut run)?;
    }
    Ok(run)
}

fn pod_level(spec: &PodSpec, node: &Node, run: &mut RunSpec) -> Result<()> {
    if spec.host_network == Some(true) {
        host_network(spec, node, run)?;
    } else {
        // The pod network is the CNI's; here the pod gets a network namespace of its own
        // with loopback only (for a pod that makes no network calls, like uninstall).
        run.grant("hostNetwork: false", &["--network".into(), "none".into()]);
    }
    if let Some(parent) = &node.cgroup_parent {
        run.grant(
            "(kubelet) the pod's cgroup below the node's cgroup tree",
            &["--cgroup-parent".into(), parent.clone()],
        );
    }
    if spec.host_pid == Some(true) {
        run.grant("hostPID: true", &["--pid".into(), "host".into()]);
    }
    if spec.host_ipc == Some(true) {
        run.grant("hostIPC: true", &["--ipc".into(), "host".into()]);
    }
    ensure!(
        spec.automount_service_account_token == Some(false),
        "automountServiceAccountToken is not false: a service account token would need an \
         API server (use the DIRECTORY MODE variant)"
    );
    if let Some(context) = &spec.security_context {
        ensure!(
            *context == Default::default(),
            "a pod-level securityContext is not supported: {context:?}"
        );
    }
    Ok(())
}

/// A host-network pod shares the node's network and UTS namespaces, gets the node's
/// `/etc/hosts` from the kubelet and its resolv.conf by `dnsPolicy`.
fn host_network(spec: &PodSpec, node: &Node, run: &mut RunSpec) -> Result<()> {
    run.grant("hostNetwork: true", &["--network".into(), "host".into()]);
    run.grant("hostNetwork: true", &["--uts".into(), "host".into()]);
    let hosts = (node.hosts_file.as_ref()).context("hostNetwork: no node hosts file given")?;
    run.grant(
        "hostNetwork: true (the kubelet mounts the node's /etc/hosts)",
        &[
            "--volume".into(),
            format!("{}:/etc/hosts:ro", hosts.display()),
        ],
    );
    match spec.dns_policy.as_deref() {
        Some("ClusterFirstWithHostNet" | "ClusterFirst" | "Default") | None => {
            let resolv = (node.resolv_conf.as_ref()).context("dnsPolicy: no resolv.conf given")?;
            run.grant(
                format!(
                    "dnsPolicy: {}",
                    spec.dns_policy.as_deref().unwrap_or("ClusterFirst")
                ),
                &[
                    "--volume".into(),
                    format!("{}:/etc/resolv.conf:ro", resolv.display()),
                ],
            );
        }
        Some(other) => bail!("dnsPolicy {other} is not supported"),
    }
    Ok(())
}

fn container_level(
    container: &Container,
    env: &BTreeMap<String, String>,
    run: &mut RunSpec,
) -> Result<()> {
    let name = &container.name;
    match container.image_pull_policy.as_deref() {
        // No registry: the image must be in the local storage, as IfNotPresent finds it.
        Some("IfNotPresent" | "Never") => run.options.extend(["--pull".into(), "never".into()]),
        other => bail!("container {name}: imagePullPolicy {other:?} would pull from a registry"),
    }
    if let Some(command) = &container.command {
        let json = serde_json::to_string(command)?;
        run.options.extend(["--entrypoint".into(), json]);
    }
    if let Some(dir) = &container.working_dir {
        run.options.extend(["--workdir".into(), dir.clone()]);
    }
    for (key, value) in env {
        run.options
            .extend(["--env".into(), format!("{key}={value}")]);
    }
    ensure!(
        container.lifecycle.is_none(),
        "container {name}: lifecycle hooks are not supported"
    );
    let limits = (container.resources.as_ref()).and_then(|r| r.limits.as_ref());
    for (resource, quantity) in limits.into_iter().flatten() {
        match resource.as_str() {
            "memory" => run.grant(
                format!("resources.limits.memory: {}", quantity.0),
                &["--memory".into(), bytes(quantity)?.to_string()],
            ),
            other => bail!("container {name}: a {other} limit is not supported"),
        }
    }
    Ok(())
}

fn security_context(context: &SecurityContext, run: &mut RunSpec) -> Result<()> {
    let SecurityContext {
        allow_privilege_escalation,
        app_armor_profile,
        capabilities,
        privileged,
        proc_mount,
        read_only_root_filesystem,
        run_as_group,
        run_as_non_root,
        run_as_user,
        se_linux_options,
        seccomp_profile,
        windows_options,
    } = context;
    ensure!(
        privileged != &Some(true),
        "privileged: true is not supported"
    );
    ensure!(
        proc_mount.as_deref().is_none_or(|m| m == "Default") && windows_options.is_none(),
        "securityContext.procMount / windowsOptions are not supported"
    );
    let field = "securityContext";
    for cap in (capabilities.iter()).flat_map(|c| c.drop.iter().flatten()) {
        let cap = capability(cap);
        run.grant(
            format!("{field}.capabilities.drop: {cap}"),
            &["--cap-drop".into(), cap],
        );
    }
    for cap in (capabilities.iter()).flat_map(|c| c.add.iter().flatten()) {
        let cap = capability(cap);
        run.grant(
            format!("{field}.capabilities.add: {cap}"),
            &["--cap-add".into(), cap],
        );
    }
    if let Some(user) = run_as_user {
        let user = match run_as_group {
            Some(group) => format!("{user}:{group}"),
            None => user.to_string(),
        };
        run.grant(
            format!("{field}.runAsUser/runAsGroup: {user}"),
            &["--user".into(), user],
        );
    }
    if *run_as_non_root == Some(true) {
        // The kubelet refuses to start such a container as uid 0.
        ensure!(
            run_as_user.is_some_and(|u| u != 0),
            "runAsNonRoot: true needs a non-zero runAsUser here"
        );
    }
    if *allow_privilege_escalation == Some(false) {
        let option = ["--security-opt".into(), "no-new-privileges".into()];
        run.grant(format!("{field}.allowPrivilegeEscalation: false"), &option);
    }
    if *read_only_root_filesystem == Some(true) {
        // No tmpfs on /tmp, /run...: Kubernetes makes none either.
        let options = ["--read-only".into(), "--read-only-tmpfs=false".into()];
        run.grant(format!("{field}.readOnlyRootFilesystem: true"), &options);
    }
    match seccomp_profile.as_ref().map(|p| p.type_.as_str()) {
        // podman's default profile, as a CRI runtime's RuntimeDefault.
        None | Some("RuntimeDefault") => {}
        Some("Unconfined") => run.grant(
            format!("{field}.seccompProfile: Unconfined"),
            &["--security-opt".into(), "seccomp=unconfined".into()],
        ),
        Some(other) => bail!("seccompProfile {other} is not supported"),
    }
    match app_armor_profile.as_ref().map(|p| p.type_.as_str()) {
        None | Some("RuntimeDefault") => {}
        Some("Unconfined") => run.grant(
            format!("{field}.appArmorProfile: Unconfined"),
            &["--security-opt".into(), "apparmor=unconfined".into()],
        ),
        Some(other) => bail!("appArmorProfile {other} is not supported"),
    }
    if let Some(options) = se_linux_options {
        for (key, value) in [("type", &options.type_), ("level", &options.level)] {
            if let Some(value) = value {
                run.grant(
                    format!("{field}.seLinuxOptions.{key}: {value}"),
                    &["--security-opt".into(), format!("label={key}:{value}")],
                );
            }
        }
        ensure!(
            options.user.is_none() && options.role.is_none(),
            "seLinuxOptions user/role are not supported"
        );
    }
    Ok(())
}

fn volume_mount(
    volume: &Volume,
    mount: &VolumeMount,
    node: &Node,
    run: &mut RunSpec,
) -> Result<()> {
    let name = &mount.name;
    let path = &mount.mount_path;
    ensure!(
        mount.sub_path.is_none() && mount.sub_path_expr.is_none(),
        "volumeMount {name}: subPath is not supported"
    );
    let field = format!("volumeMount {name} at {path}");
    if let Some(empty_dir) = &volume.empty_dir {
        ensure!(
            empty_dir.medium.as_deref() == Some("Memory"),
            "volume {name}: only emptyDir with medium: Memory is supported"
        );
        let mut option = format!("type=tmpfs,destination={path}");
        if let Some(limit) = &empty_dir.size_limit {
            option.push_str(&format!(",tmpfs-size={}", bytes(limit)?));
        }
        run.grant(
            format!("{field} (emptyDir, Memory)"),
            &["--mount".into(), option],
        );
        return Ok(());
    }
    let mut options = Vec::new();
    let source = if let Some(host_path) = &volume.host_path {
        let source = (node.host_paths.get(&host_path.path)).with_context(|| {
            format!(
                "volume {name}: no directory given for hostPath {}",
                host_path.path
            )
        })?;
        if host_path.type_.as_deref() == Some("Directory") {
            ensure!(
                source.is_dir(),
                "hostPath {}: {} is no directory",
                host_path.path,
                source.display()
            );
        }
        if mount.read_only == Some(true) {
            options.push("ro");
        }
        format!("{field} (hostPath {})", host_path.path)
    } else if volume.projected.is_some() || volume.config_map.is_some() || volume.secret.is_some() {
        // The kubelet mounts these read-only whatever the mount says.
        options.push("ro");
        format!("{field} (ConfigMap/Secret files)")
    } else {
        bail!(
            "volume {name}: only hostPath, emptyDir (Memory), configMap, secret and projected are supported"
        );
    };
    let dir = match &volume.host_path {
        Some(host_path) => &node.host_paths[&host_path.path],
        None => (node.volume_dirs.get(name))
            .with_context(|| format!("volume {name}: no directory given for its files"))?,
    };
    options.push(match mount.mount_propagation.as_deref() {
        None | Some("None") => "rprivate",
        Some("HostToContainer") => "rslave",
        Some("Bidirectional") => "rshared",
        Some(other) => bail!("volumeMount {name}: mountPropagation {other}"),
    });
    let volume_option = format!("{}:{path}:{}", dir.display(), options.join(","));
    run.grant(source, &["--volume".into(), volume_option]);
    Ok(())
}

/// `BPF` -> `CAP_BPF`; `ALL` stays.
fn capability(name: &str) -> String {
    match name {
        "ALL" | "all" => "ALL".to_owned(),
        name if name.starts_with("CAP_") => name.to_owned(),
        name => format!("CAP_{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_get_their_prefix() {
        assert_eq!(capability("NET_ADMIN"), "CAP_NET_ADMIN");
        assert_eq!(capability("ALL"), "ALL");
    }
}
