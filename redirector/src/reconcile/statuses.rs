//! The Kubernetes status of what the reconciler holds, for the status writer: every
//! XBackend's and every BackendPolicy's, published only when it changed (the writer
//! wakes on each publication).

use tokio::sync::watch;

use super::Reconciler;
use crate::kubernetes::status::{ObjectStatus, PolicyStatus, object_statuses, policy_statuses};

/// Where the statuses go.
pub(super) struct Senders {
    pub(super) backends: watch::Sender<Vec<ObjectStatus>>,
    pub(super) policies: watch::Sender<Vec<PolicyStatus>>,
}

impl Reconciler {
    /// Publishes the statuses of the current catalog (`--kubernetes` only).
    pub(super) fn publish_statuses(&self) {
        let Some(senders) = &self.statuses else {
            return;
        };
        let backends = object_statuses(&self.catalog.generations, &self.catalog, |key| {
            self.backends
                .contains_key(key)
                .then(|| match self.originations.get(key) {
                    Some((_, Err(error))) => Err(error),
                    _ => Ok(()),
                })
        });
        send_changed(&senders.backends, backends);
        let (in_force, rejected) = (self.policies.in_force(), self.policies.rejected());
        let policies = policy_statuses(&self.catalog, in_force, rejected);
        send_changed(&senders.policies, policies);
    }
}

/// Publishes `value` on `sender` unless it holds it already.
fn send_changed<T: PartialEq>(sender: &watch::Sender<T>, value: T) {
    sender.send_if_modified(|current| {
        let changed = *current != value;
        if changed {
            *current = value;
        }
        changed
    });
}
