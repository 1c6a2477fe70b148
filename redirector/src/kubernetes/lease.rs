//! Leader election among the agents of a cluster with a `coordination.k8s.io/v1` Lease,
//! so that exactly one of them writes XBackend status (`status.rs`).
//!
//! The rules are client-go's `leaderelection` with a `LeaseLock`:
//! - a candidate takes the Lease when it does not exist (create), when nobody holds it
//!   (`holderIdentity` empty: its holder released it), or when the record has not changed
//!   for `leaseDurationSeconds` *as measured on this agent's clock* since it first saw
//!   that record (so clock skew between nodes cannot make a live holder look expired);
//! - every write is a create or an update carrying the `resourceVersion` that was read:
//!   of two agents racing for the same Lease, the API server accepts one and answers the
//!   other 409 Conflict, so two agents never both believe they won;
//! - the holder renews every [`LeaseConfig::renew_period`] and steps down by itself when
//!   it has not renewed for [`LeaseConfig::renew_deadline`], which is shorter than the
//!   lease duration: a holder cut off from the API server stops writing before anybody
//!   else may take over;
//! - on shutdown the holder releases the Lease (empty `holderIdentity`, duration 1 s), so
//!   the next candidate takes over at its next poll instead of after an expiry.
//!
//! Candidates poll (one GET per [`LeaseConfig::retry_period`], jittered): the RBAC grants
//! get/update on this one Lease and no list/watch. With N nodes that is N/5 GETs per
//! second on one small object; a cluster with thousands of nodes may prefer a watch.

use std::{
    hash::{BuildHasher, Hasher},
    time::Duration,
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};
use tokio::{sync::watch, task::JoinHandle, time::Instant};
use tokio_util::sync::CancellationToken;

/// `--lease-namespace` default: the agent's own namespace in `deploy/`.
pub const DEFAULT_NAMESPACE: &str = "redirector-system";
/// The Lease's name (the RBAC Role in `deploy/` grants get/update on this name only).
pub const LEASE_NAME: &str = "redirector-status-writer";

/// Timing and identity of one candidate.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// `holderIdentity`: `node/random`, one per agent (two run on a node during an
    /// upgrade).
    pub identity: String,
    /// `leaseDurationSeconds`: how long others wait after the last renewal they saw.
    pub lease_duration: Duration,
    /// How often the holder renews.
    pub renew_period: Duration,
    /// The holder steps down when it has not renewed for this long (< lease_duration).
    pub renew_deadline: Duration,
    /// How often a candidate looks at the Lease (plus up to 20 % jitter).
    pub retry_period: Duration,
    /// Longest wait for one API request.
    pub request_timeout: Duration,
}

impl LeaseConfig {
    /// The defaults: 15 s lease, renewed every 5 s, given up after 10 s without a
    /// renewal; candidates look every 5 s.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: LEASE_NAME.to_owned(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_period: Duration::from_secs(5),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// Runs the election until `shutdown`, then releases the Lease if held.
///
/// The receiver says whether this agent leads *now*: it turns `false` before the Lease
/// is released, when a renewal is refused (someone else holds it), and when renewals
/// have failed for `renew_deadline`. The task ends after the release.
pub fn spawn(
    client: Client,
    config: LeaseConfig,
    shutdown: CancellationToken,
) -> (watch::Receiver<bool>, JoinHandle<()>) {
    let (leading_tx, leading_rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        let mut elector = Elector::new(client, config);
        elector.run(&leading_tx, &shutdown).await;
        leading_tx.send_replace(false);
        elector.release().await;
    });
    (leading_rx, task)
}

/// What the last attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// This agent holds the Lease (just acquired or renewed).
    Held,
    /// Someone else holds it and it has not expired, or a race for it was lost.
    Other,
}

struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The last record seen and when (this agent's clock) it was first seen.
    observed: Option<(LeaseSpec, Instant)>,
    leading: bool,
    /// The last successful acquisition or renewal.
    renewed: Option<Instant>,
    /// The holder last logged, so that a change of leader is logged once.
    logged_holder: Option<String>,
    /// When the last error was logged (at most one warning per 30 s).
    logged_error: Option<Instant>,
}

impl Elector {
    fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
            leading: false,
            renewed: None,
            logged_holder: None,
            logged_error: None,
        }
    }

    async fn run(&mut self, leading: &watch::Sender<bool>, shutdown: &CancellationToken) {
        tracing::info!(
            lease = %format!("{}/{}", self.config.namespace, self.config.name),
            identity = %self.config.identity,
            "status writer election: candidate"
        );
        loop {
            let attempt = tokio::select! {
                () = shutdown.cancelled() => return,
                attempt = tokio::time::timeout(self.config.request_timeout * 2, self.try_acquire_or_renew()) => {
                    attempt.unwrap_or_else(|_| Err("the API server did not answer in time".to_owned()))
                }
            };
            let now = Instant::now();
            match attempt {
                Ok(Attempt::Held) => {
                    self.renewed = Some(now);
                    if !self.leading {
                        self.leading = true;
                        tracing::info!(identity = %self.config.identity, "status writer election: this agent leads and writes XBackend status");
                        leading.send_replace(true);
                    }
                }
                Ok(Attempt::Other) => self.step_down(leading, "another agent holds the Lease"),
                Err(error) => {
                    let quiet = self
                        .logged_error
                        .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(30));
                    if quiet {
                        self.logged_error = Some(now);
                        tracing::warn!(%error, "status writer election: reading or writing the Lease failed");
                    }
                    let overdue = self
                        .renewed
                        .is_none_or(|at| now.duration_since(at) >= self.config.renew_deadline);
                    if self.leading && overdue {
                        self.step_down(leading, "the Lease could not be renewed in time");
                    }
                }
            }
            let period = if self.leading {
                self.config.renew_period
            } else {
                jittered(self.config.retry_period)
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
        }
    }

    fn step_down(&mut self, leading: &watch::Sender<bool>, why: &str) {
        if self.leading {
            self.leading = false;
            tracing::warn!(
                reason = why,
                "status writer election: this agent no longer leads"
            );
            leading.send_replace(false);
        }
    }

    /// One round of client-go's `tryAcquireOrRenew`.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, String> {
        let now = MicroTime(Timestamp::now());
        let duration = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let existing = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| e.to_string())?;
        let Some(existing) = existing else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(created.spec.unwrap_or_default());
                    Ok(Attempt::Held)
                }
                // Created by another candidate in between.
                Err(e) if is_conflict(&e) => Ok(Attempt::Other),
                Err(e) => Err(e.to_string()),
            };
        };
        let spec = existing.spec.clone().unwrap_or_default();
        let observed_at = self.observe(spec.clone());
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        self.log_holder(holder);
        let ours = holder == Some(self.config.identity.as_str());
        if let Some(holder) = holder
            && !ours
        {
            let seconds = spec.lease_duration_seconds.unwrap_or(duration);
            let lasts = Duration::from_secs(u64::try_from(seconds.max(1)).unwrap_or(1));
            if Instant::now() < observed_at + lasts {
                return Ok(Attempt::Other);
            }
            tracing::info!(%holder, "status writer election: the Lease expired, taking it over");
        }
        let mut next = spec.clone();
        next.holder_identity = Some(self.config.identity.clone());
        next.lease_duration_seconds = Some(duration);
        next.renew_time = Some(now.clone());
        if !ours {
            next.acquire_time = Some(now);
            next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        let mut lease = existing;
        lease.spec = Some(next);
        // metadata.resourceVersion is the one just read: a concurrent writer makes this 409.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observe(updated.spec.unwrap_or_default());
                Ok(Attempt::Held)
            }
            Err(e) if is_conflict(&e) => Ok(Attempt::Other),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Records `spec` as seen; returns when this record was first seen.
    fn observe(&mut self, spec: LeaseSpec) -> Instant {
        match &self.observed {
            Some((known, at)) if *known == spec => *at,
            _ => {
                let now = Instant::now();
                self.observed = Some((spec, now));
                now
            }
        }
    }

    fn log_holder(&mut self, holder: Option<&str>) {
        if self.logged_holder.as_deref() != holder {
            self.logged_holder = holder.map(str::to_owned);
            if let Some(holder) = holder
                && holder != self.config.identity
            {
                tracing::info!(%holder, "status writer election: another agent writes XBackend status");
            }
        }
    }

    /// Gives the Lease up if this agent holds it, so a candidate takes over at once.
    async fn release(&mut self) {
        if !self.leading {
            return;
        }
        self.leading = false;
        let released = tokio::time::timeout(self.config.request_timeout, self.try_release()).await;
        match released {
            Ok(Ok(true)) => tracing::info!("status writer election: Lease released"),
            Ok(Ok(false)) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "status writer election: releasing the Lease failed; it expires instead");
            }
            Err(_) => tracing::warn!(
                "status writer election: releasing the Lease timed out; it expires instead"
            ),
        }
    }

    async fn try_release(&self) -> Result<bool, String> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(false);
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(false);
        }
        let now = MicroTime(Timestamp::now());
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now.clone());
        spec.acquire_time = Some(now);
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            // Taken over meanwhile: nothing of ours to release.
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// 409: AlreadyExists on create, Conflict (stale resourceVersion) on update.
pub(super) fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// `period` plus up to 20 %, so that candidates started together do not poll together.
fn jittered(period: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let fraction = (random % 1000) as f64 / 1000.0;
    period.mul_f64(1.0 + 0.2 * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_a_fifth() {
        let period = Duration::from_secs(5);
        for _ in 0..100 {
            let jittered = jittered(period);
            assert!(
                jittered >= period && jittered <= period.mul_f64(1.2),
                "{jittered:?}"
            );
        }
    }

    #[test]
    fn the_holder_gives_up_before_anybody_may_take_over() {
        let config = LeaseConfig::new(DEFAULT_NAMESPACE, "node1");
        assert!(config.renew_period < config.renew_deadline);
        assert!(config.renew_deadline < config.lease_duration);
        assert_eq!(config.name, "redirector-status-writer");
    }
}
