//! The Kubernetes install in deploy/: `kubectl apply -k deploy/` would be accepted, and
//! the DaemonSet agrees with the agent it runs.
//!
//! - The kustomization is rendered with `kubectl kustomize` where kubectl exists, and by
//!   reading its `resources:` here in any case (the two must agree).
//! - Every object is checked against the Kubernetes schema: it must deserialize into the
//!   k8s-openapi type of its kind, and a field the type does not know is an error. Those
//!   types ignore unknown fields themselves, so the test re-serializes the typed object
//!   and reports every key of the input that did not survive the round trip.
//! - The DaemonSet's arguments are parsed by the real `redirector` command line, the
//!   Backends of its ConfigMap pass `redirector check`, and its mounts, probes and grace
//!   period fit its arguments.
//!
//! Needs the `redirector` binary (`cargo build -p redirector`), not root.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::{
    api::{
        apps::v1::DaemonSet,
        core::v1::{ConfigMap, Container, Namespace, Secret, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::util::intstr::IntOrString,
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::Value;
use xtask::netlab::agent::redirector_bin;

const NAMESPACE: &str = "redirector-system";
const SERVICE_ACCOUNT: &str = "redirector";

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

// ---------------------------------------------------------------------------------------
// Rendering

/// The objects of the kustomization in `dir`, checked to be what `kubectl kustomize`
/// renders when kubectl is installed.
fn render(dir: &Path) -> Vec<Value> {
    let read = read_kustomization(dir)
        .unwrap_or_else(|e| panic!("reading the kustomization in {}: {e:#}", dir.display()));
    match kubectl_kustomize(dir) {
        Ok(Some(rendered)) => {
            assert_eq!(
                sorted(rendered),
                sorted(read.clone()),
                "`kubectl kustomize {}` and the files listed in its resources differ",
                dir.display()
            );
        }
        Ok(None) => eprintln!(
            "kubectl not found: {} rendered from its resources list only",
            dir.display()
        ),
        Err(e) => panic!("kubectl kustomize {}: {e:#}", dir.display()),
    }
    read
}

/// `kubectl kustomize DIR`, or `None` without kubectl.
fn kubectl_kustomize(dir: &Path) -> Result<Option<Vec<Value>>> {
    let output = match Command::new("kubectl").arg("kustomize").arg(dir).output() {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).context("running kubectl"),
    };
    ensure!(
        output.status.success(),
        "{}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(Some(documents(&String::from_utf8(output.stdout)?)?))
}

/// What kustomize would render, by reading the files: only plain `resources:` lists are
/// understood, and anything else in a kustomization is refused rather than ignored.
fn read_kustomization(dir: &Path) -> Result<Vec<Value>> {
    let path = dir.join("kustomization.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let kustomization: Value = serde_yaml_ng::from_str(&text)?;
    let Value::Object(fields) = &kustomization else {
        bail!("{}: not a mapping", path.display());
    };
    for key in fields.keys() {
        ensure!(
            ["apiVersion", "kind", "resources"].contains(&key.as_str()),
            "{}: `{key}` is not understood by this test's renderer; keep the \
             kustomization to a plain resources list",
            path.display()
        );
    }
    ensure!(kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1");
    ensure!(kustomization["kind"] == "Kustomization");
    let mut objects = Vec::new();
    for resource in resources(&kustomization)? {
        let resource = dir.join(resource);
        if resource.is_dir() {
            objects.extend(read_kustomization(&resource)?);
        } else {
            let text = std::fs::read_to_string(&resource)
                .with_context(|| resource.display().to_string())?;
            objects.extend(documents(&text).with_context(|| resource.display().to_string())?);
        }
    }
    Ok(objects)
}

fn resources(kustomization: &Value) -> Result<Vec<&str>> {
    let Some(list) = kustomization["resources"].as_array() else {
        bail!("no resources list");
    };
    list.iter()
        .map(|r| r.as_str().context("a resource that is not a string"))
        .collect()
}

/// Every non-empty document of a YAML stream, as JSON.
fn documents(text: &str) -> Result<Vec<Value>> {
    let mut values = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(document)?;
        if !value.is_null() {
            values.push(value);
        }
    }
    Ok(values)
}

fn sorted(mut objects: Vec<Value>) -> Vec<Value> {
    objects.sort_by_key(identity);
    objects
}

/// `kind namespace/name`, to name an object in messages.
fn identity(object: &Value) -> String {
    let meta = &object["metadata"];
    format!(
        "{} {}/{}",
        object["kind"].as_str().unwrap_or("?"),
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or("?")
    )
}

// ---------------------------------------------------------------------------------------
// Schema

/// Problems of one object against the schema of its kind (empty when it is valid).
fn schema_problems(object: &Value) -> Vec<String> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    match (api_version, kind) {
        ("v1", "Namespace") => round_trip::<Namespace>(object),
        ("v1", "ServiceAccount") => round_trip::<ServiceAccount>(object),
        ("v1", "ConfigMap") => round_trip::<ConfigMap>(object),
        ("v1", "Secret") => round_trip::<Secret>(object),
        ("apps/v1", "DaemonSet") => round_trip::<DaemonSet>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            round_trip::<ClusterRoleBinding>(object)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<Role>(object),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<RoleBinding>(object),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            round_trip::<CustomResourceDefinition>(object)
        }
        _ => vec![format!(
            "no schema known for {api_version} {kind}: add its k8s-openapi type to this test"
        )],
    }
}

/// Deserializes `object` as `T` and compares the re-serialized value with the input.
fn round_trip<T: DeserializeOwned + Serialize>(object: &Value) -> Vec<String> {
    let typed: T = match serde_path_to_error::deserialize(object.clone()) {
        Ok(typed) => typed,
        Err(e) => return vec![format!("{}: {}", e.path(), e.inner())],
    };
    let back = serde_json::to_value(&typed).expect("a k8s-openapi type serializes");
    let mut problems = Vec::new();
    compare(object, &back, "", &mut problems);
    problems
}

/// Every key of `input` must come back from the round trip with the same value.
fn compare(input: &Value, back: &Value, path: &str, problems: &mut Vec<String>) {
    match (input, back) {
        (Value::Object(input), Value::Object(back)) => {
            for (key, value) in input {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match back.get(key) {
                    Some(back) => compare(value, back, &path, problems),
                    // Kubernetes drops explicit nulls; they name no field.
                    None if value.is_null() => {}
                    None => problems.push(format!("{path}: unknown field")),
                }
            }
        }
        (Value::Array(input), Value::Array(back)) if input.len() == back.len() => {
            for (i, (value, back)) in input.iter().zip(back).enumerate() {
                compare(value, back, &format!("{path}[{i}]"), problems);
            }
        }
        _ if input == back => {}
        _ => problems.push(format!("{path}: {input} came back as {back}")),
    }
}

fn assert_schema_valid(objects: &[Value]) {
    let mut report = String::new();
    for object in objects {
        for problem in schema_problems(object) {
            let _ = writeln!(report, "{}: {problem}", identity(object));
        }
    }
    assert!(
        report.is_empty(),
        "objects that do not match their schema:\n{report}"
    );
}

#[test]
fn the_schema_check_catches_unknown_and_mistyped_fields() {
    let object: Value = serde_yaml_ng::from_str(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespce: y}\ndata: {a: b}\n",
    )
    .unwrap();
    assert_eq!(
        schema_problems(&object),
        ["metadata.namespce: unknown field"]
    );

    let object: Value = serde_yaml_ng::from_str(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  selector: {}\n  \
         template:\n    spec:\n      containers:\n      - name: a\n        ports: \
         [{containerPort: '15001'}]\n        securityContext: {capabilities: {add: [BPF]}, \
         privileged: false, apparmor: {}}\n",
    )
    .unwrap();
    let problems = schema_problems(&object);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("spec.template.spec.containers[0].ports[0].containerPort:"),
        "{problems:?}"
    );

    let object: Value = serde_yaml_ng::from_str(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: []}\n",
    )
    .unwrap();
    assert!(schema_problems(&object)[0].contains("no schema known for v1 Pod"));
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
        format!("ConfigMap {NAMESPACE}/redirector-backends"),
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
        let cluster_scoped = [
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
        ]
        .contains(&object["kind"].as_str().unwrap_or_default());
        if !cluster_scoped {
            assert_eq!(namespace, Some(NAMESPACE), "{}", identity(object));
        }
    }
    // Directory mode needs no API access: nothing may grant the agent any yet.
    for object in &objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        assert!(
            !kind.contains("Role"),
            "{} is installed, but directory mode needs no RBAC",
            identity(object)
        );
    }
}

#[test]
fn the_uninstall_kustomization_renders_and_its_arguments_parse() {
    let objects = render(&deploy_dir().join("uninstall"));
    assert_schema_valid(&objects);
    let daemon_set: DaemonSet = typed(&objects, "DaemonSet", "redirector-uninstall");
    let spec = pod_spec(&daemon_set);
    let init = spec.init_containers.as_deref().unwrap_or_default();
    assert_eq!(init.len(), 1);
    let args = expanded_args(&init[0]).unwrap();
    assert_eq!(args[0], "uninstall");
    assert_flags_exist(&args);
    assert_parses(&args);
    let bpffs = flag_value(&args, "--bpffs").unwrap_or("/sys/fs/bpf/redirector");
    assert_mounted(&init[0], bpffs, false);
}

fn typed<T: DeserializeOwned>(objects: &[Value], kind: &str, name: &str) -> T {
    let object = objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"));
    serde_json::from_value(object.clone()).unwrap()
}

fn pod_spec(daemon_set: &DaemonSet) -> &k8s_openapi::api::core::v1::PodSpec {
    daemon_set
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a pod spec")
}

/// The agent DaemonSet and its container, from the rendered install.
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
// The DaemonSet against the agent's command line

/// The container's args with `$(VAR)` expanded as the kubelet does, the downward API
/// values made up (a node IP, a node name).
fn expanded_args(container: &Container) -> Result<Vec<String>> {
    let mut vars = BTreeMap::new();
    for env in container.env.as_deref().unwrap_or_default() {
        let value = match (&env.value, &env.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(from)) => {
                let field = from
                    .field_ref
                    .as_ref()
                    .with_context(|| format!("env {}: only fieldRef is expected", env.name))?;
                match field.field_path.as_str() {
                    "status.hostIP" | "status.podIP" => "192.0.2.10".to_owned(),
                    "spec.nodeName" => "node-a".to_owned(),
                    other => bail!("env {}: unexpected fieldPath {other}", env.name),
                }
            }
            (None, None) => String::new(),
        };
        vars.insert(env.name.clone(), value);
    }
    container
        .args
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|arg| expand(arg, &vars))
        .collect()
}

/// Kubernetes' `$(VAR)` expansion; a reference to an undefined variable is an error here
/// (the kubelet would pass it on literally).
fn expand(arg: &str, vars: &BTreeMap<String, String>) -> Result<String> {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(after) = rest.strip_prefix("$(") {
            let end = after
                .find(')')
                .with_context(|| format!("unclosed $( in {arg}"))?;
            let name = &after[..end];
            let value = vars
                .get(name)
                .with_context(|| format!("{arg}: ${name} is not in the container's env"))?;
            out.push_str(value);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The `--flag` of every option argument.
fn flags(args: &[String]) -> Vec<&str> {
    args.iter()
        .filter(|a| a.starts_with("--"))
        .map(|a| a.split('=').next().unwrap_or(a))
        .collect()
}

/// The value of `--flag=value` or `--flag value` (the last one given).
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let mut found = None;
    for (i, arg) in args.iter().enumerate() {
        if let Some(value) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            found = Some(value);
        } else if arg == flag {
            found = args.get(i + 1).map(String::as_str);
        }
    }
    found
}

fn redirector(args: &[&str]) -> std::process::Output {
    let bin = redirector_bin().expect("the redirector binary");
    Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()))
}

/// Every flag used appears in `redirector SUBCOMMAND --help`.
fn assert_flags_exist(args: &[String]) {
    let help = redirector(&[&args[0], "--help"]);
    assert!(help.status.success(), "{help:?}");
    let help = String::from_utf8_lossy(&help.stdout);
    let known: BTreeSet<&str> = help
        .split(|c: char| c.is_whitespace() || c == ',' || c == '=')
        .filter(|word| word.starts_with("--"))
        .collect();
    for flag in flags(args) {
        assert!(
            known.contains(flag),
            "`{flag}` is not a flag of `redirector {}` (it has {known:?})",
            args[0]
        );
    }
}

/// The real command line accepts the arguments, values included: clap validates every
/// value it meets before it acts on a trailing `--help`, so this needs no privileges.
fn assert_parses(args: &[String]) {
    let mut with_help: Vec<&str> = args.iter().map(String::as_str).collect();
    with_help.push("--help");
    let out = redirector(&with_help);
    assert!(
        out.status.success(),
        "redirector {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `path` is on a volume mount of the container (read-only or not as required).
fn assert_mounted(container: &Container, path: &str, read_only: bool) {
    let mounts = container.volume_mounts.as_deref().unwrap_or_default();
    let mount = mounts
        .iter()
        .filter(|m| Path::new(path).starts_with(&m.mount_path))
        .max_by_key(|m| m.mount_path.len())
        .unwrap_or_else(|| panic!("{path} is on no volume mount of {}", container.name));
    assert_eq!(
        mount.read_only.unwrap_or(false),
        read_only,
        "{}: readOnly",
        mount.mount_path
    );
}

#[test]
fn the_agent_arguments_parse_with_the_real_command_line() {
    let (_, daemon_set) = agent();
    let container = agent_container(&daemon_set);
    assert_eq!(
        container.command, None,
        "the image's entrypoint is redirector"
    );
    let args = expanded_args(container).unwrap();
    assert_eq!(args[0], "run");
    assert_flags_exist(&args);
    assert_parses(&args);
    assert_eq!(
        flag_value(&args, "--proxy-addr"),
        Some("192.0.2.10:15001"),
        "the proxy listens on the node IP"
    );
}

/// `25s`, `1m`, `500ms` (the forms the agent accepts) as a duration.
fn seconds(text: &str) -> Duration {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .unwrap_or_else(|_| panic!("duration {text:?}"));
    match unit {
        "ms" => Duration::from_millis(number),
        "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number * 60),
        "h" => Duration::from_secs(number * 3600),
        _ => panic!("duration {text:?}: unknown unit"),
    }
}

#[test]
fn mounts_probes_and_grace_period_fit_the_agent_arguments() {
    let (_, daemon_set) = agent();
    let spec = pod_spec(&daemon_set);
    let container = agent_container(&daemon_set);
    let args = expanded_args(container).unwrap();

    assert_eq!(
        spec.host_network,
        Some(true),
        "pods reach the proxy on the node IP"
    );
    let mounts = container.volume_mounts.as_deref().unwrap_or_default();
    let backends = flag_value(&args, "--backends").expect("--backends");
    assert_mounted(container, backends, true);
    assert_mounted(
        container,
        flag_value(&args, "--cgroup").expect("--cgroup"),
        true,
    );
    let bpffs = flag_value(&args, "--bpffs").unwrap_or("/sys/fs/bpf/redirector");
    assert_mounted(container, bpffs, false);
    for mount in mounts {
        assert!(mount.sub_path.is_none(), "subPath mounts are never updated");
    }

    // Probes reach the admin listener.
    let admin = flag_value(&args, "--admin-addr").unwrap_or("127.0.0.1:15000");
    let (admin_host, admin_port) = admin.rsplit_once(':').unwrap();
    let admin_port: i32 = admin_port.parse().unwrap();
    let ports = container.ports.as_deref().unwrap_or_default();
    for (probe, path) in [
        (&container.readiness_probe, "/readyz"),
        (&container.liveness_probe, "/healthz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("an httpGet probe on {path}"));
        assert_eq!(get.path.as_deref(), Some(path));
        let port = match &get.port {
            IntOrString::Int(port) => *port,
            IntOrString::String(name) => {
                ports
                    .iter()
                    .find(|p| p.name.as_deref() == Some(name))
                    .unwrap_or_else(|| panic!("no container port named {name}"))
                    .container_port
            }
        };
        assert_eq!(port, admin_port, "{path} probe port");
        // Without a host the kubelet probes the pod IP, which is the node IP here.
        let host = get.host.as_deref().unwrap_or("$(NODE_IP)");
        assert!(
            admin_host == host || admin_host == "0.0.0.0",
            "{path} probe goes to {host}, the agent listens on {admin}"
        );
    }

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

// ---------------------------------------------------------------------------------------
// The Backends ConfigMap

#[test]
fn the_backends_in_the_configmap_pass_redirector_check() {
    let (objects, daemon_set) = agent();
    let spec = pod_spec(&daemon_set);
    let container = agent_container(&daemon_set);
    let args = expanded_args(container).unwrap();
    let backends = flag_value(&args, "--backends").expect("--backends");
    let mount = container
        .volume_mounts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|m| m.mount_path == backends)
        .expect("--backends is a volume mount");
    let volume = spec
        .volumes
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|v| v.name == mount.name)
        .expect("the --backends volume");
    let config_maps: Vec<&str> = volume
        .projected
        .as_ref()
        .expect("a projected volume (ConfigMap + optional Secret)")
        .sources
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter_map(|s| s.config_map.as_ref())
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(config_maps, ["redirector-backends"]);

    // The directory the agent would see: one file per key.
    let config_map: ConfigMap = typed(&objects, "ConfigMap", "redirector-backends");
    let dir = tempfile::tempdir().unwrap();
    let data = config_map.data.unwrap_or_default();
    assert!(!data.is_empty());
    for (key, text) in &data {
        assert!(
            key.ends_with(".yaml") || key.ends_with(".yml"),
            "{key}: the agent only reads *.yaml and *.yml"
        );
        std::fs::write(dir.path().join(key), text).unwrap();
    }
    let out = redirector(&["check", &dir.path().display().to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "redirector check: {stdout}");
    assert!(stdout.starts_with("ok: "), "{stdout}");
}

// ---------------------------------------------------------------------------------------
// RBAC of the (future) Kubernetes source

#[test]
fn the_kubernetes_source_rbac_is_valid_least_privilege_and_not_installed_yet() {
    let path = deploy_dir().join("rbac-kubernetes-source.yaml");
    let objects = documents(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_schema_valid(&objects);

    let kustomization: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(deploy_dir().join("kustomization.yaml")).unwrap(),
    )
    .unwrap();
    assert!(
        !resources(&kustomization)
            .unwrap()
            .contains(&"rbac-kubernetes-source.yaml"),
        "directory mode needs no RBAC: install it with --kubernetes only"
    );

    // Every grant, as (group, resource, verb).
    let mut granted = BTreeSet::new();
    for object in &objects {
        let rules: Vec<PolicyRule> = match object["kind"].as_str().unwrap() {
            "ClusterRole" => serde_json::from_value::<ClusterRole>(object.clone())
                .unwrap()
                .rules
                .unwrap_or_default(),
            "Role" => {
                assert_eq!(object["metadata"]["namespace"], NAMESPACE);
                serde_json::from_value::<Role>(object.clone())
                    .unwrap()
                    .rules
                    .unwrap_or_default()
            }
            "ClusterRoleBinding" | "RoleBinding" => {
                let subjects = object["subjects"].as_array().unwrap();
                assert_eq!(subjects.len(), 1);
                assert_eq!(subjects[0]["kind"], "ServiceAccount");
                assert_eq!(subjects[0]["name"], SERVICE_ACCOUNT);
                assert_eq!(subjects[0]["namespace"], NAMESPACE);
                continue;
            }
            other => panic!("unexpected {other} in {}", path.display()),
        };
        for rule in rules {
            assert!(rule.non_resource_urls.is_none());
            for group in rule.api_groups.unwrap_or_default() {
                for resource in rule.resources.as_deref().unwrap_or_default() {
                    for verb in &rule.verbs {
                        granted.insert(format!("{group}/{resource}:{verb}"));
                    }
                }
            }
        }
    }
    let expected: BTreeSet<String> = [
        "gateway.networking.x-k8s.io/xbackends:get",
        "gateway.networking.x-k8s.io/xbackends:list",
        "gateway.networking.x-k8s.io/xbackends:watch",
        "gateway.networking.x-k8s.io/xbackends/status:patch",
        "/pods:get",
        "/pods:list",
        "/pods:watch",
        "/configmaps:get",
        "/configmaps:list",
        "/configmaps:watch",
        "/secrets:get",
        "/secrets:list",
        "/secrets:watch",
        "events.k8s.io/events:create",
        "events.k8s.io/events:patch",
        "coordination.k8s.io/leases:create",
        "coordination.k8s.io/leases:get",
        "coordination.k8s.io/leases:update",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(granted, expected, "grants differ from the reviewed list");
}
