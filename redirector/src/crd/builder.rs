//! A small builder for OpenAPI v3 schema nodes, so that the CRD reads as a list of fields
//! with their constraints instead of nested JSON literals.

use serde_json::{Map, Value, json};

/// One schema node. Keys are written in the order the methods are called; with
/// `serde_json`'s default map they come out sorted, as `controller-gen` writes them.
#[derive(Debug, Clone)]
pub struct Schema(Map<String, Value>);

impl Schema {
    fn typed(kind: &str, description: &str) -> Self {
        let mut map = Map::new();
        if !description.is_empty() {
            map.insert("description".into(), description.into());
        }
        map.insert("type".into(), kind.into());
        Self(map)
    }

    pub fn string(description: &str) -> Self {
        Self::typed("string", description)
    }

    /// An `integer` with its `format` (`int32`, `int64`).
    pub fn integer(description: &str, format: &str) -> Self {
        Self::typed("integer", description).with("format", format)
    }

    /// An `object` with these properties (none: any object, as for `metadata`).
    pub fn object<'a>(
        description: &str,
        properties: impl IntoIterator<Item = (&'a str, Schema)>,
    ) -> Self {
        let properties: Map<String, Value> = properties
            .into_iter()
            .map(|(name, schema)| (name.to_owned(), Value::from(schema)))
            .collect();
        let schema = Self::typed("object", description);
        if properties.is_empty() {
            schema
        } else {
            schema.with("properties", properties)
        }
    }

    /// An `object` whose keys are free and whose values all follow `values`
    /// (`additionalProperties`, as for label maps).
    pub fn map(description: &str, values: Schema) -> Self {
        Self::typed("object", description).with("additionalProperties", values)
    }

    pub fn array(description: &str, items: Schema) -> Self {
        Self::typed("array", description).with("items", items)
    }

    fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.0.insert(key.to_owned(), value.into());
        self
    }

    pub fn enumeration(self, values: &[&str]) -> Self {
        self.with("enum", values)
    }

    pub fn required(self, fields: &[&str]) -> Self {
        self.with("required", fields)
    }

    pub fn default(self, value: &str) -> Self {
        self.with("default", value)
    }

    pub fn format(self, format: &str) -> Self {
        self.with("format", format)
    }

    pub fn min_length(self, n: usize) -> Self {
        self.with("minLength", n)
    }

    pub fn max_length(self, n: usize) -> Self {
        self.with("maxLength", n)
    }

    /// `minLength` and `maxLength` at once.
    pub fn length(self, min: usize, max: usize) -> Self {
        self.min_length(min).max_length(max)
    }

    pub fn pattern(self, pattern: &str) -> Self {
        self.with("pattern", pattern)
    }

    pub fn minimum(self, n: i64) -> Self {
        self.with("minimum", n)
    }

    pub fn maximum(self, n: i64) -> Self {
        self.with("maximum", n)
    }

    /// `minimum` and `maximum` at once.
    pub fn range(self, (min, max): (i64, i64)) -> Self {
        self.minimum(min).maximum(max)
    }

    pub fn min_properties(self, n: usize) -> Self {
        self.with("minProperties", n)
    }

    /// `minProperties` and `maxProperties` at once.
    pub fn properties_range(self, min: usize, max: usize) -> Self {
        self.min_properties(min).with("maxProperties", max)
    }

    /// `x-kubernetes-preserve-unknown-fields: true`: fields not described are kept.
    pub fn preserve_unknown_fields(self) -> Self {
        self.with("x-kubernetes-preserve-unknown-fields", true)
    }

    pub fn max_items(self, n: usize) -> Self {
        self.with("maxItems", n)
    }

    /// `x-kubernetes-list-type: atomic`: the list is replaced whole on apply.
    pub fn atomic(self) -> Self {
        self.with("x-kubernetes-list-type", "atomic")
    }

    /// `x-kubernetes-list-type: map` keyed by `keys`.
    pub fn list_map(self, keys: &[&str]) -> Self {
        self.with("x-kubernetes-list-type", "map")
            .with("x-kubernetes-list-map-keys", keys)
    }

    /// Appends a CEL rule to `x-kubernetes-validations`.
    pub fn rule(mut self, rule: &str, message: &str) -> Self {
        let entry = json!({"rule": rule, "message": message});
        match self.0.get_mut("x-kubernetes-validations") {
            Some(Value::Array(rules)) => rules.push(entry),
            _ => {
                self.0
                    .insert("x-kubernetes-validations".into(), Value::Array(vec![entry]));
            }
        }
        self
    }
}

impl From<Schema> for Value {
    fn from(schema: Schema) -> Self {
        Value::Object(schema.0)
    }
}
