//! XBackends, BackendPolicies and the objects they reference -> [`Catalog`]s for the
//! reconciler.
//!
//! One task owns the state: the XBackend and BackendPolicy stores (each fed by its own
//! watch), and one watch per ConfigMap or Secret a Backend or policy references, started
//! and stopped as references come and go. After every change it rebuilds the catalog,
//! and sends it if it differs from the last one.
//!
//! A catalog is held back while a newly referenced object has not been fetched yet (so
//! a new TLS Backend does not start with its connections refused for want of a CA that
//! is one round trip away), but never longer than [`REF_SYNC_TIMEOUT`]: an object that
//! cannot be read (forbidden, or its watch failing) must not freeze every other update.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use kube::{
    Api, Client,
    api::DynamicObject,
    runtime::{
        reflector::{Store, store::Writer},
        watcher,
    },
};
use tokio::{sync::mpsc, time::Instant};
use tokio_util::sync::CancellationToken;

use super::{
    follow::follow,
    policies,
    refs::{self, Fetched, Payload},
    xbackends,
};
use crate::{
    backend::{Backend, Catalog, ObjectKey, ObjectRef, RefKind},
    backend_policy::BackendPolicy,
};

/// How long a catalog waits for a newly referenced ConfigMap or Secret.
pub const REF_SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// The watch of one referenced object.
struct RefWatch {
    id: u64,
    started: Instant,
    /// `None` until its first list completes.
    payload: Option<Payload>,
    /// Whether a warning said it was given up on (said once per watch).
    warned: bool,
    stop: CancellationToken,
}

struct State {
    client: Client,
    backends: Store<DynamicObject>,
    /// Set once the XBackends have been listed.
    backends_synced: bool,
    policies: Store<DynamicObject>,
    /// Set once the BackendPolicies have been listed (or found not served).
    policies_synced: bool,
    /// The last valid version of every BackendPolicy that still exists: the reconciler
    /// keeps it in force while the object is invalid, so its Secrets stay watched too.
    last_good_policies: BTreeMap<ObjectKey, Arc<BackendPolicy>>,
    /// The last valid version of every XBackend that still exists: the reconciler keeps
    /// it in force while the object is invalid, so its references stay watched too.
    last_good: BTreeMap<ObjectKey, Arc<Backend>>,
    watches: BTreeMap<ObjectRef, RefWatch>,
    next_id: u64,
    fetched: mpsc::UnboundedSender<Fetched>,
    stop: CancellationToken,
    sent: Option<Catalog>,
}

/// Follows XBackends and their references until `shutdown` (or until the receiver of
/// `catalogs` is gone).
pub(super) async fn run(
    client: Client,
    catalogs: mpsc::Sender<Catalog>,
    shutdown: CancellationToken,
) {
    // Everything started here stops with this task, whichever way it ends.
    let stop = shutdown.child_token();
    let _stop_all = stop.clone().drop_guard();
    let (backends_tx, mut backends_rx) = mpsc::unbounded_channel::<()>();
    let (policies_tx, mut policies_rx) = mpsc::unbounded_channel::<()>();
    let policy_writer = Writer::new(policies::api_resource());
    let (fetched_tx, mut fetched_rx) = mpsc::unbounded_channel();
    let resource = xbackends::api_resource();
    let writer = Writer::new(resource.clone());
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut state = State {
        client,
        backends: writer.as_reader(),
        backends_synced: false,
        policies: policy_writer.as_reader(),
        policies_synced: false,
        last_good_policies: BTreeMap::new(),
        last_good: BTreeMap::new(),
        watches: BTreeMap::new(),
        next_id: 0,
        fetched: fetched_tx,
        stop: stop.clone(),
        sent: None,
    };
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let start = || watcher(api.clone(), watcher::Config::default());
            let changed = |_: &Store<DynamicObject>| {
                let _ = backends_tx.send(());
            };
            follow("XBackends", start, writer, changed, stop).await;
        }
    });
    tokio::spawn(policies::run(
        state.client.clone(),
        policy_writer,
        policies_tx,
        stop.clone(),
    ));
    loop {
        let deadline = state.hold_until();
        tokio::select! {
            () = stop.cancelled() => return,
            Some(()) = backends_rx.recv() => state.backends_synced = true,
            Some(()) = policies_rx.recv() => state.policies_synced = true,
            Some(fetched) = fetched_rx.recv() => state.fetched(fetched),
            () = sleep_until(deadline) => {}
        }
        // Take in whatever else is queued: one catalog for a burst of events. A store's
        // first message says it is listed, whichever branch above took a message.
        while let Ok(()) = backends_rx.try_recv() {
            state.backends_synced = true;
        }
        while let Ok(()) = policies_rx.try_recv() {
            state.policies_synced = true;
        }
        while let Ok(fetched) = fetched_rx.try_recv() {
            state.fetched(fetched);
        }
        let Some(catalog) = state.update() else {
            continue;
        };
        tokio::select! {
            () = stop.cancelled() => return,
            sent = catalogs.send(catalog.clone()) => if sent.is_err() { return },
        }
        state.sent = Some(catalog);
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

impl State {
    fn fetched(&mut self, fetched: Fetched) {
        if let Some(watch) = self.watches.get_mut(&fetched.object)
            && watch.id == fetched.id
        {
            if watch.payload.is_none() {
                tracing::debug!(object = %fetched.object.key, kind = ?fetched.object.kind, "referenced object fetched");
            }
            watch.payload = Some(fetched.payload);
        }
    }

    /// Until when a catalog is being held back for a referenced object, if it is.
    fn hold_until(&self) -> Option<Instant> {
        let now = Instant::now();
        self.watches
            .values()
            .filter(|w| w.payload.is_none())
            .map(|w| w.started + REF_SYNC_TIMEOUT)
            .filter(|deadline| *deadline > now)
            .min()
    }

    /// The catalog to send now, if any: XBackends and BackendPolicies listed, no
    /// reference being waited for, and different from the last one sent.
    fn update(&mut self) -> Option<Catalog> {
        if !(self.backends_synced && self.policies_synced) {
            return None;
        }
        let mut catalog = self.build();
        self.add_policies(&mut catalog);
        let referenced = self.referenced(&catalog);
        self.watch_only(&referenced);
        if self.hold_until().is_some() {
            return None;
        }
        let catalog = self.with_payloads(catalog, &referenced);
        (self.sent.as_ref() != Some(&catalog)).then_some(catalog)
    }

    /// Backends, problems and origins from the XBackend store (no ConfigMaps or Secrets
    /// yet); updates the last good versions.
    fn build(&mut self) -> Catalog {
        let mut objects: Vec<_> = self.backends.state();
        objects.sort_by_key(|o| xbackends::key(o));
        let mut catalog = Catalog::default();
        let mut present = BTreeSet::new();
        for object in &objects {
            let key = xbackends::key(object);
            let generation = object.metadata.generation.unwrap_or(0);
            match xbackends::load(object) {
                Ok(loaded) => {
                    catalog.notices.extend(loaded.notices);
                    // An EndpointSelector Backend belongs to other controllers: no
                    // redirect, and no status (only objects with a generation get one).
                    let Some(backend) = loaded.backend else {
                        self.last_good.remove(&key);
                        continue;
                    };
                    catalog.generations.insert(key.clone(), generation);
                    let backend = Arc::new(backend);
                    catalog.origins.insert(key.clone(), xbackends::origin(&key));
                    self.last_good.insert(key.clone(), backend.clone());
                    catalog.backends.push(backend);
                }
                Err(problems) => {
                    // Even invalid, an EndpointSelector XBackend is other controllers'
                    // to judge in status; its problems are still logged.
                    if !xbackends::is_endpoint_selector(object) {
                        catalog.generations.insert(key.clone(), generation);
                    }
                    catalog.problems.extend(problems);
                }
            }
            present.insert(key);
        }
        self.last_good.retain(|key, _| present.contains(key));
        catalog
    }

    /// Every object referenced by a valid Backend or by the last good version of an
    /// invalid one.
    fn referenced(&self, catalog: &Catalog) -> BTreeSet<ObjectRef> {
        let valid: BTreeSet<&ObjectKey> = catalog.backends.iter().map(|b| &b.key).collect();
        let kept = (self.last_good.iter())
            .filter(|(key, _)| !valid.contains(key))
            .map(|(_, backend)| backend);
        let backend_refs = (catalog.backends.iter().chain(kept))
            .flat_map(|backend| xbackends::references(backend))
            .cloned();
        // Every policy kept in force is in `last_good_policies`, valid ones included.
        let policy_refs = (self.last_good_policies.values()).flat_map(|p| policies::references(p));
        backend_refs.chain(policy_refs).collect()
    }

    /// Policies, their problems and what their status is for, from the BackendPolicy
    /// store; updates their last good versions.
    fn add_policies(&mut self, catalog: &mut Catalog) {
        let mut objects: Vec<_> = self.policies.state();
        objects.sort_by_key(|o| xbackends::key(o));
        for object in &objects {
            let key = xbackends::key(object);
            catalog
                .policy_objects
                .insert(key.clone(), policies::observed(object));
            match policies::load(object) {
                Ok(policy) => {
                    let policy = Arc::new(policy);
                    (catalog.policy_origins).insert(key.clone(), policies::origin(&key));
                    self.last_good_policies.insert(key, policy.clone());
                    catalog.policies.push(policy);
                }
                Err(problems) => catalog.problems.extend(problems),
            }
        }
        let present = &catalog.policy_objects;
        self.last_good_policies
            .retain(|key, _| present.contains_key(key));
    }

    /// Starts the watches of new references and stops those no longer referenced.
    fn watch_only(&mut self, referenced: &BTreeSet<ObjectRef>) {
        self.watches.retain(|object, watch| {
            let keep = referenced.contains(object);
            if !keep {
                tracing::info!(object = %object.key, kind = ?object.kind, "no longer referenced: stopped watching it");
                watch.stop.cancel();
            }
            keep
        });
        for object in referenced {
            if self.watches.contains_key(object) {
                continue;
            }
            tracing::info!(object = %object.key, kind = ?object.kind, "referenced by a Backend: watching it");
            self.next_id += 1;
            let stop = self.stop.child_token();
            refs::spawn(
                self.client.clone(),
                self.next_id,
                object.clone(),
                self.fetched.clone(),
                stop.clone(),
            );
            let watch = RefWatch {
                id: self.next_id,
                started: Instant::now(),
                payload: None,
                warned: false,
                stop,
            };
            self.watches.insert(object.clone(), watch);
        }
    }

    /// Adds the content of every referenced object that exists.
    fn with_payloads(&mut self, mut catalog: Catalog, referenced: &BTreeSet<ObjectRef>) -> Catalog {
        for object in referenced {
            let Some(watch) = self.watches.get_mut(object) else {
                continue;
            };
            let key = object.key.clone();
            match (&watch.payload, object.kind) {
                (None, _) => {
                    if !watch.warned {
                        watch.warned = true;
                        tracing::warn!(
                            object = %key,
                            kind = ?object.kind,
                            timeout_s = REF_SYNC_TIMEOUT.as_secs(),
                            "referenced object not fetched in time: its Backends are refused until it is"
                        );
                    }
                }
                (Some(Payload::ConfigMap(data)), RefKind::ConfigMap) => {
                    catalog.config_maps.insert(key, data.clone());
                }
                (Some(Payload::Secret(data)), RefKind::Secret) => {
                    catalog.secrets.insert(key, data.clone());
                }
                (Some(_), _) => {}
            }
        }
        catalog
    }
}
