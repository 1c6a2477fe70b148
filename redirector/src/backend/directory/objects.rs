//! The core objects a Backend may reference from a directory: `v1` ConfigMap (CA bundles)
//! and `v1` Secret (client certificates, CA bundles).
//!
//! Only the payload is kept (identity is read by the loader from the raw document, as for
//! every kind). These structs accept unknown keys (`type`, `immutable`, ...)
//! because they are core Kubernetes objects with many fields irrelevant here, and a strict
//! parse would reject perfectly valid manifests copied from a cluster.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::Failure;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ConfigMapDoc {
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    binary_data: BTreeMap<String, String>,
}

impl ConfigMapDoc {
    /// `data` as is, plus `binaryData` entries that decode to UTF-8 text (a PEM bundle
    /// stored there is still a PEM bundle). A key in both is an error, as in Kubernetes.
    pub fn into_data(self) -> Result<BTreeMap<String, String>, Failure> {
        let mut data = self.data;
        for (key, encoded) in self.binary_data {
            let field = format!("binaryData.{key}");
            let bytes = decode(&field, &encoded)?;
            if data.contains_key(&key) {
                return Err(Failure::at(field, "key is also present in data"));
            }
            match String::from_utf8(bytes) {
                Ok(text) => {
                    data.insert(key, text);
                }
                Err(_) => tracing::debug!(key, "ignoring non-UTF-8 ConfigMap binaryData entry"),
            }
        }
        Ok(data)
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SecretDoc {
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    string_data: BTreeMap<String, String>,
}

impl SecretDoc {
    /// `data` decoded from base64, then `stringData` merged over it: the API server does
    /// the same on write, so a directory and a cluster yield the same bytes. Any entry that
    /// does not decode rejects the whole Secret; half a key pair is worse than none.
    pub fn into_data(self) -> Result<BTreeMap<String, Vec<u8>>, Failure> {
        let mut out = BTreeMap::new();
        for (key, encoded) in &self.data {
            out.insert(key.clone(), decode(&format!("data.{key}"), encoded)?);
        }
        for (key, text) in self.string_data {
            out.insert(key, text.into_bytes());
        }
        Ok(out)
    }
}

/// Standard padded base64, what Kubernetes emits. Line breaks are tolerated because
/// hand-written manifests often wrap long values (`base64` without `-w0`).
fn decode(field: &str, encoded: &str) -> Result<Vec<u8>, Failure> {
    let compact: String = encoded
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    STANDARD
        .decode(compact.as_bytes())
        .map_err(|e| Failure::at(field.to_owned(), format!("invalid base64: {e}")))
}
