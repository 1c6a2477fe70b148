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

/// The YAML list items commented out in `text` whose first line is `# - name: NAME`:
/// that line and the deeper-indented comment lines after it, uncommented.
fn commented_items(text: &str, name: &str) -> Vec<Value> {
    let lines: Vec<&str> = text.lines().collect();
    let first = format!("# - name: {name}");
    let mut items = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != first {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let mut block = vec!["- ".to_owned() + &first["# - ".len()..]];
        for next in &lines[i + 1..] {
            match next
                .get(indent..)
                .and_then(|rest| rest.strip_prefix("#   "))
            {
                Some(rest) if next[..indent].trim().is_empty() => block.push(format!("  {rest}")),
                _ => break,
            }
        }
        let parsed: Vec<Value> = serde_yaml_ng::from_str(&block.join("\n"))
            .unwrap_or_else(|e| panic!("commented item {name}: {e}\n{}", block.join("\n")));
        items.extend(parsed);
    }
    items
}

/// The DaemonSet switched to directory mode as its DIRECTORY MODE comments say.
fn directory_mode_daemon_set() -> Value {
    let text = std::fs::read_to_string(deploy_dir().join("daemonset.yaml")).unwrap();
    let mut daemon_set = render::documents(&text).unwrap().remove(0);
    let backends_arg = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("#   - --backends="))
        .map(|dir| format!("--backends={dir}"))
        .expect("the commented --backends argument");
    let items = commented_items(&text, "backends");
    let mount = items
        .iter()
        .find(|i| i.get("mountPath").is_some())
        .expect("the commented backends mount");
    let volume = items
        .iter()
        .find(|i| i.get("projected").is_some())
        .expect("the commented backends volume");

    let pod = &mut daemon_set["spec"]["template"]["spec"];
    pod["automountServiceAccountToken"] = Value::Bool(false);
    pod["volumes"].as_array_mut().unwrap().push(volume.clone());
    let container = &mut pod["containers"][0];
    container["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .push(mount.clone());
    let args = container["args"].as_array_mut().unwrap();
    let at = |flag: &str| {
        (args.iter())
            .position(|a| a.as_str().is_some_and(|a| a.starts_with(flag)))
            .unwrap_or_else(|| panic!("{flag} in the args"))
    };
    // "replace the four lines from --kubernetes to --lease-namespace"
    let (first, last) = (at("--kubernetes"), at("--lease-namespace"));
    assert_eq!(
        last - first,
        3,
        "four lines from --kubernetes to --lease-namespace"
    );
    args.splice(first..=last, [Value::String(backends_arg)]);
    daemon_set
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

#[test]
fn the_commented_items_are_found_and_stop_at_the_next_comment() {
    let text = "\
      volumes:
        # prose
        # - name: backends
        #   projected:
        #     defaultMode: 256
        # The next thing, prose again.
        - name: bpffs
";
    let items = commented_items(text, "backends");
    assert_eq!(
        items,
        [serde_json::json!({"name": "backends", "projected": {"defaultMode": 256}})]
    );
    assert!(commented_items(text, "other").is_empty());
}
