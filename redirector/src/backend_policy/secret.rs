//! A header value made from a Secret: marked sensitive (HPACK never indexes it) and
//! printed as `<redacted>` by Debug, so neither logs nor `{:?}` of a table show a key.

use std::fmt;

use http::HeaderValue;

#[derive(Clone, PartialEq, Eq)]
pub struct SensitiveHeader(HeaderValue);

impl SensitiveHeader {
    /// `None` when the bytes cannot be a header value (a line break, a NUL).
    pub fn new(bytes: &[u8]) -> Option<Self> {
        let mut value = HeaderValue::from_bytes(bytes).ok()?;
        value.set_sensitive(true);
        Some(Self(value))
    }

    /// The value, to be put on a request.
    pub fn value(&self) -> &HeaderValue {
        &self.0
    }
}

impl fmt::Debug for SensitiveHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}
