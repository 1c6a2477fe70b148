//! The BackendPolicy CustomResourceDefinition (`redirector crd`, after the XBackend one;
//! alone with `--backend-policy`): the
//! fields `backend_policy::model` reads, the limits its validator applies where a schema
//! can say them, and Gateway API's policy status (`ancestors`, GEP-713).

use serde_json::{Value, json};

use super::builder::Schema;
use super::served_version;
use super::spec::{group, kind, object_name};
use super::status::{condition, parent_reference};
use crate::backend::constraints::{CONTROLLER_NAME, MAX_DNS_SUBDOMAIN};
use crate::backend_policy::MAX_TOOL_NAME;
use crate::backend_policy::model::{API_VERSION, KIND, TARGET_GROUP, TARGET_KIND};

/// Gateway API's limit on `status.ancestors`.
const MAX_ANCESTORS: usize = 16;
/// Limits that keep one object's per-request work small.
const MAX_TARGETS: usize = 16;
const MAX_CREDENTIALS: usize = 16;
const MAX_RULES: usize = 64;
const MAX_MATCHES: usize = 64;
const MAX_TOOLS: usize = 256;

pub fn crd() -> Value {
    let (group_name, version) = API_VERSION.split_once('/').unwrap_or((API_VERSION, ""));
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("backendpolicies.{group_name}")},
        "spec": {
            "group": group_name,
            "names": {
                "kind": KIND,
                "listKind": format!("{KIND}List"),
                "plural": "backendpolicies",
                "singular": "backendpolicy",
            },
            "scope": "Namespaced",
            "versions": [served_version(version, root())],
        },
    })
}

fn root() -> Schema {
    Schema::object(
        "BackendPolicy sets headers from Secrets on the requests the node forwards to \
         XBackends over TLS it originates, and says which requests may reach them.",
        [
            (
                "apiVersion",
                Schema::string("Versioned schema of this object."),
            ),
            (
                "kind",
                Schema::string("REST resource this object represents."),
            ),
            ("metadata", Schema::object("", [])),
            ("spec", spec()),
            ("status", status()),
        ],
    )
    .required(&["spec"])
}

fn spec() -> Schema {
    let target = Schema::object(
        "An XBackend of the policy's namespace.",
        [
            (
                "group",
                group("Must be gateway.networking.x-k8s.io.").enumeration(&[TARGET_GROUP]),
            ),
            (
                "kind",
                kind("Must be XBackend.").enumeration(&[TARGET_KIND]),
            ),
            ("name", object_name()),
        ],
    )
    .required(&["group", "kind", "name"]);
    let targets = Schema::array("The XBackends this policy applies to.", target)
        .max_items(MAX_TARGETS)
        .atomic();
    let credentials = Schema::array(
        "Headers set on every request, replacing what the client sent under the name. \
         Only on Backends the proxy originates TLS to and parses HTTP for.",
        credential(),
    )
    .max_items(MAX_CREDENTIALS)
    .atomic();
    let rules = Schema::array(
        "Absent: every request allowed. Else a request must match one rule (403).",
        rule(),
    )
    .max_items(MAX_RULES)
    .atomic();
    let mcp = Schema::object(
        "What clients of an MCP Backend may do (protocol MCP only).",
        [("tools", mcp_tools())],
    )
    .required(&["tools"]);
    Schema::object(
        "What the policy does.",
        [
            ("targetRefs", targets),
            ("credentials", credentials),
            ("rules", rules),
            ("mcp", mcp),
        ],
    )
    .required(&["targetRefs"])
}

fn mcp_tools() -> Schema {
    let name =
        Schema::string("A tool name, exactly as the server lists it.").length(1, MAX_TOOL_NAME);
    let allow = Schema::array(
        "The only tools tools/list shows and tools/call may name; a call of another gets \
         a JSON-RPC error from the proxy. Empty: no tool at all.",
        name,
    )
    .max_items(MAX_TOOLS)
    .atomic();
    Schema::object("MCP tools.", [("allow", allow)]).required(&["allow"])
}

fn credential() -> Schema {
    let secret_key_ref = Schema::object(
        "A key of a Secret of the policy's namespace.",
        [
            ("name", object_name()),
            (
                "key",
                Schema::string("Key in the Secret's data.").length(1, MAX_DNS_SUBDOMAIN),
            ),
        ],
    )
    .required(&["name", "key"]);
    let value_from = Schema::object(
        "Where the value comes from.",
        [("secretKeyRef", secret_key_ref)],
    )
    .required(&["secretKeyRef"]);
    Schema::object(
        "One header.",
        [
            (
                "header",
                Schema::string("HTTP field name (not Host, pseudo or hop-by-hop).")
                    .length(1, 256)
                    .pattern(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"),
            ),
            ("valueFrom", value_from),
            (
                "format",
                Schema::string("The value around the Secret's: {value} exactly once.")
                    .default("{value}")
                    .max_length(4096),
            ),
        ],
    )
    .required(&["header", "valueFrom"])
}

fn rule() -> Schema {
    let methods = Schema::array("Any of these methods.", Schema::string("").length(1, 32))
        .max_items(MAX_MATCHES)
        .atomic();
    let path = Schema::object(
        "PathPrefix matches whole segments (Gateway API); Exact the whole path.",
        [
            (
                "type",
                Schema::string("").enumeration(&["PathPrefix", "Exact"]),
            ),
            (
                "value",
                Schema::string("Starts with /.")
                    .length(1, 1024)
                    .pattern("^/"),
            ),
        ],
    )
    .required(&["type", "value"]);
    let paths = Schema::array("Any of these paths.", path)
        .max_items(MAX_MATCHES)
        .atomic();
    let names = |description: &str| {
        Schema::array(description, Schema::string("").length(1, MAX_DNS_SUBDOMAIN))
            .max_items(MAX_MATCHES)
            .atomic()
    };
    let sources = Schema::object(
        "Who may send: a workload matching either list.",
        [
            (
                "serviceAccounts",
                names("Service accounts of the policy's namespace."),
            ),
            (
                "cgroups",
                names("cgroup paths relative to --cgroup, as prefixes (hosts)."),
            ),
        ],
    );
    Schema::object(
        "Each condition present must match.",
        [("methods", methods), ("paths", paths), ("sources", sources)],
    )
}

fn status() -> Schema {
    let controller = Schema::string("The controller that wrote this entry.")
        .length(1, MAX_DNS_SUBDOMAIN)
        .pattern(CONTROLLER_NAME);
    let conditions = Schema::array("Accepted and ResolvedRefs.", condition()).list_map(&["type"]);
    let ancestor = Schema::object(
        "Status with respect to one ancestor (the targeted XBackend).",
        [
            ("ancestorRef", parent_reference()),
            ("controllerName", controller),
            ("conditions", conditions),
        ],
    )
    .required(&["ancestorRef", "controllerName"]);
    Schema::object(
        "Observed state, written by the agent (Kubernetes mode).",
        [(
            "ancestors",
            Schema::array("One entry per ancestor.", ancestor)
                .max_items(MAX_ANCESTORS)
                .atomic(),
        )],
    )
}
