//! Reading the agent's `/metrics` (Prometheus text) from inside the node.

use xtask::netlab::Netns;

/// The agent's `/metrics`, read from inside the node (admin address 127.0.0.1:15000).
pub fn metrics(node: &Netns) -> String {
    let out = crate::support::fixtures::admin_get(node, "/metrics");
    assert!(
        out.status.success(),
        "GET /metrics failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of the sample `name{labels..}` (other labels ignored) in Prometheus text.
pub use xtask::netlab::agent::metric_sample as sample;

/// Polls `/metrics` until `name{labels}` reaches `at_least` (the agent counts a refusal
/// right after closing the client, so the client may see the close first); returns the
/// last text read either way.
pub fn wait_for_sample(node: &Netns, name: &str, labels: &[(&str, &str)], at_least: f64) -> String {
    let reached = |text: &String| sample(text, name, labels).is_some_and(|v| v >= at_least);
    crate::support::poll(|| metrics(node), reached)
}
