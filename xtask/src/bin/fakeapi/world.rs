//! The fake API server's state: objects loaded from the directory, resourceVersions, the
//! event history that watches replay, and what the control files asked for.

#[path = "world/state_dir.rs"]
mod state_dir;

use std::{
    collections::{BTreeMap, VecDeque},
    path::{Path, PathBuf},
};

use serde_json::{Value, json};
use state_dir::Loaded;

use crate::resources::RESOURCES;

/// Events kept for watches that resume from a resourceVersion; older ones are expired.
const HISTORY: usize = 10_000;

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
    /// Resources (plurals) answered 404 while a file `.no-PLURAL` is present, as by an
    /// API server without their CRD or kind (`.no-servicecidrs`: before Kubernetes 1.33).
    pub unserved: std::collections::BTreeSet<&'static str>,
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
            unserved: std::collections::BTreeSet::new(),
            files: BTreeMap::new(),
            next_uid: 1,
        }
    }

    /// The oldest resourceVersion a watch may still resume from.
    pub fn oldest_resumable(&self) -> u64 {
        let history = self.history.front().map_or(self.rv, |e| e.rv - 1);
        history.max(self.expired_below)
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
