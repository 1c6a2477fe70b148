//! Rendering a kustomization: with `kubectl kustomize` where kubectl exists, and by
//! reading its `resources:` in any case (the two must agree).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail, ensure};
use serde::de::DeserializeOwned;
use serde_json::Value;

pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// The objects of the kustomization in `dir`, checked to be what `kubectl kustomize`
/// renders when kubectl is installed.
pub fn render(dir: &Path) -> Vec<Value> {
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
    let kustomization = kustomization(dir)?;
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

/// `dir/kustomization.yaml`, checked to be a plain resources list.
pub fn kustomization(dir: &Path) -> Result<Value> {
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
    Ok(kustomization)
}

pub fn resources(kustomization: &Value) -> Result<Vec<&str>> {
    let Some(list) = kustomization["resources"].as_array() else {
        bail!("no resources list");
    };
    list.iter()
        .map(|r| r.as_str().context("a resource that is not a string"))
        .collect()
}

/// Every non-empty document of a YAML stream, as JSON.
pub use xtask::manifest::documents;

fn sorted(mut objects: Vec<Value>) -> Vec<Value> {
    objects.sort_by_key(identity);
    objects
}

/// `kind namespace/name`, to name an object in messages.
pub fn identity(object: &Value) -> String {
    let meta = &object["metadata"];
    format!(
        "{} {}/{}",
        object["kind"].as_str().unwrap_or("?"),
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or("?")
    )
}

/// The object of `kind` named `name`, as its k8s-openapi type.
pub fn typed<T: DeserializeOwned>(objects: &[Value], kind: &str, name: &str) -> T {
    let object = objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"));
    serde_json::from_value(object.clone()).unwrap()
}
