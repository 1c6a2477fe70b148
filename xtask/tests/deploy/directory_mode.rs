//! Directory mode, the documented alternative to the Kubernetes source: the DaemonSet
//! switched as its DIRECTORY MODE comments say (the commented `--backends` argument,
//! volume and mount put in) parses, mounts its Backend directory, and the Backends of
//! backends-configmap.yaml pass `redirector check`.

use k8s_openapi::api::{apps::v1::DaemonSet, core::v1::ConfigMap};
use serde_json::Value;

use super::{
    NAMESPACE, agent_container,
    args::{assert_mounted, assert_parses, expanded_args, flag_value, flags, redirector},
    pod_spec,
    render::{self, deploy_dir, typed},
    schema::assert_schema_valid,
};

/// The DaemonSet switched to directory mode as its DIRECTORY MODE comments say
/// ([`xtask::manifest::directory_mode`], which the container test runs too).
fn directory_mode_daemon_set() -> Value {
    let text = std::fs::read_to_string(deploy_dir().join("daemonset.yaml")).unwrap();
    xtask::manifest::directory_mode(&text).unwrap()
}

#[test]
fn the_directory_mode_alternative_parses_mounts_and_its_backends_pass_check() {
    let object = directory_mode_daemon_set();
    assert_schema_valid(std::slice::from_ref(&object));
    let daemon_set: DaemonSet = serde_json::from_value(object).unwrap();
    let spec = pod_spec(&daemon_set);
    let container = agent_container(&daemon_set);
    let args = expanded_args(container, NAMESPACE).unwrap();
    assert_parses(&args);
    assert!(!flags(&args).contains(&"--kubernetes"));
    let backends = flag_value(&args, "--backends").expect("--backends");
    assert_mounted(container, backends, true);

    let mount = (container.volume_mounts.iter().flatten())
        .find(|m| m.mount_path == backends)
        .expect("--backends is a volume mount");
    let volume = (spec.volumes.iter().flatten())
        .find(|v| v.name == mount.name)
        .expect("the --backends volume");
    let config_maps: Vec<&str> = (volume.projected.as_ref())
        .expect("a projected volume (ConfigMap + optional Secret)")
        .sources
        .iter()
        .flatten()
        .filter_map(|s| s.config_map.as_ref())
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(config_maps, ["redirector-backends"]);

    // The ConfigMap of backends-configmap.yaml, and the directory the agent would see:
    // one file per key.
    let path = deploy_dir().join("backends-configmap.yaml");
    let objects = render::documents(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_schema_valid(&objects);
    let config_map: ConfigMap = typed(&objects, "ConfigMap", "redirector-backends");
    assert_eq!(config_map.metadata.namespace.as_deref(), Some(NAMESPACE));
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
