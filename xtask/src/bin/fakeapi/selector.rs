//! Field and label selectors, and what a list or watch request selects with them.

use serde_json::{Value, json};

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

/// What a list or watch request selects.
pub struct Selection<'a> {
    pub resource: usize,
    pub namespace: Option<&'a str>,
    pub fields: Vec<Term>,
    pub labels: Vec<Term>,
    pub metadata_only: bool,
}

impl Selection<'_> {
    pub fn matches(&self, resource: usize, object: &Value) -> bool {
        resource == self.resource
            && self
                .namespace
                .is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns))
            && matches_fields(object, &self.fields)
            && matches_labels(object, &self.labels)
    }

    /// The object as this client asked for it.
    pub fn shape(&self, object: &Value) -> Value {
        if self.metadata_only {
            json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": object["metadata"],
            })
        } else {
            object.clone()
        }
    }
}
