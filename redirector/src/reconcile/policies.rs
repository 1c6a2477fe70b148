//! BackendPolicies in force: attached to the Backends the reconciler keeps, and put in
//! one [`PolicySlot`] per Backend that every table shares, so a change (a rotated
//! Secret) reaches the next request of connections that are already open.

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::Arc,
};

use crate::{
    backend::{self, Backend, Catalog, ObjectKey},
    backend_policy::{BackendPolicy, KIND, PolicySlot, Rejection},
};

#[derive(Default)]
pub struct Policies {
    slots: HashMap<ObjectKey, Arc<PolicySlot>>,
    /// The last good version of every policy, by key.
    last_good: BTreeMap<ObjectKey, Arc<BackendPolicy>>,
    /// The file each of them came from.
    origins: BTreeMap<ObjectKey, PathBuf>,
    /// What the last attachment refused, for status.
    rejected: Vec<Rejection>,
}

impl Policies {
    /// Attaches `catalog`'s policies to `backends` and updates the slots. A policy that
    /// is now broken keeps its last good version: dropping it would open its Backend to
    /// every request (and send them without the key).
    pub fn apply(&mut self, catalog: &mut Catalog, backends: &BTreeMap<ObjectKey, Arc<Backend>>) {
        let mut next: BTreeMap<ObjectKey, Arc<BackendPolicy>> = (catalog.policies.iter())
            .map(|p| (ObjectKey::new(&p.namespace, &p.name), p.clone()))
            .collect();
        for problem in &catalog.problems {
            let broken: Vec<ObjectKey> = match problem.key_of(KIND) {
                Some(key) => vec![key],
                // A file that no longer parses: every policy it held.
                None if problem.object.is_none() => (self.origins.iter())
                    .filter(|(_, file)| **file == problem.file)
                    .map(|(key, _)| key.clone())
                    .collect(),
                None => Vec::new(),
            };
            for key in broken {
                if let (false, Some(previous)) = (next.contains_key(&key), self.last_good.get(&key))
                {
                    tracing::warn!(policy = %key, "keeping the last good version of this BackendPolicy");
                    if let Some(origin) = self.origins.get(&key) {
                        catalog.policy_origins.insert(key.clone(), origin.clone());
                    }
                    next.insert(key, previous.clone());
                }
            }
        }
        catalog.policies = next.values().cloned().collect();
        self.last_good = next;
        self.origins = catalog.policy_origins.clone();
        let attachment = backend::attach_policies(catalog, backends);
        for problem in backend::policy_problems(catalog, &attachment) {
            tracing::warn!("BackendPolicy not applied: {problem}");
        }
        self.rejected = attachment.rejected;
        self.slots.retain(|key, _| backends.contains_key(key));
        for key in backends.keys() {
            let found = (attachment.applied)
                .get(&(key.namespace.clone(), key.name.clone()))
                .cloned();
            if let Some(Err(error)) = found.as_ref().map(|a| &a.credentials) {
                // Said on every reload while it lasts: its requests all get 503.
                tracing::warn!(backend = %key, %error, "BackendPolicy credentials unresolved: requests to this Backend are refused (503)");
            }
            let label = found.as_ref().map(|a| a.policy.clone());
            if self.slot(key).set(found) {
                match label {
                    Some(policy) => tracing::info!(backend = %key, policy, "BackendPolicy applied"),
                    None => tracing::info!(backend = %key, "no BackendPolicy applies"),
                }
            }
        }
    }

    /// The policies applied (the last good version of a broken one), by key.
    pub fn in_force(&self) -> &BTreeMap<ObjectKey, Arc<BackendPolicy>> {
        &self.last_good
    }

    /// What the last attachment refused: policies not accepted, fields conflicted.
    pub fn rejected(&self) -> &[Rejection] {
        &self.rejected
    }

    /// The slot of `key`'s Backend (made empty on first use).
    pub fn slot(&mut self, key: &ObjectKey) -> Arc<PolicySlot> {
        self.slots.entry(key.clone()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::backend::{Problem, Protocol};
    use crate::backend_policy::Rule;

    fn backends() -> BTreeMap<ObjectKey, Arc<Backend>> {
        let key = ObjectKey::new("demo", "api");
        let backend = Backend {
            key: key.clone(),
            hostname: "api.example.test".into(),
            port: 80,
            protocol: Protocol::Http,
            tls: None,
        };
        BTreeMap::from([(key, Arc::new(backend))])
    }

    fn catalog(policy: bool, problem: Option<&str>) -> Catalog {
        let file = PathBuf::from("policies.yaml");
        let mut catalog = Catalog::default();
        if policy {
            catalog.policies.push(Arc::new(BackendPolicy {
                namespace: "demo".into(),
                name: "rules".into(),
                created: None,
                targets: vec!["api".into()],
                credentials: Vec::new(),
                rules: Some(vec![Rule::default()]),
                mcp_tools: None,
            }));
            let key = ObjectKey::new("demo", "rules");
            catalog.policy_origins.insert(key, file.clone());
        }
        if let Some(object) = problem {
            catalog.problems.push(Problem {
                file,
                object: (!object.is_empty()).then(|| object.to_owned()),
                field: None,
                message: "broken".into(),
            });
        }
        catalog
    }

    fn current(policies: &mut Policies) -> Option<String> {
        let key = ObjectKey::new("demo", "api");
        policies.slot(&key).current().map(|a| a.policy.clone())
    }

    #[test]
    fn a_broken_policy_keeps_its_last_good_version_a_removed_one_goes() {
        let backends = backends();
        let mut policies = Policies::default();
        policies.apply(&mut catalog(true, None), &backends);
        let applied = Some("demo/rules".to_owned());
        assert_eq!(current(&mut policies), applied);
        // The object no longer validates, then its whole file no longer parses.
        for problem in ["BackendPolicy demo/rules", ""] {
            policies.apply(&mut catalog(false, Some(problem)), &backends);
            assert_eq!(current(&mut policies), applied, "{problem:?}");
        }
        policies.apply(&mut catalog(false, None), &backends);
        assert_eq!(current(&mut policies), None);
    }
}
