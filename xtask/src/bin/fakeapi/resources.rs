//! The resource types the fake API server serves, and where each lives in the URL space.

/// A resource type the server knows.
pub struct Resource {
    /// `api/v1` or `apis/GROUP/VERSION`.
    pub prefix: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub api_version: &'static str,
    /// Field selectors the real API server accepts for it (besides metadata.*).
    pub fields: &'static [&'static str],
    /// Cluster-scoped: its objects have no namespace (stored under "").
    pub cluster: bool,
}

pub const RESOURCES: [Resource; 10] = [
    Resource {
        prefix: "apis/gateway.networking.x-k8s.io/v1alpha1",
        plural: "xbackends",
        kind: "XBackend",
        api_version: "gateway.networking.x-k8s.io/v1alpha1",
        fields: &[],
        cluster: false,
    },
    Resource {
        prefix: "apis/policy.redirector.dev/v1alpha1",
        plural: "backendpolicies",
        kind: "BackendPolicy",
        api_version: "policy.redirector.dev/v1alpha1",
        fields: &[],
        cluster: false,
    },
    Resource {
        prefix: "api/v1",
        plural: "configmaps",
        kind: "ConfigMap",
        api_version: "v1",
        fields: &[],
        cluster: false,
    },
    Resource {
        prefix: "api/v1",
        plural: "secrets",
        kind: "Secret",
        api_version: "v1",
        fields: &["type"],
        cluster: false,
    },
    Resource {
        prefix: "api/v1",
        plural: "pods",
        kind: "Pod",
        api_version: "v1",
        fields: &["spec.nodeName", "status.phase", "spec.serviceAccountName"],
        cluster: false,
    },
    Resource {
        prefix: "apis/coordination.k8s.io/v1",
        plural: "leases",
        kind: "Lease",
        api_version: "coordination.k8s.io/v1",
        fields: &[],
        cluster: false,
    },
    Resource {
        prefix: "api/v1",
        plural: "namespaces",
        kind: "Namespace",
        api_version: "v1",
        fields: &["status.phase"],
        cluster: true,
    },
    Resource {
        prefix: "api/v1",
        plural: "nodes",
        kind: "Node",
        api_version: "v1",
        fields: &["spec.unschedulable"],
        cluster: true,
    },
    Resource {
        prefix: "apis/networking.k8s.io/v1",
        plural: "servicecidrs",
        kind: "ServiceCIDR",
        api_version: "networking.k8s.io/v1",
        fields: &[],
        cluster: true,
    },
    // The agent reads the XBackend CRD to write status in its shape; tests put one in
    // the state like any object (`redirector crd` as JSON).
    Resource {
        prefix: "apis/apiextensions.k8s.io/v1",
        plural: "customresourcedefinitions",
        kind: "CustomResourceDefinition",
        api_version: "apiextensions.k8s.io/v1",
        fields: &[],
        cluster: true,
    },
];
