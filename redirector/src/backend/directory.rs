//! The directory source: Backends (and the ConfigMaps and Secrets they reference) from
//! Kubernetes YAML files, for hosts without a cluster and for `redirector check`.
//!
//! Failure is per object, never per catalog: a broken document, an unreadable file or a
//! YAML syntax error becomes a [`Problem`] and everything else still loads, so one typo
//! cannot take down the egress of a node. Only a directory named on the command line that
//! cannot be read at all is a hard [`DirectoryError`], since then the operator's intent
//! cannot be carried out in any part.

pub(crate) mod file;
mod objects;
#[cfg(test)]
mod tests;
mod walk;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::model;
use super::validate::{Backend, ObjectKey};
use crate::backend_policy::{BackendPolicy, Observed};
use crate::file_stamp::FileStamp;
use file::{Content, Object, ParsedFile};

/// Everything loaded from the directories, plus what could not be.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// Valid Backends, sorted by key.
    pub backends: Vec<Arc<Backend>>,
    /// Problems met while walking the directories first, then per file in load order
    /// and per document in file order.
    pub problems: Vec<Problem>,
    /// Notes on accepted objects, located like problems: a deprecated v1.6 shape, an
    /// `EndpointSelector` Backend this agent skips. Logged once and printed by `check`;
    /// they fail nothing.
    pub notices: Vec<Problem>,
    /// `data` (and UTF-8 `binaryData`) of every ConfigMap, by namespace/name.
    pub config_maps: BTreeMap<ObjectKey, BTreeMap<String, String>>,
    /// Decoded `data` merged with `stringData` of every Secret, by namespace/name.
    pub secrets: BTreeMap<ObjectKey, BTreeMap<String, Vec<u8>>>,
    /// The file each valid Backend came from (so a file that stops parsing as a whole
    /// can keep its Backends' last good versions).
    pub origins: BTreeMap<ObjectKey, PathBuf>,
    /// Valid BackendPolicies, sorted by key; attached to Backends by
    /// [`crate::backend::attach_policies`].
    pub policies: Vec<Arc<BackendPolicy>>,
    /// The file each valid BackendPolicy came from (to locate its problems).
    pub policy_origins: BTreeMap<ObjectKey, PathBuf>,
    /// Every BackendPolicy object, valid or not (Kubernetes source only; empty for
    /// directories): what its status is written for.
    pub policy_objects: BTreeMap<ObjectKey, Observed>,
    /// `metadata.generation` of every XBackend, valid or not (Kubernetes source only;
    /// empty for directories): the `observedGeneration` of its status.
    pub generations: BTreeMap<ObjectKey, i64>,
}

/// One thing that could not be loaded, located as precisely as is known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
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
        self.key_of(model::KIND)
    }

    /// The object of `kind` this problem is about, when its label names one.
    pub fn key_of(&self, kind: &str) -> Option<ObjectKey> {
        let label = self.object.as_deref()?;
        let rest = label.strip_prefix(kind)?.strip_prefix(' ')?;
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
    DirectoryLoader::default().load(dirs)
}

/// Loads the directories again and again, parsing only the files that changed since
/// the last load: the watcher reloads on every change, and reparsing 10,000 unchanged
/// Backends for each edit would cost CPU and leave the heap fragmented.
#[derive(Default)]
pub struct DirectoryLoader {
    /// Each file's parse as of its stamp; only files of the latest walk are kept.
    parsed: HashMap<PathBuf, (Option<FileStamp>, ParsedFile)>,
}

impl DirectoryLoader {
    /// Same result as [`load`]; unchanged files come from the cache.
    pub fn load(&mut self, dirs: &[PathBuf]) -> Result<Catalog, DirectoryError> {
        let (files, problems) = walk::yaml_files(dirs)?;
        let mut merge = Merge {
            problems,
            ..Merge::default()
        };
        let mut parsed = HashMap::with_capacity(files.len());
        for path in files {
            let file = self.parse(&path);
            merge.file(&path, &file.1);
            parsed.insert(path, file);
        }
        self.parsed = parsed;
        Ok(merge.finish())
    }

    fn parse(&mut self, path: &Path) -> (Option<FileStamp>, ParsedFile) {
        // Stat before reading: a change racing the read leaves an older stamp behind,
        // so the next load reads the file again rather than trusting a stale parse.
        let stamp = FileStamp::of(path);
        match self.parsed.remove(path) {
            Some((cached, file)) if stamp.is_some() && cached == stamp => (stamp, file),
            _ => (stamp, file::parse(path)),
        }
    }
}

/// A field-located failure of one object, before it is tied to a file and object.
/// Visible to `validate`'s tests, which check parse-level rules the same way.
#[derive(Debug, Clone)]
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

/// A parse error at its path (see [`located`]).
impl From<serde_path_to_error::Error<serde_yaml_ng::Error>> for Failure {
    fn from(e: serde_path_to_error::Error<serde_yaml_ng::Error>) -> Self {
        let (field, message) = located(e);
        Self { field, message }
    }
}

/// A parse error (YAML from a file, JSON from the API server) as (field path, message).
/// serde reports a missing field at its parent (`spec.port: missing field "port"`); it is
/// moved to the field itself (`spec.port.port: required`) so that every required-field
/// message reads the same, whichever the source.
pub fn located<E: fmt::Display>(e: serde_path_to_error::Error<E>) -> (Option<String>, String) {
    let path = e.path().to_string();
    let parent = (path != ".").then_some(path);
    let message = e.into_inner().to_string();
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'));
    match missing {
        Some(name) => {
            let field = match parent {
                Some(parent) => format!("{parent}.{name}"),
                None => name.to_owned(),
            };
            (Some(field), "required".to_owned())
        }
        None => (parent, message),
    }
}

/// Where an object was first defined, to name it when a duplicate appears.
#[derive(Debug, Clone)]
struct Origin {
    file: PathBuf,
    document: String,
}

/// Parsed files combined in load order into one [`Catalog`].
#[derive(Default)]
struct Merge {
    backends: BTreeMap<ObjectKey, Arc<Backend>>,
    origins: BTreeMap<ObjectKey, PathBuf>,
    problems: Vec<Problem>,
    notices: Vec<Problem>,
    config_maps: BTreeMap<ObjectKey, BTreeMap<String, String>>,
    secrets: BTreeMap<ObjectKey, BTreeMap<String, Vec<u8>>>,
    policies: BTreeMap<ObjectKey, Arc<BackendPolicy>>,
    policy_origins: BTreeMap<ObjectKey, PathBuf>,
    /// First definition of each `(kind, key)`, valid or not: a second object with the
    /// same identity is ambiguous whichever of the two is broken.
    seen: HashMap<(&'static str, ObjectKey), Origin>,
}

impl Merge {
    fn finish(self) -> Catalog {
        Catalog {
            backends: self.backends.into_values().collect(),
            problems: self.problems,
            notices: self.notices,
            config_maps: self.config_maps,
            secrets: self.secrets,
            origins: self.origins,
            policies: self.policies.into_values().collect(),
            policy_origins: self.policy_origins,
            policy_objects: BTreeMap::new(),
            generations: BTreeMap::new(),
        }
    }

    fn file(&mut self, path: &Path, file: &ParsedFile) {
        let documents = match file {
            Ok(documents) => documents,
            Err(message) => return self.problems.push(Problem::file(path, message.clone())),
        };
        for document in documents {
            match &document.content {
                Content::Unnamed(failure) => self.fail(path, &document.label, failure),
                Content::Named { kind, key, parsed } => {
                    self.named(path, &document.label, kind, key, parsed);
                }
            }
        }
    }

    fn named(
        &mut self,
        path: &Path,
        document: &str,
        kind: &'static str,
        key: &ObjectKey,
        parsed: &Result<Object, Vec<Failure>>,
    ) {
        let label = format!("{kind} {key}");
        if let Some(first) = self.seen.get(&(kind, key.clone())) {
            let message = format!(
                "duplicate: {label} is already defined in {} ({}); this definition is ignored",
                first.file.display(),
                first.document
            );
            self.problems.push(Problem {
                object: Some(label),
                ..Problem::file(path, message)
            });
            return;
        }
        let origin = Origin {
            file: path.to_path_buf(),
            document: document.to_owned(),
        };
        self.seen.insert((kind, key.clone()), origin);
        match parsed {
            Ok(Object::Backend { backend, notices }) => {
                for notice in notices {
                    let problem = located_at(path, &label, notice);
                    self.notices.push(problem);
                }
                if let Some(backend) = backend {
                    self.origins.insert(key.clone(), path.to_path_buf());
                    self.backends.insert(key.clone(), backend.clone());
                }
            }
            Ok(Object::ConfigMap(data)) => {
                self.config_maps.insert(key.clone(), data.clone());
            }
            Ok(Object::Secret(data)) => {
                self.secrets.insert(key.clone(), data.clone());
            }
            Ok(Object::Policy(policy)) => {
                self.policy_origins.insert(key.clone(), path.to_path_buf());
                self.policies.insert(key.clone(), policy.clone());
            }
            Err(failures) => {
                for failure in failures {
                    self.fail(path, &label, failure);
                }
            }
        }
    }

    fn fail(&mut self, path: &Path, object: &str, failure: &Failure) {
        let problem = located_at(path, object, failure);
        self.problems.push(problem);
    }
}

/// A failure (or notice) of `object` in `path`, as a [`Problem`].
fn located_at(path: &Path, object: &str, failure: &Failure) -> Problem {
    Problem {
        file: path.to_path_buf(),
        object: Some(object.to_owned()),
        field: failure.field.clone(),
        message: failure.message.clone(),
    }
}
