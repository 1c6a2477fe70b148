//! Writes through the API: `POST` (create), `PUT` (update) and `PATCH .../status`, their
//! request-log lines, and refusals as the API server answers them.

use std::net::TcpStream;

use serde_json::{Value, json};

use crate::{
    Shared,
    http::{self, Request},
    resources::RESOURCES,
    routes::not_found,
    say,
    world::WriteError,
};

/// The request body as JSON (or as a JSON string when it is not JSON).
fn body_json(request: &Request) -> Value {
    serde_json::from_slice(&request.body)
        .unwrap_or_else(|_| json!(String::from_utf8_lossy(&request.body)))
}

/// A refused write as the API server answers it.
fn refuse(
    stream: &mut TcpStream,
    error: &WriteError,
    plural: &str,
    name: &str,
) -> std::io::Result<()> {
    match error {
        WriteError::NotFound => not_found(stream, plural, name),
        WriteError::AlreadyExists => {
            let message = format!("{plural} \"{name}\" already exists");
            http::respond(stream, 409, &http::status(409, "AlreadyExists", &message))
        }
        WriteError::Conflict { sent, current } => {
            let message = format!(
                "Operation cannot be fulfilled on {plural} \"{name}\": the object has been \
                 modified; please apply your changes to the latest version and try again \
                 (resourceVersion {sent}, current {current})"
            );
            http::respond(stream, 409, &http::status(409, "Conflict", &message))
        }
        WriteError::BadRequest(message) => {
            http::respond(stream, 400, &http::status(400, "BadRequest", message))
        }
    }
}

/// What a write request is about, for the request log: a Lease's holder (`-` when
/// nobody holds it).
fn detail(object: &Value) -> String {
    if object["kind"] != "Lease" {
        return String::new();
    }
    match object["spec"]["holderIdentity"].as_str() {
        Some(holder) if !holder.is_empty() => format!(" holder={holder}"),
        _ => " holder=-".to_owned(),
    }
}

/// `POST` (create). Prints `create PATH/NAME rv=N [holder=H]`, or
/// `refused create PATH/NAME ..` with the reason.
pub fn create(
    shared: &Shared,
    stream: &mut TcpStream,
    request: &Request,
    resource: usize,
    namespace: &str,
) -> std::io::Result<()> {
    let body = body_json(request);
    let name = body["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let path = format!("{}/{name}", request.path);
    let created = shared.world().create(resource, namespace, body.clone());
    match created {
        Ok((object, event)) => {
            let rv = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
            say(&format!("create {path} rv={rv}{}", detail(&object)));
            say(&event);
            shared.changed.notify_all();
            http::respond(stream, 201, &object)
        }
        Err(error) => {
            say(&format!("refused create {path} {error:?}{}", detail(&body)));
            refuse(stream, &error, RESOURCES[resource].plural, &name)
        }
    }
}

/// `PUT` (update, with the resourceVersion as precondition). Prints
/// `update PATH rv=N [holder=H]`, or `refused update PATH ..` with the reason.
pub fn update(
    shared: &Shared,
    stream: &mut TcpStream,
    request: &Request,
    (resource, namespace, name): (usize, &str, &str),
) -> std::io::Result<()> {
    let body = body_json(request);
    let key = (resource, namespace.to_owned(), name.to_owned());
    let updated = shared.world().update(&key, body.clone());
    match updated {
        Ok((object, event)) => {
            let rv = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
            say(&format!(
                "update {} rv={rv}{}",
                request.path,
                detail(&object)
            ));
            say(&event);
            shared.changed.notify_all();
            http::respond(stream, 200, &object)
        }
        Err(error) => {
            say(&format!(
                "refused update {} {error:?}{}",
                request.path,
                detail(&body)
            ));
            refuse(stream, &error, RESOURCES[resource].plural, name)
        }
    }
}

/// `PATCH .../status`: applied to the stored object (see
/// [`crate::world::World::patch_status`]) and printed as a JSON line with the answer's `code`.
pub fn patch_status(
    shared: &Shared,
    stream: &mut TcpStream,
    request: &Request,
    (resource, namespace, name): (usize, &str, &str),
) -> std::io::Result<()> {
    let body = body_json(request);
    let key = (resource, namespace.to_owned(), name.to_owned());
    let patched = shared.world().patch_status(&key, &body);
    let code = match &patched {
        Ok(_) => 200,
        Err(WriteError::NotFound) => 404,
        Err(WriteError::BadRequest(_)) => 400,
        Err(_) => 409,
    };
    let record = json!({
        "method": "PATCH",
        "path": request.path,
        "query": request.query,
        "contentType": request.headers.get("content-type"),
        "body": body,
        "code": code,
    });
    say(&record.to_string());
    match patched {
        Ok((object, event)) => {
            if let Some(event) = event {
                say(&event);
                shared.changed.notify_all();
            }
            http::respond(stream, 200, &object)
        }
        Err(error) => refuse(stream, &error, RESOURCES[resource].plural, name),
    }
}
