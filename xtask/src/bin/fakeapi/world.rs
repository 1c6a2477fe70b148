//! The fake API server's state: objects loaded from the directory, resourceVersions, the
//! event history that watches replay, and what the control files asked for.

use std::{
    collections::{BTreeMap, VecDeque},
    path::{Path, PathBuf},
};

use serde_json::{Map, Value, json};

/// Events kept for watches that resume from a resourceVersion; older ones are expired.
const HISTORY: usize = 10_000;

/// A resource type the server knows.
pub struct Resource {
    /// `api/v1` or `apis/GROUP/VERSION`.
    pub prefix: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub api_version: &'static str,
    /// Field selectors the real API server accepts for it (besides metadata.*).
    pub fields: &'static [&'static str],
}

pub const RESOURCES: [Resource; 5] = [
    Resource {
        prefix: "apis/gateway.networking.x-k8s.io/v1alpha1",
        plural: "xbackends",
        kind: "XBackend",
        api_version: "gateway.networking.x-k8s.io/v1alpha1",
        fields: &[],
    },
    Resource {
        prefix: "api/v1",
        plural: "configmaps",
        kind: "ConfigMap",
        api_version: "v1",
        fields: &[],
    },
    Resource {
        prefix: "api/v1",
        plural: "secrets",
        kind: "Secret",
        api_version: "v1",
        fields: &["type"],
    },
    Resource {
        prefix: "api/v1",
        plural: "pods",
        kind: "Pod",
        api_version: "v1",
        fields: &["spec.nodeName", "status.phase", "spec.serviceAccountName"],
    },
    Resource {
        prefix: "apis/coordination.k8s.io/v1",
        plural: "leases",
        kind: "Lease",
        api_version: "coordination.k8s.io/v1",
        fields: &[],
    },
];

/// Why a write through the API was refused.
#[derive(Debug)]
pub enum WriteError {
    /// 404.
    NotFound,
    /// 409 `AlreadyExists` (create).
    AlreadyExists,
    /// 409 `Conflict`: the request's resourceVersion is not the object's.
    Conflict { sent: String, current: String },
    /// 400.
    BadRequest(String),
}

/// Resource index, namespace, name.
pub type Key = (usize, String, String);

#[derive(Debug, Clone)]
pub struct Event {
    pub rv: u64,
    pub resource: usize,
    pub kind: &'static str,
    pub object: Value,
}

/// How a too-old resourceVersion is refused by a watch request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoneMode {
    /// HTTP 200 and an `ERROR` event with code 410 (what API servers do).
    Event,
    /// HTTP 410 for the watch request itself.
    Http,
}

/// What `.down` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Down {
    /// Listener closed, open connections cut.
    Refuse,
    /// Every request answered 503.
    Unavailable,
}

struct Loaded {
    text: String,
    objects: Vec<Value>,
}

pub struct World {
    dir: PathBuf,
    pub rv: u64,
    /// As written in the files (normalised), to tell real changes apart.
    raw: BTreeMap<Key, Value>,
    /// As served: metadata filled in.
    pub objects: BTreeMap<Key, Value>,
    uids: BTreeMap<Key, String>,
    generations: BTreeMap<Key, (i64, Value)>,
    /// `status` written through the status subresource, kept across spec changes.
    statuses: BTreeMap<Key, Value>,
    pub history: VecDeque<Event>,
    /// resourceVersions below this are expired (410).
    pub expired_below: u64,
    pub gone_mode: GoneMode,
    /// Bumped whenever open watches must end (`.gone`, `.down`).
    pub epoch: u64,
    pub down: Option<Down>,
    files: BTreeMap<PathBuf, Loaded>,
    next_uid: u64,
}

impl World {
    pub fn new(dir: &Path) -> World {
        World {
            dir: dir.to_path_buf(),
            rv: 1,
            raw: BTreeMap::new(),
            objects: BTreeMap::new(),
            uids: BTreeMap::new(),
            generations: BTreeMap::new(),
            statuses: BTreeMap::new(),
            history: VecDeque::new(),
            expired_below: 0,
            gone_mode: GoneMode::Event,
            epoch: 0,
            down: None,
            files: BTreeMap::new(),
            next_uid: 1,
        }
    }

    /// The oldest resourceVersion a watch may still resume from.
    pub fn oldest_resumable(&self) -> u64 {
        let history = self.history.front().map_or(self.rv, |e| e.rv - 1);
        history.max(self.expired_below)
    }

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

    fn record(&mut self, key: &Key, kind: &'static str, object: Value) -> String {
        let line = format!(
            "event {kind} {} {}/{} rv={}",
            RESOURCES[key.0].plural, key.1, key.2, self.rv
        );
        self.history.push_back(Event {
            rv: self.rv,
            resource: key.0,
            kind,
            object,
        });
        while self.history.len() > HISTORY {
            self.history.pop_front();
        }
        line
    }

    /// The object with the metadata an API server fills in.
    fn serve(&mut self, key: &Key, mut value: Value) -> Value {
        // A uid written in the state file is kept (tests name pod cgroups after it).
        let given = value["metadata"]["uid"].as_str().map(str::to_owned);
        let uid = self
            .uids
            .entry(key.clone())
            .or_insert_with(|| {
                if let Some(uid) = given {
                    return uid;
                }
                let uid = format!("00000000-0000-4000-8000-{:012x}", self.next_uid);
                self.next_uid += 1;
                uid
            })
            .clone();
        // Objects with a spec have a generation, bumped when the spec changes.
        let generation = value.get("spec").cloned().map(|spec| {
            let generation = match self.generations.get(key) {
                Some((generation, old)) if *old == spec => *generation,
                Some((generation, _)) => generation + 1,
                None => 1,
            };
            self.generations.insert(key.clone(), (generation, spec));
            generation
        });
        let metadata = &mut value["metadata"];
        metadata["uid"] = json!(uid);
        metadata["resourceVersion"] = json!(self.rv.to_string());
        metadata["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
        if let Some(generation) = generation {
            metadata["generation"] = json!(generation);
        }
        if let Some(status) = self.statuses.get(key) {
            value["status"] = status.clone();
        }
        value
    }

    /// `POST` of `body` into the collection `resource`/`namespace`: the created object,
    /// and the line to print.
    pub fn create(
        &mut self,
        resource: usize,
        namespace: &str,
        body: Value,
    ) -> Result<(Value, String), WriteError> {
        let name = body["metadata"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| WriteError::BadRequest("metadata.name is required".to_owned()))?
            .to_owned();
        let key = (resource, namespace.to_owned(), name);
        if self.objects.contains_key(&key) {
            return Err(WriteError::AlreadyExists);
        }
        let mut value = body;
        value["metadata"]["namespace"] = json!(namespace);
        self.rv += 1;
        let served = self.serve(&key, value);
        self.objects.insert(key.clone(), served.clone());
        let line = self.record(&key, "ADDED", served.clone());
        Ok((served, line))
    }

    /// `PUT` of `body` over the object `key`: refused with 409 when the body carries a
    /// resourceVersion that is not the object's (no resourceVersion: unconditional).
    pub fn update(&mut self, key: &Key, body: Value) -> Result<(Value, String), WriteError> {
        let current = self.objects.get(key).ok_or(WriteError::NotFound)?;
        check_version(current, &body)?;
        let mut value = body;
        value["metadata"]["namespace"] = json!(key.1);
        value["metadata"]["name"] = json!(key.2);
        self.rv += 1;
        let served = self.serve(key, value);
        self.objects.insert(key.clone(), served.clone());
        let line = self.record(key, "MODIFIED", served.clone());
        Ok((served, line))
    }

    /// A `PATCH` of the status subresource: the top-level fields of `body.status`
    /// replace the stored ones (`status.parents` is an atomic list, so a server-side
    /// apply replaces it whole). `metadata.resourceVersion` in the body is a
    /// precondition. A patch that changes nothing changes no resourceVersion.
    pub fn patch_status(
        &mut self,
        key: &Key,
        body: &Value,
    ) -> Result<(Value, Option<String>), WriteError> {
        let current = self.objects.get(key).ok_or(WriteError::NotFound)?;
        check_version(current, body)?;
        let mut status = current.get("status").cloned().unwrap_or_else(|| json!({}));
        if let (Some(fields), Value::Object(stored)) = (body["status"].as_object(), &mut status) {
            for (field, value) in fields {
                stored.insert(field.clone(), value.clone());
            }
        }
        if current.get("status") == Some(&status) {
            return Ok((current.clone(), None));
        }
        self.statuses.insert(key.clone(), status.clone());
        self.rv += 1;
        let mut object = current.clone();
        object["status"] = status;
        object["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.objects.insert(key.clone(), object.clone());
        let line = self.record(key, "MODIFIED", object.clone());
        Ok((object, Some(line)))
    }
}

/// A write's `metadata.resourceVersion`, if it has one, must be the object's.
fn check_version(current: &Value, body: &Value) -> Result<(), WriteError> {
    let current = current["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("");
    match body["metadata"]["resourceVersion"].as_str() {
        Some(sent) if !sent.is_empty() && sent != current => Err(WriteError::Conflict {
            sent: sent.to_owned(),
            current: current.to_owned(),
        }),
        _ => Ok(()),
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

/// The key of an object and its normalised form (namespace defaulted; a Secret's
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
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_owned();
    let mut value = object.clone();
    value["metadata"]["namespace"] = json!(namespace);
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
                data.insert(key, json!(base64(text.as_bytes())));
            }
        }
    }
    Ok(((resource, namespace, name), value))
}

/// Standard padded base64.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A parsed `fieldSelector` or `labelSelector` term.
#[derive(Debug, Clone)]
pub enum Term {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// `a=b,c!=d` (field selectors; label selectors also `k` and `!k`).
pub fn parse_selector(text: &str) -> Vec<Term> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                Term::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Term::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some(k) = term.strip_prefix('!') {
                Term::Absent(k.trim().to_owned())
            } else {
                Term::Exists(term.to_owned())
            }
        })
        .collect()
}

/// The value of a dotted field path, as a string ("" when absent, as the API server does).
pub fn field(object: &Value, path: &str) -> String {
    let mut value = object;
    for part in path.split('.') {
        value = &value[part];
    }
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

pub fn matches_fields(object: &Value, terms: &[Term]) -> bool {
    terms.iter().all(|term| match term {
        Term::Equals(k, v) => field(object, k) == *v,
        Term::NotEquals(k, v) => field(object, k) != *v,
        Term::Exists(_) | Term::Absent(_) => false,
    })
}

pub fn matches_labels(object: &Value, terms: &[Term]) -> bool {
    let labels = &object["metadata"]["labels"];
    terms.iter().all(|term| match term {
        Term::Equals(k, v) => labels[k].as_str() == Some(v),
        Term::NotEquals(k, v) => labels[k].as_str() != Some(v),
        Term::Exists(k) => labels.get(k).is_some(),
        Term::Absent(k) => labels.get(k).is_none(),
    })
}
