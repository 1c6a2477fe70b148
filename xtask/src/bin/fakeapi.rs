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
//! Served: XBackends (`apis/gateway.networking.x-k8s.io/v1alpha1`), BackendPolicies
//! (`apis/policy.redirector.dev/v1alpha1`), ConfigMaps, Secrets
//! and Pods (`api/v1`), Leases (`apis/coordination.k8s.io/v1`), all-namespaces and
//! namespaced collections and single objects; cluster-scoped Namespaces and Nodes
//! (`api/v1`) and ServiceCIDRs (`apis/networking.k8s.io/v1`), collections only (a file
//! `.no-servicecidrs` in DIR makes the last answer 404, as before Kubernetes 1.33) and
//! CustomResourceDefinitions (`apis/apiextensions.k8s.io/v1`, collections only):
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
//! - `PATCH .../NAME/status` (server-side apply of XBackend or BackendPolicy status):
//!   printed as a JSON line (`{"method":"PATCH",..,"code":200}`); the top-level fields
//!   of the body's `status` replace the stored ones (`status.parents` and
//!   `status.ancestors` are atomic lists), a
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
//! - `.no-PLURAL` while present: that resource is not served (404), e.g.
//!   `.no-servicecidrs` (before Kubernetes 1.33), `.no-backendpolicies` (no CRD);
//! - `.down` while present: the listener is closed and every open connection cut (or,
//!   if the file says `503`, every request is answered 503).
//!
//! Prints (stdout, one line each, for tests to wait on): `listening ADDR` once bound,
//! `list PATH?QUERY`, `watch PATH?QUERY`, `get PATH`, `event TYPE PLURAL NS/NAME rv=N`,
//! `create PATH/NAME rv=N [holder=H]`, `update PATH rv=N [holder=H]` (`holder=` for a
//! Lease: its `spec.holderIdentity`, `-` when released), `refused create|update PATH
//! REASON`, `gone rv=N mode=..`, `PLURAL served=BOOL`, `down ..`, `up`, `error ..`,
//! and the PATCH JSON lines.

#[path = "fakeapi/http.rs"]
mod http;
#[path = "fakeapi/list.rs"]
mod list;
#[path = "fakeapi/resources.rs"]
mod resources;
#[path = "fakeapi/routes.rs"]
mod routes;
#[path = "fakeapi/selector.rs"]
mod selector;
#[path = "fakeapi/watch.rs"]
mod watch;
#[path = "fakeapi/world.rs"]
mod world;
#[path = "fakeapi/writes.rs"]
mod writes;

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
    time::Duration,
};

use world::{Down, World};

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
    let _ = routes::handle(shared, stream);
    let mut connections = shared.connections.lock().unwrap_or_else(|e| e.into_inner());
    connections.remove(&id);
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
