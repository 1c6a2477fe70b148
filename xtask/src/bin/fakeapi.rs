//! `fakeapi ADDR DIR`: a Kubernetes API server for tests, speaking enough of the
//! list/watch protocol for kube-rs over plain HTTP (kubeconfig `server: http://ADDR`).
//!
//! State: every `*.json` file in DIR (one object, an array of objects, or a `List`),
//! read again every 50 ms. JSON because it is YAML that needs no YAML parser; tests
//! write YAML through `serde_yaml_ng` -> JSON. Every object change gets its own
//! resourceVersion and an `ADDED`/`MODIFIED`/`DELETED` event for open watches; the
//! server fills in `uid`, `resourceVersion`, `generation` and `creationTimestamp`, and
//! stores a Secret's `stringData` as base64 `data`. Write files atomically (rename): a file
//! that does not parse keeps its last version.
//!
//! Served: XBackends (`apis/gateway.networking.x-k8s.io/v1alpha1`), ConfigMaps, Secrets
//! and Pods (`api/v1`), Leases (`apis/coordination.k8s.io/v1`), all-namespaces and
//! namespaced collections and single objects:
//! - list: `{"kind":"XBackendList","metadata":{"resourceVersion":"N"},"items":[...]}`,
//!   with `limit`/`continue`, `fieldSelector` (`metadata.name`, `metadata.namespace`,
//!   `spec.nodeName` for pods, `=`, `==`, `!=`), `labelSelector`, and metadata-only
//!   answers when the client asks for `as=PartialObjectMetadataList`;
//! - watch (`?watch=true`): a chunked stream of `{"type":..,"object":..}` lines. Without
//!   `resourceVersion` (or `0`), `ADDED` for the current objects first; with one, the
//!   events after it replayed from history, then live ones. `BOOKMARK`s with
//!   `allowWatchBookmarks` whenever the resourceVersion moves without an event for this
//!   watch; `sendInitialEvents` ends the initial events with the `initial-events-end`
//!   bookmark; `timeoutSeconds` ends the stream;
//! - a too-old resourceVersion: `ERROR` event with code 410 (as API servers answer
//!   watches), or HTTP 410 (lists with `resourceVersionMatch=Exact`, an expired
//!   `continue`, and watches after `.gone` containing `http`);
//! - `PATCH .../NAME/status` (server-side apply of XBackend status): printed as a JSON
//!   line (`{"method":"PATCH",..,"code":200}`); the top-level fields of the body's
//!   `status` replace the stored ones (`status.parents` is an atomic list), a
//!   `metadata.resourceVersion` in the body is a precondition (409 `Conflict` when
//!   stale), and a change bumps the resourceVersion and sends `MODIFIED` (no generation
//!   change), as a real API server does. The answer and later reads show the status;
//!   it survives changes of the object's file;
//! - Leases (`apis/coordination.k8s.io/v1`, also any other resource above): `POST` to a
//!   namespaced collection creates (409 `AlreadyExists` if it exists), `PUT` to an
//!   object replaces it (404 if absent; 409 `Conflict` if the body's resourceVersion is
//!   not the current one, unconditional without one). Objects created this way are not
//!   removed by changes of the state files.
//!
//! Control files in DIR:
//! - `.gone` (consumed): every resourceVersion issued so far expires; open watches get a
//!   410 `ERROR` event (or, if the file says `http`, are closed and their next watch
//!   request gets HTTP 410);
//! - `.down` while present: the listener is closed and every open connection cut (or,
//!   if the file says `503`, every request is answered 503).
//!
//! Prints (stdout, one line each, for tests to wait on): `listening ADDR` once bound,
//! `list PATH?QUERY`, `watch PATH?QUERY`, `get PATH`, `event TYPE PLURAL NS/NAME rv=N`,
//! `create PATH/NAME rv=N [holder=H]`, `update PATH rv=N [holder=H]` (`holder=` for a
//! Lease: its `spec.holderIdentity`, `-` when released), `refused create|update PATH
//! REASON`, `gone rv=N mode=..`, `down ..`, `up`, `error ..`, and the PATCH JSON lines.

#[path = "fakeapi/http.rs"]
mod http;
#[path = "fakeapi/world.rs"]
mod world;

use std::{
    collections::BTreeMap,
    io::{ErrorKind, Write},
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    path::PathBuf,
    process::ExitCode,
    sync::{
        Arc, Condvar, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use http::Request;
use serde_json::{Value, json};
use world::{Down, GoneMode, RESOURCES, Term, World, WriteError};

/// How often the directory is read again.
const POLL: Duration = Duration::from_millis(50);

struct Shared {
    world: Mutex<World>,
    changed: Condvar,
    connections: Mutex<BTreeMap<u64, TcpStream>>,
    next_connection: AtomicU64,
}

impl Shared {
    fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cuts every open connection (the API server went away).
    fn cut_all(&self) {
        let connections = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        for stream in connections.values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, dir] = args.as_slice() else {
        eprintln!("usage: fakeapi ADDR DIR");
        return ExitCode::from(64);
    };
    let Ok(addr) = addr.parse::<SocketAddr>() else {
        eprintln!("fakeapi: {addr} is not IP:PORT");
        return ExitCode::from(64);
    };
    let shared = Arc::new(Shared {
        world: Mutex::new(World::new(&PathBuf::from(dir))),
        changed: Condvar::new(),
        connections: Mutex::new(BTreeMap::new()),
        next_connection: AtomicU64::new(0),
    });
    poll(&shared);
    let listener = match bind(addr) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("fakeapi: cannot bind {addr}: {error}");
            return ExitCode::from(2);
        }
    };
    let bound = listener.local_addr().unwrap_or(addr);
    say(&format!("listening {bound}"));
    std::thread::spawn({
        let shared = shared.clone();
        move || {
            loop {
                std::thread::sleep(POLL);
                poll(&shared);
            }
        }
    });
    accept(&shared, bound, listener);
    ExitCode::SUCCESS
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Reads the directory; wakes the watches if anything changed.
fn poll(shared: &Shared) {
    let (said, changed, down) = {
        let mut world = shared.world();
        let (said, changed) = world.poll();
        (said, changed, world.down)
    };
    for line in said {
        say(&line);
    }
    if changed {
        if down == Some(Down::Refuse) {
            shared.cut_all();
        }
        shared.changed.notify_all();
    }
}

/// Accepts connections forever; while `.down` says so, nothing listens at all.
fn accept(shared: &Arc<Shared>, addr: SocketAddr, listener: TcpListener) {
    let mut listener = Some(listener);
    loop {
        let refuse = shared.world().down == Some(Down::Refuse);
        if refuse {
            listener = None;
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let Some(open) = &listener else {
            match bind(addr) {
                Ok(l) => listener = Some(l),
                Err(error) => {
                    say(&format!("error bind {addr}: {error}"));
                    std::thread::sleep(POLL);
                }
            }
            continue;
        };
        match open.accept() {
            Ok((stream, _)) => {
                let shared = shared.clone();
                std::thread::spawn(move || connection(&shared, stream));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(error) => say(&format!("error accept: {error}")),
        }
    }
}

fn connection(shared: &Shared, stream: TcpStream) {
    let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
    if let Ok(clone) = stream.try_clone() {
        let mut connections = shared.connections.lock().unwrap_or_else(|e| e.into_inner());
        connections.insert(id, clone);
    }
    let _ = handle(shared, stream);
    let mut connections = shared.connections.lock().unwrap_or_else(|e| e.into_inner());
    connections.remove(&id);
}

fn handle(shared: &Shared, mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    let request = Request::read(&stream)?;
    if shared.world().down == Some(Down::Unavailable) {
        say(&format!("unavailable {}", request.target()));
        let body = http::status(503, "ServiceUnavailable", "the fake API server is down");
        return http::respond(&mut stream, 503, &body);
    }
    let segments: Vec<&str> = request.path.trim_matches('/').split('/').collect();
    for (index, resource) in RESOURCES.iter().enumerate() {
        let prefix: Vec<&str> = resource.prefix.split('/').collect();
        let Some(rest) = segments.strip_prefix(prefix.as_slice()) else {
            continue;
        };
        let plural = resource.plural;
        let method = request.method.as_str();
        return match (method, rest) {
            ("GET", [p]) if *p == plural => collection(shared, &mut stream, &request, index, None),
            ("GET", ["namespaces", ns, p]) if *p == plural => {
                collection(shared, &mut stream, &request, index, Some(ns))
            }
            ("GET", ["namespaces", ns, p, name]) if *p == plural => {
                say(&format!("get {}", request.target()));
                let key = (index, (*ns).to_owned(), (*name).to_owned());
                let object = shared.world().objects.get(&key).cloned();
                match object {
                    Some(object) => http::respond(&mut stream, 200, &object),
                    None => not_found(&mut stream, plural, name),
                }
            }
            ("POST", ["namespaces", ns, p]) if *p == plural => {
                create(shared, &mut stream, &request, index, ns)
            }
            ("PUT", ["namespaces", ns, p, name]) if *p == plural => {
                update(shared, &mut stream, &request, (index, ns, name))
            }
            ("PATCH", ["namespaces", ns, p, name, "status"]) if *p == plural => {
                patch_status(shared, &mut stream, &request, (index, ns, name))
            }
            _ => continue,
        };
    }
    say(&format!("unknown {} {}", request.method, request.target()));
    let body = http::status(
        404,
        "NotFound",
        "the server could not find the requested resource",
    );
    http::respond(&mut stream, 404, &body)
}

fn not_found(stream: &mut TcpStream, plural: &str, name: &str) -> std::io::Result<()> {
    let message = format!("{plural} \"{name}\" not found");
    http::respond(stream, 404, &http::status(404, "NotFound", &message))
}

/// What a list or watch request selects.
struct Selection<'a> {
    resource: usize,
    namespace: Option<&'a str>,
    fields: Vec<Term>,
    labels: Vec<Term>,
    metadata_only: bool,
}

impl Selection<'_> {
    fn matches(&self, resource: usize, object: &Value) -> bool {
        resource == self.resource
            && self
                .namespace
                .is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns))
            && world::matches_fields(object, &self.fields)
            && world::matches_labels(object, &self.labels)
    }

    /// The object as this client asked for it.
    fn shape(&self, object: &Value) -> Value {
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

fn collection(
    shared: &Shared,
    stream: &mut TcpStream,
    request: &Request,
    resource: usize,
    namespace: Option<&str>,
) -> std::io::Result<()> {
    let fields = world::parse_selector(request.param("fieldSelector").unwrap_or(""));
    let allowed = RESOURCES[resource].fields;
    for term in &fields {
        let (Term::Equals(name, _) | Term::NotEquals(name, _)) = term else {
            let message = format!("invalid field selector term {term:?}");
            return http::respond(stream, 400, &http::status(400, "BadRequest", &message));
        };
        if !(name == "metadata.name"
            || name == "metadata.namespace"
            || allowed.contains(&name.as_str()))
        {
            let message = format!("field label not supported: {name}");
            return http::respond(stream, 400, &http::status(400, "BadRequest", &message));
        }
    }
    let accept = request.headers.get("accept").map_or("", String::as_str);
    let selection = Selection {
        resource,
        namespace,
        fields,
        labels: world::parse_selector(request.param("labelSelector").unwrap_or("")),
        metadata_only: accept.contains("as=PartialObjectMetadata"),
    };
    if request.flag("watch") {
        say(&format!("watch {}", request.target()));
        watch(shared, stream, request, &selection)
    } else {
        say(&format!("list {}", request.target()));
        list(shared, stream, request, &selection)
    }
}

fn list(
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

fn watch(
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
fn create(
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
fn update(
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

/// `PATCH .../status`: applied to the stored object (see [`world::World::patch_status`])
/// and printed as a JSON line with the answer's `code`.
fn patch_status(
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

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
