//! `GET` of a collection: the list answer, with `limit`/`continue` pagination and the
//! `resourceVersionMatch=Exact` check.

use std::net::TcpStream;

use serde_json::{Value, json};

use crate::{
    Shared,
    http::{self, Request},
    resources::RESOURCES,
    selector::Selection,
};

pub fn list(
    shared: &Shared,
    stream: &mut TcpStream,
    request: &Request,
    selection: &Selection<'_>,
) -> std::io::Result<()> {
    let world = shared.world();
    let exact = request.param("resourceVersionMatch") == Some("Exact");
    if let (true, Some(rv)) = (exact, request.param("resourceVersion")) {
        let rv: u64 = rv.parse().unwrap_or(0);
        if rv < world.expired_below || rv > world.rv {
            drop(world);
            let message = format!("too old resource version: {rv}");
            return http::respond(stream, 410, &http::status(410, "Expired", &message));
        }
    }
    let mut offset = 0;
    if let Some(token) = request.param("continue").filter(|t| !t.is_empty()) {
        let parsed = token
            .split_once(':')
            .and_then(|(rv, at)| Some((rv.parse::<u64>().ok()?, at.parse::<usize>().ok()?)));
        match parsed {
            Some((rv, at)) if rv == world.rv => offset = at,
            _ => {
                drop(world);
                let message = "The provided continue parameter is too old to display a consistent \
                               list result. You can start a new list without the continue parameter.";
                return http::respond(stream, 410, &http::status(410, "Expired", message));
            }
        }
    }
    let items: Vec<Value> = (world.objects.iter())
        .filter(|(key, object)| selection.matches(key.0, object))
        .map(|(_, object)| selection.shape(object))
        .collect();
    let limit = request
        .param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let end = limit.map_or(items.len(), |l| (offset + l).min(items.len()));
    let mut metadata = json!({"resourceVersion": world.rv.to_string()});
    if end < items.len() {
        metadata["continue"] = json!(format!("{}:{end}", world.rv));
    }
    let resource = &RESOURCES[selection.resource];
    let (api_version, kind) = if selection.metadata_only {
        ("meta.k8s.io/v1", "PartialObjectMetadataList".to_owned())
    } else {
        (resource.api_version, format!("{}List", resource.kind))
    };
    let body = json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": metadata,
        "items": items.get(offset.min(end)..end).unwrap_or_default(),
    });
    drop(world);
    http::respond(stream, 200, &body)
}
