//! Upstream's own CEL cases (the table `redirector check` is tested with) against the
//! printed CRDs, as the API server would judge them: the structural checks, then every
//! CEL rule of every schema node the object has, evaluated by a CEL interpreter
//! (`cel-interpreter`). Each case goes to the CRD of the shape it is written in (a
//! `port.port` object to v1.6's). The API server and `check` must agree on every case,
//! except where `check` is knowingly stricter; and where a CEL rule refuses an object,
//! `check` refuses it with that rule's message.

use cel_interpreter::{Context, Program};
use serde_json::Value;

use super::{SchemaVersion, schema_of};
use crate::backend::{self, XBackend, document, upstream_cases};
use crate::crd::structural::check;

/// Cases `check` refuses and the CRD accepts, on purpose: v1.6 had no rule against H2C
/// with TLS; this project has always refused it (`validate`, "Stricter than upstream").
const STRICTER: &[&str] = &["H2C with tls mode: ServerOnly (v1.6 shape: true)"];

/// The messages of the CEL rules that refuse `value`, walking `schema` as the API
/// server does (a rule runs where its node has a value).
fn cel_refusals(schema: &Value, value: &Value, out: &mut Vec<String>) {
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let text = rule["rule"].as_str().unwrap_or_default();
        let program = Program::compile(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let mut context = Context::default();
        (context.add_variable("self", value)).expect("a JSON value binds");
        match program.execute(&context) {
            Ok(cel_interpreter::Value::Bool(true)) => {}
            Ok(cel_interpreter::Value::Bool(false)) => {
                out.push(rule["message"].as_str().unwrap_or_default().to_owned());
            }
            other => panic!("{text} on {value}: {other:?}"),
        }
    }
    match value {
        Value::Object(fields) => {
            for (name, child) in fields {
                if let Some(child_schema) = schema["properties"].get(name) {
                    cel_refusals(child_schema, child, out);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                cel_refusals(&schema["items"], item, out);
            }
        }
        _ => {}
    }
}

#[test]
fn upstream_cases_are_judged_alike_by_the_printed_crd_and_by_check() {
    let mut failures = Vec::new();
    let mut refused_by_cel = 0;
    for (rule, name, meta, spec, want) in upstream_cases::cases() {
        let text = document(meta, &spec);
        let value: Value = serde_yaml_ng::from_str(&text).expect("the case is YAML");
        let version = match value["spec"]["port"].get("port") {
            Some(_) => SchemaVersion::V1_6,
            None => SchemaVersion::Newest,
        };
        let schema = schema_of(version);
        let structural = check(&schema, &value);
        let mut refusals = Vec::new();
        if structural.is_empty() {
            cel_refusals(&schema, &value, &mut refusals);
        }
        let crd_refuses = !structural.is_empty() || !refusals.is_empty();
        refused_by_cel += usize::from(!refusals.is_empty());
        let object: XBackend = serde_json::from_value(value).expect("parses");
        let checked = backend::validate(&object);
        let check_refuses = want.is_some();
        assert_eq!(
            checked.is_err(),
            check_refuses,
            "{rule} / {name}: {checked:?}"
        );
        let stricter = STRICTER.contains(&name);
        if crd_refuses != check_refuses && !stricter {
            failures.push(format!(
                "{rule} / {name}: CRD refuses {crd_refuses} ({structural:?} {refusals:?}), \
                 check refuses {check_refuses}"
            ));
        }
        if stricter && (crd_refuses || !check_refuses) {
            failures.push(format!("{rule} / {name}: no longer stricter than the CRD"));
        }
        // A CEL refusal reads the same in `check`.
        if let (Some(message), Err(errors)) = (refusals.first(), &checked)
            && !errors.iter().any(|e| e.message == *message)
        {
            failures.push(format!(
                "{rule} / {name}: CRD says {message:?}, check says {errors:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // H2C, HTTP2 (2), WSS (2) against TLS modes, sessionPersistence, the two
    // endpointSelector member cases: all refused by CEL, not by the structure.
    assert_eq!(refused_by_cel, 8);
}
