//! The directory source: Backends (and the ConfigMaps and Secrets they reference) from
//! Kubernetes YAML files, for hosts without a cluster and for `redirector check`.
//!
//! Failure is per object, never per catalog: a broken document, an unreadable file or a
//! YAML syntax error becomes a [`Problem`] and everything else still loads, so one typo
//! cannot take down the egress of a node. Only a directory named on the command line that
//! cannot be read at all is a hard [`DirectoryError`], since then the operator's intent
//! cannot be carried out in any part.

mod objects;
#[cfg(test)]
mod tests;
mod walk;

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize as _;
use serde_yaml_ng::Value;

use super::model::{self, XBackend};
use super::validate::{Backend, ObjectKey, validate};
use objects::{ConfigMapDoc, SecretDoc};

/// Everything loaded from the directories, plus what could not be.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// Valid Backends, sorted by key.
    pub backends: Vec<Backend>,
    /// Problems met while walking the directories first, then per file in load order
    /// and per document in file order.
    pub problems: Vec<Problem>,
    /// `data` (and UTF-8 `binaryData`) of every ConfigMap, by namespace/name.
    pub config_maps: BTreeMap<ObjectKey, BTreeMap<String, String>>,
    /// Decoded `data` merged with `stringData` of every Secret, by namespace/name.
    pub secrets: BTreeMap<ObjectKey, BTreeMap<String, Vec<u8>>>,
    /// The file each valid Backend came from (so a file that stops parsing as a whole
    /// can keep its Backends' last good versions).
    pub origins: BTreeMap<ObjectKey, PathBuf>,
    /// `metadata.generation` of every XBackend, valid or not (Kubernetes source only;
    /// empty for directories): the `observedGeneration` of its status.
    pub generations: BTreeMap<ObjectKey, i64>,
}

/// One thing that could not be loaded, located as precisely as is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    /// `XBackend ns/name`, or `document N` (1-based) when the name is unknown.
    pub object: Option<String>,
    /// Field path in upstream JSON names, e.g. `spec.port.port`.
    pub field: Option<String>,
    pub message: String,
}

impl Problem {
    /// The XBackend this problem is about, when its label names one (`XBackend ns/name`).
    pub fn xbackend_key(&self) -> Option<ObjectKey> {
        let label = self.object.as_deref()?;
        let rest = label.strip_prefix(model::KIND)?.strip_prefix(' ')?;
        let (namespace, name) = rest.split_once('/')?;
        Some(ObjectKey::new(namespace, name))
    }

    fn file(file: &Path, message: impl Into<String>) -> Self {
        Self {
            file: file.to_path_buf(),
            object: None,
            field: None,
            message: message.into(),
        }
    }
}

/// `deploy/examples/x.yaml: XBackend default/foo: spec.port.port: must be 1..=65535`,
/// leaving out the parts that are unknown.
///
/// Always exactly one line (`redirector check` prints one problem per line, and CI logs
/// and `grep` rely on it): control characters in any part (a newline in a YAML error, a
/// file name or a quoted value) are escaped.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        one_line(f, &self.file.display().to_string())?;
        for part in [&self.object, &self.field].into_iter().flatten() {
            f.write_str(": ")?;
            one_line(f, part)?;
        }
        f.write_str(": ")?;
        one_line(f, &self.message)
    }
}

/// Writes `text` with control characters escaped (`\n`, `\u{1b}`), everything else as is.
fn one_line(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    for c in text.chars() {
        if c.is_control() {
            write!(f, "{}", c.escape_default())?;
        } else {
            fmt::Write::write_char(f, c)?;
        }
    }
    Ok(())
}

/// A directory (or file) named on the command line cannot be used at all.
#[derive(Debug, thiserror::Error)]
pub enum DirectoryError {
    #[error("{}: cannot read: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a directory or regular file", path.display())]
    NotADirectory { path: PathBuf },
}

/// Loads every `*.yaml` / `*.yml` file under `dirs` (recursively, in sorted order).
pub fn load(dirs: &[PathBuf]) -> Result<Catalog, DirectoryError> {
    let (files, problems) = walk::yaml_files(dirs)?;
    let mut loader = Loader {
        problems,
        ..Loader::default()
    };
    for file in &files {
        loader.file(file);
    }
    Ok(loader.finish())
}

/// A field-located failure of one object, before it is tied to a file and object.
/// Visible to `validate`'s tests, which check parse-level rules the same way.
#[derive(Debug)]
pub(in crate::backend) struct Failure {
    pub(in crate::backend) field: Option<String>,
    pub(in crate::backend) message: String,
}

impl Failure {
    fn at(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            message: message.into(),
        }
    }
}

/// A parse error at its path. serde reports a missing field at its parent
/// (`spec.port: missing field "port"`); it is moved to the field itself
/// (`spec.port.port: required`) so that every required-field message reads the same.
impl From<serde_path_to_error::Error<serde_yaml_ng::Error>> for Failure {
    fn from(e: serde_path_to_error::Error<serde_yaml_ng::Error>) -> Self {
        let path = e.path().to_string();
        let parent = (path != ".").then_some(path);
        let message = e.into_inner().to_string();
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'));
        match missing {
            Some(name) => Self {
                field: Some(match parent {
                    Some(parent) => format!("{parent}.{name}"),
                    None => name.to_owned(),
                }),
                message: "required".to_owned(),
            },
            None => Self {
                field: parent,
                message,
            },
        }
    }
}

/// Where an object was first defined, to name it when a duplicate appears.
#[derive(Debug, Clone)]
struct Origin {
    file: PathBuf,
    document: String,
}

#[derive(Default)]
struct Loader {
    backends: BTreeMap<ObjectKey, Backend>,
    origins: BTreeMap<ObjectKey, PathBuf>,
    problems: Vec<Problem>,
    config_maps: BTreeMap<ObjectKey, BTreeMap<String, String>>,
    secrets: BTreeMap<ObjectKey, BTreeMap<String, Vec<u8>>>,
    /// First definition of each `(kind, key)`, valid or not: a second object with the
    /// same identity is ambiguous whichever of the two is broken.
    seen: BTreeMap<(&'static str, ObjectKey), Origin>,
}

impl Loader {
    fn finish(self) -> Catalog {
        Catalog {
            backends: self.backends.into_values().collect(),
            problems: self.problems,
            config_maps: self.config_maps,
            secrets: self.secrets,
            origins: self.origins,
            generations: BTreeMap::new(),
        }
    }

    /// A syntax error anywhere rejects the whole file: after one the parser cannot say
    /// where the next document really starts, so nothing after it can be trusted, and a
    /// half-loaded file would be harder to reason about than a refused one.
    fn file(&mut self, file: &Path) {
        let documents = match fs::read_to_string(file) {
            Err(e) => Err(format!("cannot read: {e}")),
            Ok(text) => split_documents(&text).map_err(|e| format!("invalid YAML: {e}")),
        };
        let documents = match documents {
            Ok(documents) => documents,
            Err(message) => return self.problems.push(Problem::file(file, message)),
        };
        tracing::debug!(file = %file.display(), documents = documents.len(), "loading");
        for (i, document) in documents.into_iter().enumerate() {
            self.document(file, format!("document {}", i + 1), document);
        }
    }

    fn document(&mut self, file: &Path, document: String, value: Value) {
        if value.is_null() {
            return;
        }
        if !value.is_mapping() {
            let message = "not a Kubernetes object (expected a mapping with apiVersion and kind)";
            let failure = Failure {
                field: None,
                message: message.to_owned(),
            };
            return self.fail(file, &document, failure);
        }
        let text = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (api_version, kind) = (text("apiVersion"), text("kind"));
        let failure = match (api_version.as_str(), kind.as_str()) {
            (_, "") => Failure::at("kind", "required"),
            ("", _) => Failure::at("apiVersion", "required"),
            (model::API_VERSION, model::KIND) => return self.xbackend(file, document, value),
            // Silently skipping a future or mistyped version would hide the Backend.
            (_, model::KIND) => Failure::at(
                "apiVersion",
                format!("must be {} for XBackend", model::API_VERSION),
            ),
            ("v1", "ConfigMap") => return self.config_map(file, document, value),
            ("v1", "Secret") => return self.secret(file, document, value),
            ("v1", "List") | (model::API_VERSION, "XBackendList") => {
                return self.list(file, &document, &value);
            }
            _ => {
                tracing::debug!(file = %file.display(), %document, %api_version, %kind, "ignoring object of another kind");
                return;
            }
        };
        self.fail(file, &document, failure);
    }

    /// `kubectl get -o yaml` output wraps objects in a List; each item counts on its own.
    fn list(&mut self, file: &Path, document: &str, value: &Value) {
        let Some(items) = value.get("items").and_then(Value::as_sequence) else {
            let failure = Failure::at("items", "required: a sequence of objects");
            return self.fail(file, document, failure);
        };
        for (j, item) in items.iter().enumerate() {
            self.document(file, format!("{document} item {}", j + 1), item.clone());
        }
    }

    fn xbackend(&mut self, file: &Path, document: String, value: Value) {
        let Some((_, label)) = self.claim(file, document, &value, model::KIND) else {
            return;
        };
        let parsed: XBackend = match serde_path_to_error::deserialize(value) {
            Ok(parsed) => parsed,
            Err(e) => return self.fail(file, &label, e.into()),
        };
        match validate(&parsed) {
            Ok(backend) => {
                self.origins.insert(backend.key.clone(), file.to_path_buf());
                self.backends.insert(backend.key.clone(), backend);
            }
            Err(errors) => {
                for e in errors {
                    self.fail(file, &label, Failure::at(e.field, e.message));
                }
            }
        }
    }

    fn config_map(&mut self, file: &Path, document: String, value: Value) {
        let Some((key, label)) = self.claim(file, document, &value, "ConfigMap") else {
            return;
        };
        let result = serde_path_to_error::deserialize::<_, ConfigMapDoc>(value)
            .map_err(Failure::from)
            .and_then(ConfigMapDoc::into_data);
        match result {
            Ok(data) => {
                self.config_maps.insert(key, data);
            }
            Err(failure) => self.fail(file, &label, failure),
        }
    }

    fn secret(&mut self, file: &Path, document: String, value: Value) {
        let Some((key, label)) = self.claim(file, document, &value, "Secret") else {
            return;
        };
        let result = serde_path_to_error::deserialize::<_, SecretDoc>(value)
            .map_err(Failure::from)
            .and_then(SecretDoc::into_data);
        match result {
            Ok(data) => {
                self.secrets.insert(key, data);
            }
            Err(failure) => self.fail(file, &label, failure),
        }
    }

    /// Reads the identity of an object from the raw document and records its first
    /// definition. Returns `None` (after reporting) when the name is missing or the
    /// object duplicates an earlier one; otherwise the key and the `Kind ns/name` label.
    fn claim(
        &mut self,
        file: &Path,
        document: String,
        value: &Value,
        kind: &'static str,
    ) -> Option<(ObjectKey, String)> {
        let key = match identity(value) {
            Ok(key) => key,
            Err(failure) => {
                self.fail(file, &document, failure);
                return None;
            }
        };
        let label = format!("{kind} {key}");
        if let Some(first) = self.seen.get(&(kind, key.clone())) {
            let message = format!(
                "duplicate: {label} is already defined in {} ({}); this definition is ignored",
                first.file.display(),
                first.document
            );
            self.problems.push(Problem {
                object: Some(label),
                ..Problem::file(file, message)
            });
            return None;
        }
        let origin = Origin {
            file: file.to_path_buf(),
            document,
        };
        self.seen.insert((kind, key.clone()), origin);
        Some((key, label))
    }

    fn fail(&mut self, file: &Path, object: &str, failure: Failure) {
        self.problems.push(Problem {
            file: file.to_path_buf(),
            object: Some(object.to_owned()),
            field: failure.field,
            message: failure.message,
        });
    }
}

/// Namespace and name from the raw document, so that even an object whose spec does
/// not parse is reported (and deduplicated) under its own name.
fn identity(value: &Value) -> Result<ObjectKey, Failure> {
    let metadata = value.get("metadata");
    let get = |key: &str| metadata.and_then(|m| m.get(key)).filter(|v| !v.is_null());
    let name = match get("name").map(Value::as_str) {
        None | Some(Some("")) => return Err(Failure::at("metadata.name", "required")),
        Some(None) => return Err(Failure::at("metadata.name", "must be a string")),
        Some(Some(name)) => name,
    };
    let namespace = match get("namespace").map(Value::as_str) {
        None => "default",
        Some(None) => return Err(Failure::at("metadata.namespace", "must be a string")),
        Some(Some(namespace)) => namespace,
    };
    Ok(ObjectKey::new(namespace, name))
}

/// Splits a multi-document YAML text into values; an empty file yields no documents.
fn split_documents(text: &str) -> Result<Vec<Value>, serde_yaml_ng::Error> {
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        // Stop at the first error: the deserializer repeats a failure forever.
        documents.push(Value::deserialize(document)?);
    }
    Ok(documents)
}
