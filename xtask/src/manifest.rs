//! The DaemonSets of `deploy/` as data: read, switched to directory mode as their
//! comments document it, and their containers' arguments expanded as the kubelet does.
//!
//! Shared by the manifest checks (`xtask/tests/deploy.rs`), the container test
//! (`xtask/tests/container.rs`) and `cargo xtask demo --container`, so that what is
//! checked and what is run are the manifest itself, never a restatement of it.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Container, PodSpec},
};
use serde::Deserialize as _;
use serde_json::Value;

/// The agent's DaemonSet, relative to the workspace root.
pub const AGENT: &str = "deploy/daemonset.yaml";
/// The uninstall DaemonSet, relative to the workspace root.
pub const UNINSTALL: &str = "deploy/uninstall/daemonset.yaml";

/// The workspace root (xtask lives one level below it).
pub fn workspace_dir() -> PathBuf {
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_owned()
}

/// `deploy/` of this workspace.
pub fn deploy_dir() -> PathBuf {
    workspace_dir().join("deploy")
}

/// The documents of a multi-document YAML text, as JSON values (empty ones dropped).
pub fn documents(yaml: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(yaml) {
        let value = Value::deserialize(document)?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// The one DaemonSet of the file `relative` (to the workspace root), as written.
pub fn daemon_set(relative: &str) -> Result<DaemonSet> {
    let path = workspace_dir().join(relative);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let value = only_document(&text).with_context(|| path.display().to_string())?;
    serde_json::from_value(value).with_context(|| format!("{}: not a DaemonSet", path.display()))
}

/// The agent's DaemonSet switched to directory mode, typed.
pub fn agent_in_directory_mode() -> Result<DaemonSet> {
    let path = deploy_dir().join("daemonset.yaml");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let value = directory_mode(&text).with_context(|| path.display().to_string())?;
    serde_json::from_value(value).with_context(|| format!("{}: not a DaemonSet", path.display()))
}

fn only_document(text: &str) -> Result<Value> {
    let mut documents = documents(text)?;
    ensure!(
        documents.len() == 1,
        "{} documents, expected one",
        documents.len()
    );
    Ok(documents.remove(0))
}

/// The DaemonSet of `text` switched to directory mode exactly as its DIRECTORY MODE
/// comments say: the four arguments from `--kubernetes` to `--lease-namespace` replaced
/// by the commented `--backends=` argument, the commented `backends` volume and mount put
/// in, and `automountServiceAccountToken: false`.
pub fn directory_mode(text: &str) -> Result<Value> {
    let mut daemon_set = only_document(text)?;
    let backends_arg = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("#   - --backends="))
        .map(|dir| format!("--backends={dir}"))
        .context("no commented `- --backends=` argument")?;
    let items = commented_items(text, "backends")?;
    let mount = (items.iter().find(|i| i.get("mountPath").is_some()))
        .context("no commented `backends` volume mount")?;
    let volume = (items.iter().find(|i| i.get("projected").is_some()))
        .context("no commented `backends` projected volume")?;

    let pod = &mut daemon_set["spec"]["template"]["spec"];
    pod["automountServiceAccountToken"] = Value::Bool(false);
    (pod["volumes"].as_array_mut())
        .context("spec.template.spec.volumes is not a list")?
        .push(volume.clone());
    let container = &mut pod["containers"][0];
    (container["volumeMounts"].as_array_mut())
        .context("the first container's volumeMounts is not a list")?
        .push(mount.clone());
    let args =
        (container["args"].as_array_mut()).context("the first container's args is not a list")?;
    let at = |flag: &str| {
        (args.iter())
            .position(|a| a.as_str().is_some_and(|a| a.starts_with(flag)))
            .with_context(|| format!("no {flag} in the args"))
    };
    // "replace the four lines from --kubernetes to --lease-namespace"
    let (first, last) = (at("--kubernetes")?, at("--lease-namespace")?);
    ensure!(
        last >= first && last - first == 3,
        "the comment says four lines from --kubernetes to --lease-namespace; the args have {}",
        last as isize - first as isize + 1
    );
    args.splice(first..=last, [Value::String(backends_arg)]);
    Ok(daemon_set)
}

/// The YAML list items commented out in `text` whose first line is `# - name: NAME`:
/// that line and the deeper-indented comment lines after it, uncommented.
pub fn commented_items(text: &str, name: &str) -> Result<Vec<Value>> {
    let lines: Vec<&str> = text.lines().collect();
    let first = format!("# - name: {name}");
    let mut items = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != first {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let mut block = vec![format!("- name: {name}")];
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
            .with_context(|| format!("commented item {name}:\n{}", block.join("\n")))?;
        items.extend(parsed);
    }
    Ok(items)
}

/// The pod template's spec.
pub fn pod_spec(daemon_set: &DaemonSet) -> Result<&PodSpec> {
    let name = daemon_set.metadata.name.as_deref().unwrap_or("?");
    (daemon_set.spec.as_ref())
        .and_then(|s| s.template.spec.as_ref())
        .with_context(|| format!("DaemonSet {name} has no spec.template.spec"))
}

/// The container (or init container) `name` of `spec`.
pub fn container<'a>(spec: &'a PodSpec, name: &str) -> Result<&'a Container> {
    (spec.containers.iter())
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .with_context(|| format!("no container {name} in the pod spec"))
}

/// The container's environment as the kubelet builds it: plain values, and `fieldRef`s
/// looked up in `fields` (the downward API: `status.hostIP` -> the node IP...).
pub fn environment(
    container: &Container,
    fields: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>> {
    let mut vars = BTreeMap::new();
    for env in container.env.iter().flatten() {
        let value = match (&env.value, &env.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(from)) => {
                let field = (from.field_ref.as_ref())
                    .with_context(|| format!("env {}: only fieldRef is supported", env.name))?;
                let path = field.field_path.as_str();
                (fields.get(path).cloned()).with_context(|| {
                    format!("env {}: no value given for fieldPath {path}", env.name)
                })?
            }
            (None, None) => String::new(),
        };
        vars.insert(env.name.clone(), value);
    }
    Ok(vars)
}

/// The container's args with `$(VAR)` expanded from `vars` ([`environment`]).
pub fn expanded_args(
    container: &Container,
    vars: &BTreeMap<String, String>,
) -> Result<Vec<String>> {
    (container.args.iter().flatten())
        .map(|arg| expand(arg, vars))
        .collect()
}

/// Kubernetes' `$(VAR)` expansion; a reference to an undefined variable is an error here
/// (the kubelet would pass it on literally, which no test or demo wants).
pub fn expand(arg: &str, vars: &BTreeMap<String, String>) -> Result<String> {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(after) = rest.strip_prefix("$(") {
            let Some(end) = after.find(')') else {
                bail!("unclosed $( in {arg}");
            };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commented_items_are_found_and_stop_at_the_next_comment() -> Result<()> {
        let text = "\
      volumes:
        # prose
        # - name: backends
        #   projected:
        #     defaultMode: 256
        # The next thing, prose again.
        - name: bpffs
";
        let items = commented_items(text, "backends")?;
        assert_eq!(
            items,
            [serde_json::json!({"name": "backends", "projected": {"defaultMode": 256}})]
        );
        assert!(commented_items(text, "other")?.is_empty());
        Ok(())
    }

    #[test]
    fn expands_like_the_kubelet() -> Result<()> {
        let vars = BTreeMap::from([("IP".to_owned(), "10.0.0.1".to_owned())]);
        assert_eq!(expand("--a=$(IP):1", &vars)?, "--a=10.0.0.1:1");
        assert_eq!(expand("$$(IP) $x", &vars)?, "$(IP) $x");
        assert!(expand("$(NOPE)", &vars).is_err());
        Ok(())
    }

    #[test]
    fn the_agent_switches_to_directory_mode() -> Result<()> {
        let daemon_set = agent_in_directory_mode()?;
        let spec = pod_spec(&daemon_set)?;
        assert_eq!(spec.automount_service_account_token, Some(false));
        let args = container(spec, "agent")?.args.clone().unwrap_or_default();
        assert!(
            args.iter().any(|a| a.starts_with("--backends=")),
            "{args:?}"
        );
        assert!(!args.iter().any(|a| a == "--kubernetes"), "{args:?}");
        Ok(())
    }
}
