//! One YAML file on its own: its documents, each named and parsed, with no knowledge of
//! the other files. What crosses files (duplicates, "first definition wins") is decided
//! when the files are merged, so a parsed file can be cached and reused until it changes.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize as _;
use serde_yaml_ng::Value;

use super::Failure;
use super::objects::{ConfigMapDoc, SecretDoc};
use crate::backend::model::{self, XBackend};
use crate::backend::validate::{Backend, ObjectKey, validate};
use crate::backend_policy::{self, BackendPolicy, model::BackendPolicyDoc};

mod expansion;

/// What one file holds, in document order; `Err` when the file as a whole is refused.
pub(super) type ParsedFile = Result<Vec<Document>, String>;

/// One document (or one item of a `List`) that is a Backend or something one references.
#[derive(Debug)]
pub(super) struct Document {
    /// `document N` (1-based), or `document N item M` inside a List.
    pub label: String,
    pub content: Content,
}

#[derive(Debug)]
pub(super) enum Content {
    /// Not even its identity could be read: reported under its document label.
    Unnamed(Failure),
    /// An object with a name, whatever the state of the rest of it.
    Named {
        kind: &'static str,
        key: ObjectKey,
        parsed: Result<Object, Vec<Failure>>,
    },
}

#[derive(Debug)]
pub(super) enum Object {
    /// A valid XBackend: its Backend (`None` for one this agent leaves to other
    /// controllers, `EndpointSelector`) and what the operator should be told about it.
    Backend {
        backend: Option<Arc<Backend>>,
        notices: Vec<Failure>,
    },
    ConfigMap(BTreeMap<String, String>),
    Secret(BTreeMap<String, Vec<u8>>),
    Policy(Arc<BackendPolicy>),
}

/// Reads and parses `file`.
///
/// A syntax error anywhere refuses the whole file: after one the parser cannot say where
/// the next document really starts, so nothing after it can be trusted, and a
/// half-loaded file would be harder to reason about than a refused one.
pub(super) fn parse(file: &Path) -> ParsedFile {
    // Names the file on the debug lines of the documents below.
    let _file = tracing::debug_span!("parse", file = %file.display()).entered();
    let text = fs::read_to_string(file).map_err(|e| format!("cannot read: {e}"))?;
    parse_text(&text)
}

/// Fuzzing: parses untrusted text as a Backend file; the number of documents found.
pub(crate) fn fuzz(text: &str) -> usize {
    parse_text(text).map_or(0, |documents| documents.len())
}

/// Parses the text of a Backend file (every document in it).
fn parse_text(text: &str) -> ParsedFile {
    let values = split_documents(text).map_err(|e| format!("invalid YAML: {e}"))?;
    tracing::debug!(documents = values.len(), "parsing");
    let mut documents = Vec::new();
    for (i, value) in values.into_iter().enumerate() {
        document(&mut documents, format!("document {}", i + 1), value);
    }
    Ok(documents)
}

fn document(out: &mut Vec<Document>, label: String, value: Value) {
    if value.is_null() {
        return;
    }
    if !value.is_mapping() {
        let message = "not a Kubernetes object (expected a mapping with apiVersion and kind)";
        let failure = Failure {
            field: None,
            message: message.to_owned(),
        };
        return unnamed(out, label, failure);
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
        (model::API_VERSION, model::KIND) => {
            return named(out, label, value, model::KIND, xbackend);
        }
        // Silently skipping a future or mistyped version would hide the Backend.
        (_, model::KIND) => Failure::at(
            "apiVersion",
            format!("must be {} for XBackend", model::API_VERSION),
        ),
        ("v1", "ConfigMap") => {
            return named(out, label, value, "ConfigMap", config_map);
        }
        ("v1", "Secret") => return named(out, label, value, "Secret", secret),
        (backend_policy::API_VERSION, backend_policy::KIND) => {
            return named(out, label, value, backend_policy::KIND, policy);
        }
        (_, backend_policy::KIND) => Failure::at(
            "apiVersion",
            format!("must be {} for BackendPolicy", backend_policy::API_VERSION),
        ),
        ("v1", "List") | (model::API_VERSION, "XBackendList") => {
            return list(out, &label, &value);
        }
        _ => {
            tracing::debug!(%label, %api_version, %kind, "ignoring object of another kind");
            return;
        }
    };
    unnamed(out, label, failure);
}

/// `kubectl get -o yaml` output wraps objects in a List; each item counts on its own.
fn list(out: &mut Vec<Document>, label: &str, value: &Value) {
    let Some(items) = value.get("items").and_then(Value::as_sequence) else {
        let failure = Failure::at("items", "required: a sequence of objects");
        return unnamed(out, label.to_owned(), failure);
    };
    for (j, item) in items.iter().enumerate() {
        document(out, format!("{label} item {}", j + 1), item.clone());
    }
}

fn unnamed(out: &mut Vec<Document>, label: String, failure: Failure) {
    out.push(Document {
        label,
        content: Content::Unnamed(failure),
    });
}

/// Names the object from the raw document first, so that even one whose body does not
/// parse is reported (and deduplicated) under its own name, then parses the body.
fn named(
    out: &mut Vec<Document>,
    label: String,
    value: Value,
    kind: &'static str,
    parse: fn(Value) -> Result<Object, Vec<Failure>>,
) {
    let content = match identity(&value) {
        Ok(key) => Content::Named {
            kind,
            key,
            parsed: parse(value),
        },
        Err(failure) => Content::Unnamed(failure),
    };
    out.push(Document { label, content });
}

fn xbackend(value: Value) -> Result<Object, Vec<Failure>> {
    let parsed: XBackend = serde_path_to_error::deserialize(value).map_err(|e| vec![e.into()])?;
    validate(&parsed)
        .map(|validated| Object::Backend {
            backend: validated.backend.map(Arc::new),
            notices: (validated.notices.into_iter())
                .map(|n| Failure::at(n.field, n.message))
                .collect(),
        })
        .map_err(|errors| {
            errors
                .into_iter()
                .map(|e| Failure::at(e.field, e.message))
                .collect()
        })
}

fn config_map(value: Value) -> Result<Object, Vec<Failure>> {
    serde_path_to_error::deserialize::<_, ConfigMapDoc>(value)
        .map_err(Failure::from)
        .and_then(ConfigMapDoc::into_data)
        .map(Object::ConfigMap)
        .map_err(|failure| vec![failure])
}

fn secret(value: Value) -> Result<Object, Vec<Failure>> {
    serde_path_to_error::deserialize::<_, SecretDoc>(value)
        .map_err(Failure::from)
        .and_then(SecretDoc::into_data)
        .map(Object::Secret)
        .map_err(|failure| vec![failure])
}

fn policy(value: Value) -> Result<Object, Vec<Failure>> {
    let key = identity(&value).map_err(|failure| vec![failure])?;
    let parsed: BackendPolicyDoc =
        serde_path_to_error::deserialize(value).map_err(|e| vec![e.into()])?;
    backend_policy::validate(&key.namespace, &key.name, parsed)
        .map(|policy| Object::Policy(Arc::new(policy)))
        .map_err(|errors| {
            (errors.iter())
                .map(|e| Failure {
                    field: e.field().map(str::to_owned),
                    message: e.message().to_owned(),
                })
                .collect()
        })
}

/// Namespace and name from the raw document.
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
    // Before building anything: aliases can make a small file expand without bound.
    expansion::check(text)?;
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        // Stop at the first error: the deserializer repeats a failure forever.
        documents.push(Value::deserialize(document)?);
    }
    Ok(documents)
}
