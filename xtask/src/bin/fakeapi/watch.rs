//! `GET ...?watch=true`: the chunked event stream, from the current objects or replayed
//! from a resourceVersion, with bookmarks, timeouts and 410 for expired versions.

use std::{
    net::{Shutdown, TcpStream},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::{
    Shared,
    http::{self, Request},
    resources::RESOURCES,
    say,
    selector::Selection,
    world::GoneMode,
};

pub fn watch(
    shared: &Shared,
    stream: &mut TcpStream,
    request: &Request,
    selection: &Selection<'_>,
) -> std::io::Result<()> {
    let resource = &RESOURCES[selection.resource];
    let bookmarks = request.flag("allowWatchBookmarks");
    let timeout = request
        .param("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(1800);
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let bookmark = |rv: u64, initial_end: bool| {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"kind": resource.kind, "apiVersion": resource.api_version, "metadata": metadata})
    };
    let world = shared.world();
    let epoch = world.epoch;
    let from = match request
        .param("resourceVersion")
        .filter(|rv| !rv.is_empty() && *rv != "0")
    {
        None => None,
        Some(rv) => match rv.parse::<u64>() {
            Ok(rv) => Some(rv),
            Err(_) => {
                drop(world);
                let message = format!("invalid resourceVersion {rv:?}");
                return http::respond(stream, 400, &http::status(400, "BadRequest", &message));
            }
        },
    };
    if let Some(rv) = from
        && rv < world.oldest_resumable()
    {
        let message = format!(
            "too old resource version: {rv} ({})",
            world.oldest_resumable()
        );
        let mode = world.gone_mode;
        drop(world);
        say(&format!("expired {} rv={rv} {mode:?}", request.target()));
        let gone = http::status(410, "Expired", &message);
        return match mode {
            GoneMode::Http => http::respond(stream, 410, &gone),
            GoneMode::Event => {
                http::start_stream(stream)?;
                http::send_event(stream, "ERROR", &gone)?;
                http::end_stream(stream)
            }
        };
    }
    // Events to send, gathered under the lock and written without it.
    let mut pending: Vec<(&str, Value)> = Vec::new();
    let mut sent_rv = match from {
        Some(rv) => rv,
        None => {
            for (key, object) in &world.objects {
                if selection.matches(key.0, object) {
                    pending.push(("ADDED", selection.shape(object)));
                }
            }
            if request.flag("sendInitialEvents") {
                pending.push(("BOOKMARK", bookmark(world.rv, true)));
            }
            world.rv
        }
    };
    drop(world);
    http::start_stream(stream)?;
    loop {
        for (kind, object) in pending.drain(..) {
            http::send_event(stream, kind, &object)?;
        }
        let mut world = shared.world();
        while world.rv <= sent_rv && world.epoch == epoch && Instant::now() < deadline {
            world = shared
                .changed
                .wait_timeout(world, Duration::from_secs(1))
                .map(|(w, _)| w)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        if world.epoch != epoch {
            // `.gone` or `.down`: this stream ends.
            let expired = sent_rv < world.expired_below;
            let (mode, down) = (world.gone_mode, world.down);
            drop(world);
            if down.is_some() {
                let _ = stream.shutdown(Shutdown::Both);
                return Ok(());
            }
            if expired && mode == GoneMode::Event {
                let message = format!("too old resource version: {sent_rv}");
                http::send_event(stream, "ERROR", &http::status(410, "Expired", &message))?;
            }
            return http::end_stream(stream);
        }
        if Instant::now() >= deadline {
            drop(world);
            return http::end_stream(stream);
        }
        for event in world.history.iter().filter(|e| e.rv > sent_rv) {
            if selection.matches(event.resource, &event.object) {
                pending.push((event.kind, selection.shape(&event.object)));
            }
        }
        sent_rv = world.rv;
        if pending.is_empty() && bookmarks {
            pending.push(("BOOKMARK", bookmark(sent_rv, false)));
        }
    }
}
