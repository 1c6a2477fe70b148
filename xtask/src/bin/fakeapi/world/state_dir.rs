//! Reading the state directory: the control files (`.gone`, `.down`) and the `*.json`
//! object files, turned into changes of the [`World`] with one event each.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use base64::{Engine as _, engine::general_purpose::STANDARD};
use serde_json::{Map, Value, json};

use super::{Down, GoneMode, Key, World};
use crate::resources::RESOURCES;

/// A state file as last read, and the objects it held.
pub(super) struct Loaded {
    text: String,
    objects: Vec<Value>,
}

impl World {
    /// Reads the directory again; returns what to print and whether anything changed.
    pub fn poll(&mut self) -> (Vec<String>, bool) {
        let mut said = Vec::new();
        let mut changed = false;
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) => {
                said.push(format!("error {}: {e}", self.dir.display()));
                return (said, false);
            }
        };
        let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        names.sort();
        // Control files.
        let gone = self.dir.join(".gone");
        if let Ok(text) = std::fs::read_to_string(&gone) {
            let _ = std::fs::remove_file(&gone);
            self.gone_mode = if text.trim() == "http" {
                GoneMode::Http
            } else {
                GoneMode::Event
            };
            self.rv += 1;
            self.expired_below = self.rv;
            self.epoch += 1;
            said.push(format!("gone rv={} mode={:?}", self.rv, self.gone_mode));
            changed = true;
        }
        let down = match std::fs::read_to_string(self.dir.join(".down")) {
            Ok(text) if text.trim() == "503" => Some(Down::Unavailable),
            Ok(_) => Some(Down::Refuse),
            Err(_) => None,
        };
        if down != self.down {
            match down {
                Some(mode) => said.push(format!("down {mode:?}")),
                None => said.push("up".to_owned()),
            }
            self.down = down;
            self.epoch += 1;
            changed = true;
        }
        for plural in crate::resources::RESOURCES.map(|r| r.plural) {
            let unserved = self.dir.join(format!(".no-{plural}")).exists();
            if unserved != self.unserved.contains(plural) {
                match unserved {
                    true => self.unserved.insert(plural),
                    false => self.unserved.remove(plural),
                };
                said.push(format!("{plural} served={}", !unserved));
            }
        }
        // Objects.
        let mut seen_files = Vec::new();
        for path in names.iter().filter(|p| is_data_file(p)) {
            seen_files.push(path.clone());
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            if self.files.get(path).is_some_and(|l| l.text == text) {
                continue;
            }
            match parse_file(&text) {
                Ok(objects) => {
                    self.files.insert(path.clone(), Loaded { text, objects });
                }
                Err(e) => said.push(format!(
                    "error {}: {e} (keeping its last version)",
                    path.display()
                )),
            }
        }
        self.files.retain(|path, _| seen_files.contains(path));
        let mut desired = BTreeMap::new();
        for (path, loaded) in &self.files {
            for object in &loaded.objects {
                match identify(object) {
                    Ok((key, value)) => {
                        desired.insert(key, value);
                    }
                    Err(e) => said.push(format!("error {}: {e}", path.display())),
                }
            }
        }
        if desired != self.raw {
            said.extend(self.apply(desired));
            changed = true;
        }
        (said, changed)
    }

    /// Turns the difference into events, one resourceVersion each.
    fn apply(&mut self, desired: BTreeMap<Key, Value>) -> Vec<String> {
        let mut said = Vec::new();
        let removed: Vec<Key> = (self.raw.keys())
            .filter(|k| !desired.contains_key(*k))
            .cloned()
            .collect();
        for key in removed {
            self.rv += 1;
            self.raw.remove(&key);
            self.statuses.remove(&key);
            if let Some(mut object) = self.objects.remove(&key) {
                object["metadata"]["resourceVersion"] = json!(self.rv.to_string());
                said.push(self.record(&key, "DELETED", object));
            }
        }
        for (key, value) in desired {
            if self.raw.get(&key) == Some(&value) {
                continue;
            }
            self.rv += 1;
            let kind = if self.raw.contains_key(&key) {
                "MODIFIED"
            } else {
                "ADDED"
            };
            self.raw.insert(key.clone(), value.clone());
            let served = self.serve(&key, value);
            self.objects.insert(key.clone(), served.clone());
            said.push(self.record(&key, kind, served));
        }
        said
    }
}

fn is_data_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !name.starts_with('.') && name.ends_with(".json")
}

/// A file holds one object, a JSON array of objects, or a `List`.
fn parse_file(text: &str) -> Result<Vec<Value>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(match value {
        Value::Array(items) => items,
        Value::Object(ref fields) if fields.get("kind") == Some(&json!("List")) => {
            match fields.get("items") {
                Some(Value::Array(items)) => items.clone(),
                _ => Vec::new(),
            }
        }
        Value::Null => Vec::new(),
        other => vec![other],
    })
}

/// The key of an object and its normalised form (namespace defaulted, or removed for a
/// cluster-scoped kind; a Secret's
/// `stringData` merged into `data` as base64, as the API server stores it).
fn identify(object: &Value) -> Result<(Key, Value), String> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let resource = RESOURCES
        .iter()
        .position(|r| r.api_version == api_version && r.kind == kind)
        .ok_or_else(|| format!("unknown apiVersion/kind {api_version}/{kind}"))?;
    let name = object["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or("metadata.name missing")?
        .to_owned();
    let mut value = object.clone();
    let namespace = match RESOURCES[resource].cluster {
        true => {
            if let Some(metadata) = value["metadata"].as_object_mut() {
                metadata.remove("namespace");
            }
            String::new()
        }
        false => {
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default");
            value["metadata"]["namespace"] = json!(namespace);
            namespace.to_owned()
        }
    };
    if kind == "Secret"
        && let Some(Value::Object(strings)) =
            value.as_object_mut().and_then(|o| o.remove("stringData"))
    {
        let data = value
            .as_object_mut()
            .map(|o| o.entry("data").or_insert_with(|| Value::Object(Map::new())));
        if let Some(Value::Object(data)) = data {
            for (key, text) in strings {
                let text = text.as_str().unwrap_or_default();
                data.insert(key, json!(STANDARD.encode(text.as_bytes())));
            }
        }
    }
    Ok(((resource, namespace, name), value))
}
