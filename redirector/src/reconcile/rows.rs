//! Rows of `/backends` (and `redirector status`): one per Backend, with its state.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use super::dns::DnsCache;
use crate::{
    backend::{ObjectKey, Problem},
    status::{BackendStatus, Rows},
    table::BackendTable,
};

/// What the rows of one published state are rendered from, when `/backends` is asked:
/// the table is shared with the proxy, only the resolution errors and problems are
/// copied (usually few).
pub(super) fn rows(table: Arc<BackendTable>, dns: &DnsCache, problems: &[Problem]) -> Rows {
    let resolve_errors: HashMap<String, String> = table
        .entries()
        .filter(|entry| entry.addresses.is_empty())
        .filter_map(|entry| {
            let hostname = &entry.backend.hostname;
            let error = dns.last_error(hostname)?;
            Some((hostname.clone(), error.to_owned()))
        })
        .collect();
    let problems = problems.to_vec();
    Arc::new(move || statuses(&table, &resolve_errors, &problems))
}

/// Every Backend's state for `/backends`: the loaded ones from `table`, and objects
/// rejected without a last good version as `Invalid`.
fn statuses(
    table: &BackendTable,
    resolve_errors: &HashMap<String, String>,
    problems: &[Problem],
) -> Vec<BackendStatus> {
    let mut statuses: BTreeMap<ObjectKey, BackendStatus> = BTreeMap::new();
    for entry in table.entries() {
        let backend = &entry.backend;
        let contested = table.contested_by(&backend.key).map(|claimants| {
            format!("its id is claimed by {claimants} (the names hash alike): connections refused until one is renamed")
        });
        let policy = entry.policy.current();
        let unresolved = (policy.as_ref()).and_then(|p| {
            Some(format!(
                "BackendPolicy {}: {}",
                p.policy,
                p.credentials.as_ref().err()?
            ))
        });
        let (state, reason) = match (&entry.origination, entry.addresses.is_empty()) {
            _ if contested.is_some() => ("Contested", contested),
            (Err(error), _) => ("RefError", Some(error.to_string())),
            // Its requests are refused (503) until the Secret is there.
            _ if unresolved.is_some() => ("RefError", unresolved),
            (Ok(_), true) => ("Resolving", resolve_errors.get(&backend.hostname).cloned()),
            (Ok(_), false) => ("Ready", None),
        };
        let tls = backend.tls.as_ref().map_or("none", |tls| tls.mode.as_str());
        statuses.insert(
            backend.key.clone(),
            BackendStatus {
                name: backend.key.to_string(),
                state: state.to_owned(),
                reason,
                hostname: backend.hostname.clone(),
                port: backend.port,
                protocol: backend.protocol.as_str().to_owned(),
                tls: tls.to_owned(),
                addresses: entry.addresses.iter().map(ToString::to_string).collect(),
                virtual_addresses: (table.virtual_addresses_of(&backend.hostname))
                    .map(|(v4, v6)| vec![v4.to_string(), v6.to_string()])
                    .unwrap_or_default(),
                policy: policy.map(|p| p.policy.clone()),
                active_connections: 0,
                active_by_source_namespace: Default::default(),
            },
        );
    }
    for problem in problems {
        let Some(key) = problem.xbackend_key() else {
            continue;
        };
        let status = statuses
            .entry(key.clone())
            .or_insert_with(|| BackendStatus {
                name: key.to_string(),
                state: "Invalid".to_owned(),
                reason: None,
                hostname: String::new(),
                port: 0,
                protocol: String::new(),
                tls: String::new(),
                addresses: Vec::new(),
                virtual_addresses: Vec::new(),
                policy: None,
                active_connections: 0,
                active_by_source_namespace: Default::default(),
            });
        let what = problem.to_string();
        status.reason = Some(if status.state == "Invalid" {
            what
        } else {
            format!("last good version kept: {what}")
        });
    }
    statuses.into_values().collect()
}
