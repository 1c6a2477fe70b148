//! The Kubernetes install in deploy/: `kubectl apply -k deploy/` would be accepted, and
//! the DaemonSet agrees with the agent it runs.
//!
//! - The kustomization is rendered with `kubectl kustomize` where kubectl exists, and by
//!   reading its `resources:` here in any case (the two must agree): `deploy/render.rs`.
//! - Every object is checked against the Kubernetes schema, unknown fields rejected:
//!   `deploy/schema.rs`.
//! - Here: the DaemonSet's arguments are parsed by the real `redirector` command line
//!   (`deploy/args.rs`) and select the Kubernetes source; its mounts, probes and grace
//!   period fit its arguments; `crd/crd.yaml` is what `redirector crd` prints, and the
//!   CRD is installed by its own kustomization (`deploy/crd`), never by the agent's.
//! - The directory-mode alternative that its comments describe works too:
//!   `deploy/directory_mode.rs`.
//! - The RBAC grants exactly a reviewed list (`deploy/rbac.rs`), and, as root against
//!   `fakeapi`, every API request of the agent is allowed and every grant is used
//!   (`deploy/rbac_agent.rs`).
//!
//! Needs the `redirector` binary (`cargo build -p redirector`, or `$REDIRECTOR_BIN`);
//! only the test that runs the agent needs root.

mod support;

#[path = "deploy/args.rs"]
mod args;
#[path = "deploy/directory_mode.rs"]
mod directory_mode;
#[path = "deploy/rbac.rs"]
mod rbac;
#[path = "deploy/rbac_agent.rs"]
mod rbac_agent;
#[path = "deploy/render.rs"]
mod render;
#[path = "deploy/schema.rs"]
mod schema;

use std::{collections::BTreeSet, time::Duration};

use k8s_openapi::{
    api::{
        apps::v1::DaemonSet,
        core::v1::{Container, PodSpec, ServiceAccount},
    },
    apimachinery::pkg::util::intstr::IntOrString,
};
use serde_json::Value;

use args::{
    NODE_NAME, assert_flags_exist, assert_mounted, assert_parses, expanded_args, flag_value, flags,
    redirector, seconds,
};
use render::{deploy_dir, identity, kustomization, render, resources, typed};
use schema::{assert_schema_valid, differences};

const NAMESPACE: &str = "redirector-system";
const SERVICE_ACCOUNT: &str = "redirector";

fn pod_spec(daemon_set: &DaemonSet) -> &PodSpec {
    daemon_set
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod spec")
}

/// The rendered install and its agent DaemonSet.
fn agent() -> (Vec<Value>, DaemonSet) {
    let objects = render(&deploy_dir());
    let daemon_set = typed(&objects, "DaemonSet", "redirector");
    (objects, daemon_set)
}

fn agent_container(daemon_set: &DaemonSet) -> &Container {
    let containers = &pod_spec(daemon_set).containers;
    assert_eq!(containers.len(), 1);
    &containers[0]
}

// ---------------------------------------------------------------------------------------
// The install

#[test]
fn the_kustomization_renders_and_every_object_matches_its_schema() {
    let objects = render(&deploy_dir());
    assert_schema_valid(&objects);

    let names: BTreeSet<String> = objects.iter().map(identity).collect();
    for expected in [
        format!("Namespace /{NAMESPACE}"),
        format!("ServiceAccount {NAMESPACE}/{SERVICE_ACCOUNT}"),
        "ClusterRole /redirector-kubernetes-source".to_owned(),
        "ClusterRole /redirector-kubernetes-source-secrets".to_owned(),
        format!("Role {NAMESPACE}/redirector-status-leader"),
        format!("DaemonSet {NAMESPACE}/redirector"),
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:#?}"
        );
    }
    assert_eq!(names.len(), objects.len(), "duplicate objects: {names:#?}");
    for object in &objects {
        let namespace = object["metadata"]["namespace"].as_str();
        let cluster_scoped = ["Namespace", "ClusterRole", "ClusterRoleBinding"]
            .contains(&object["kind"].as_str().unwrap_or_default());
        if !cluster_scoped {
            assert_eq!(namespace, Some(NAMESPACE), "{}", identity(object));
        }
    }
    // The directory-mode ConfigMap is the documented alternative, not installed.
    assert!(
        !names.iter().any(|n| n.starts_with("ConfigMap ")),
        "{names:#?}"
    );
}

#[test]
fn the_uninstall_kustomization_renders_and_its_arguments_parse() {
    let objects = render(&deploy_dir().join("uninstall"));
    assert_schema_valid(&objects);
    let daemon_set: DaemonSet = typed(&objects, "DaemonSet", "redirector-uninstall");
    let spec = pod_spec(&daemon_set);
    let init = spec.init_containers.as_deref().unwrap_or_default();
    assert_eq!(init.len(), 1);
    let args = expanded_args(&init[0], NAMESPACE).unwrap();
    assert_eq!(args[0], "uninstall");
    assert_flags_exist(&args);
    assert_parses(&args);
    let bpffs = flag_value(&args, "--bpffs").unwrap_or("/sys/fs/bpf/redirector");
    assert_mounted(&init[0], bpffs, false);
}

#[test]
fn crd_yaml_is_what_redirector_crd_prints() {
    let path = deploy_dir().join("crd/crd.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let file = render::documents(&text).unwrap();
    let out = redirector(&["crd"]);
    assert!(out.status.success(), "redirector crd: {out:?}");
    let printed = render::documents(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let names = |docs: &[serde_json::Value]| -> Vec<String> {
        (docs.iter())
            .map(|d| {
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    };
    let expected = [
        "xbackends.gateway.networking.x-k8s.io",
        "backendpolicies.policy.redirector.dev",
    ];
    assert_eq!(names(&file), expected, "{}", path.display());
    assert_eq!(names(&printed), expected, "`redirector crd`");
    // Both ways, so that a key missing on either side shows.
    let mut problems = Vec::new();
    for (file, printed) in file.iter().zip(&printed) {
        problems.extend(differences(file, printed));
        problems.extend(differences(printed, file));
    }
    // `--backend-policy` prints the second alone.
    let out = redirector(&["crd", "--backend-policy"]);
    let alone = render::documents(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(alone, printed[1..], "`redirector crd --backend-policy`");
    assert!(
        problems.is_empty(),
        "{} differs from `redirector crd` (regenerate it, see its header):\n{problems:#?}",
        path.display()
    );
    assert!(
        text.starts_with("# ") && text.contains("redirector crd"),
        "{}: the header saying it is generated",
        path.display()
    );
}

// ---------------------------------------------------------------------------------------
// The DaemonSet against the agent's command line

#[test]
fn the_agent_arguments_parse_with_the_real_command_line() {
    let (_, daemon_set) = agent();
    let container = agent_container(&daemon_set);
    assert_eq!(
        container.command, None,
        "the image's entrypoint is redirector"
    );
    let args = expanded_args(container, NAMESPACE).unwrap();
    assert_eq!(args[0], "run");
    assert_flags_exist(&args);
    assert_parses(&args);
    assert_eq!(
        flag_value(&args, "--proxy-addr"),
        Some("192.0.2.10:15001"),
        "the proxy listens on the node IP"
    );
}

#[test]
fn the_agent_takes_backends_from_the_api_with_its_own_token_and_roles() {
    let (objects, daemon_set) = agent();
    let spec = pod_spec(&daemon_set);
    let args = expanded_args(agent_container(&daemon_set), NAMESPACE).unwrap();
    let flags = flags(&args);
    assert!(flags.contains(&"--kubernetes"), "{args:?}");
    assert!(!flags.contains(&"--backends"), "one source: {args:?}");
    assert_eq!(
        flag_value(&args, "--node-name"),
        Some(NODE_NAME),
        "the node name from the downward API (spec.nodeName)"
    );
    assert_eq!(flag_value(&args, "--backend-scope"), Some("namespace"));

    // The Lease is where the Role for it is.
    let lease_namespace = flag_value(&args, "--lease-namespace").unwrap_or(NAMESPACE);
    let lease_role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "redirector-status-leader")
        .expect("the Lease Role");
    assert_eq!(lease_role["metadata"]["namespace"], lease_namespace);

    // The token is mounted, for the ServiceAccount the roles are bound to.
    assert_eq!(spec.service_account_name.as_deref(), Some(SERVICE_ACCOUNT));
    assert_eq!(spec.automount_service_account_token, Some(true));
    let account: ServiceAccount = typed(&objects, "ServiceAccount", SERVICE_ACCOUNT);
    assert_ne!(account.automount_service_account_token, Some(false));
    let kustomization = kustomization(&deploy_dir()).unwrap();
    let listed = resources(&kustomization).unwrap();
    assert!(
        listed.contains(&"rbac-kubernetes-source.yaml"),
        "rbac-kubernetes-source.yaml not in {listed:?}"
    );
}

/// The CRD has a kustomization of its own, and the agent's has none: applying the agent
/// again never replaces an XBackend CRD that someone else installed (a newer one).
#[test]
fn the_crd_is_installed_apart_from_the_agent() {
    let agent_objects = render(&deploy_dir());
    let crds: Vec<String> = (agent_objects.iter())
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .map(identity)
        .collect();
    assert_eq!(crds, Vec::<String>::new(), "deploy/ must install no CRD");
    let objects = render(&deploy_dir().join("crd"));
    assert_schema_valid(&objects);
    let names: Vec<&str> = (objects.iter())
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert!(
        names.contains(&"xbackends.gateway.networking.x-k8s.io"),
        "deploy/crd installs the XBackend CRD: {names:?}"
    );
    assert!(
        objects
            .iter()
            .all(|o| o["kind"] == "CustomResourceDefinition"),
        "deploy/crd installs CRDs only"
    );
}

#[test]
fn mounts_probes_and_grace_period_fit_the_agent_arguments() {
    let (_, daemon_set) = agent();
    let spec = pod_spec(&daemon_set);
    let container = agent_container(&daemon_set);
    let args = expanded_args(container, NAMESPACE).unwrap();

    assert_eq!(
        spec.host_network,
        Some(true),
        "pods reach the proxy on the node IP"
    );
    assert_mounted(
        container,
        flag_value(&args, "--cgroup").expect("--cgroup"),
        true,
    );
    if let Some(root) = flag_value(&args, "--pod-cgroup-root") {
        assert_mounted(container, root, true);
    }
    let bpffs = flag_value(&args, "--bpffs").unwrap_or("/sys/fs/bpf/redirector");
    assert_mounted(container, bpffs, false);
    let mounts = container.volume_mounts.as_deref().unwrap_or_default();
    for mount in mounts {
        assert!(mount.sub_path.is_none(), "subPath mounts are never updated");
    }
    // Every volume is used: none is left over from the other mode.
    for volume in spec.volumes.as_deref().unwrap_or_default() {
        assert!(
            mounts.iter().any(|m| m.name == volume.name),
            "volume {} is mounted nowhere",
            volume.name
        );
    }

    // Probes reach this pod's own agent: exec probes on its --admin-socket (two agents
    // share the admin port during a rollout), in a writable volume of this pod.
    let socket = flag_value(&args, "--admin-socket").expect("--admin-socket");
    assert_mounted(container, socket, false);
    for (probe, what) in [
        (&container.readiness_probe, "ready"),
        (&container.liveness_probe, "live"),
    ] {
        let command = probe
            .as_ref()
            .and_then(|p| p.exec.as_ref())
            .and_then(|exec| exec.command.clone())
            .unwrap_or_else(|| panic!("an exec probe for {what}"));
        assert_eq!(
            command,
            [
                "/usr/local/bin/redirector",
                "probe",
                what,
                "--admin-socket",
                socket
            ],
            "{what} probe"
        );
        assert_parses(&command[1..]);
    }
    // A rollout starts the new pod beside the old one: no host ports may collide (with
    // hostNetwork every containerPort is one), and none is unavailable meanwhile.
    assert!(
        container.ports.is_none(),
        "no (host) ports: {:?}",
        container.ports
    );
    let strategy = (daemon_set.spec.as_ref()).and_then(|spec| spec.update_strategy.as_ref());
    let daemonset_strategy = strategy.expect("updateStrategy");
    let rolling = daemonset_strategy
        .rolling_update
        .as_ref()
        .expect("rollingUpdate");
    assert_eq!(rolling.max_surge, Some(IntOrString::Int(1)));
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
    // /healthz answers from the agent's start, also while the initial sync waits for the
    // API server (tests/kubernetes.rs), so no startup probe is needed to protect it.

    // The drain ends before the kubelet's SIGKILL.
    let drain = seconds(flag_value(&args, "--drain-timeout").unwrap_or("25s"));
    let grace = Duration::from_secs(spec.termination_grace_period_seconds.unwrap() as u64);
    assert!(
        drain < grace,
        "drain {drain:?} must end before the grace period {grace:?}"
    );

    // Not privileged, and what it holds is spelled out.
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.privileged, Some(false));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    let capabilities = security.capabilities.as_ref().unwrap();
    assert_eq!(capabilities.drop.as_deref(), Some(&["ALL".to_owned()][..]));
    assert_ne!(spec.host_pid, Some(true), "hostPID is not needed");
}
