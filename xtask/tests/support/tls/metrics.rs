//! Reading the agent's `/metrics` (Prometheus text) from inside the node.

use std::time::{Duration, Instant};

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
pub fn sample(metrics: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (label_set, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        let all = labels.iter().all(|(key, wanted)| {
            label_set
                .split(',')
                .any(|pair| pair == format!("{key}=\"{wanted}\""))
        });
        all.then(|| value.trim().parse().ok()).flatten()
    })
}

/// Polls `/metrics` until `name{labels}` reaches `at_least` (the agent counts a refusal
/// right after closing the client, so the client may see the close first); returns the
/// last text read either way.
pub fn wait_for_sample(node: &Netns, name: &str, labels: &[(&str, &str)], at_least: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = metrics(node);
        let reached = sample(&text, name, labels).is_some_and(|v| v >= at_least);
        if reached || Instant::now() >= deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
