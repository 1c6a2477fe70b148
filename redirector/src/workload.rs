//! Placeholder until the workload module lands: cgroup id -> the workload it is.

use std::sync::Arc;

/// Who made a connection or query.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Workload {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    pub cgroup: String,
}

impl Workload {
    pub fn source_namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }
}

#[derive(Default)]
pub struct Workloads {
    _placeholder: (),
}

impl Workloads {
    pub fn of(&self, cgroup_id: u64) -> Arc<Workload> {
        Arc::new(Workload {
            cgroup: cgroup_id.to_string(),
            ..Workload::default()
        })
    }
}
