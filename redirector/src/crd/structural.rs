//! A tiny checker of an object against the CRD's OpenAPI schema, for tests: types, enums,
//! required fields, unknown fields, string lengths, numeric ranges, list sizes and
//! property counts (and map values), which is what the API server checks before CEL. Patterns and CEL rules are not evaluated
//! (that needs a regex engine and a CEL interpreter); the validator's tables cover them.

use serde_json::Value;

/// Every violation, as `path: message`; empty when the object fits the schema.
pub fn check(schema: &Value, value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    node(schema, value, "", &mut errors);
    errors
}

fn node(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    let mut fail = |message: String| errors.push(format!("{}: {message}", display(path)));
    let number = |key: &str| schema.get(key).and_then(Value::as_i64);
    let size = |key: &str| schema.get(key).and_then(Value::as_u64);
    let ok = match (schema.get("type").and_then(Value::as_str), value) {
        (Some("object"), Value::Object(_))
        | (Some("array"), Value::Array(_))
        | (Some("string"), Value::String(_))
        | (Some("boolean"), Value::Bool(_)) => true,
        (Some("integer"), Value::Number(n)) => n.is_i64() || n.is_u64(),
        (kind, _) => {
            fail(format!("expected {}, got {value}", kind.unwrap_or("?")));
            false
        }
    };
    if !ok {
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        fail(format!("unsupported value {value}"));
    }
    match value {
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if size("minLength").is_some_and(|min| len < min) {
                fail(format!("shorter than minLength {}", schema["minLength"]));
            }
            if size("maxLength").is_some_and(|max| len > max) {
                fail(format!("longer than maxLength {}", schema["maxLength"]));
            }
        }
        Value::Number(n) => {
            let n = n.as_i64().unwrap_or(i64::MAX);
            let int32 = schema.get("format").and_then(Value::as_str) == Some("int32");
            if int32 && i32::try_from(n).is_err() {
                fail("does not fit int32".to_owned());
            }
            if number("minimum").is_some_and(|min| n < min) {
                fail(format!("less than minimum {}", schema["minimum"]));
            }
            if number("maximum").is_some_and(|max| n > max) {
                fail(format!("greater than maximum {}", schema["maximum"]));
            }
        }
        Value::Array(items) => {
            if size("maxItems").is_some_and(|max| items.len() as u64 > max) {
                fail(format!("more than maxItems {}", schema["maxItems"]));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    node(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        Value::Object(fields) => object(schema, fields, path, errors),
        Value::Null | Value::Bool(_) => {}
    }
}

fn object(
    schema: &Value,
    fields: &serde_json::Map<String, Value>,
    path: &str,
    errors: &mut Vec<String>,
) {
    let join = |name: &str| match path {
        "" => name.to_owned(),
        _ => format!("{path}.{name}"),
    };
    let count = fields.len() as u64;
    let size = |key: &str| schema.get(key).and_then(Value::as_u64);
    if size("minProperties").is_some_and(|min| count < min) {
        let min = &schema["minProperties"];
        errors.push(format!(
            "{}: should have at least {min} properties",
            display(path)
        ));
    }
    if size("maxProperties").is_some_and(|max| count > max) {
        let max = &schema["maxProperties"];
        errors.push(format!(
            "{}: should have at most {max} properties",
            display(path)
        ));
    }
    if let Some(values) = schema.get("additionalProperties") {
        for (name, value) in fields {
            node(values, value, &join(name), errors);
        }
        return;
    }
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !fields.contains_key(name) {
            errors.push(format!("{}: required", join(name)));
        }
    }
    // No `properties` (as for `metadata`, or with x-kubernetes-preserve-unknown-fields):
    // any fields are preserved.
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, value) in fields {
        match properties.get(name) {
            Some(child) => node(child, value, &join(name), errors),
            None => errors.push(format!("{}: unknown field", join(name))),
        }
    }
}

fn display(path: &str) -> &str {
    if path.is_empty() { "(root)" } else { path }
}
