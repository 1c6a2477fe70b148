//! The rollout tests' connect loop: a pod connecting every few milliseconds while the
//! agent is replaced, every outcome counted (`netprobe connect-many`).

use std::time::Duration;

use serde_json::Value;
use xtask::netlab::{ChildGuard, NODE_EXT_V4, Topology};

use super::PROBE;

/// A running `netprobe connect-many TARGET COUNT EVERY_MS` in the pod.
pub struct ConnectLoop {
    child: ChildGuard,
    count: u32,
}

impl ConnectLoop {
    pub fn start(topology: &Topology, target: &str, count: u32, every_ms: u32) -> ConnectLoop {
        let (n, every) = (count.to_string(), every_ms.to_string());
        let mut command = topology.spawn_in_pod(PROBE, ["connect-many", target, &n, &every]);
        let child = ChildGuard::spawn("loop", &mut command).expect("connect loop");
        ConnectLoop { child, count }
    }

    /// Whether it is still connecting.
    pub fn running(&mut self) -> bool {
        matches!(self.child.wait_timeout(Duration::ZERO), Ok(None))
    }

    /// Waits for the end and asserts that every connect was served through a proxy: no
    /// refusal, no reset, none direct. Returns the counts.
    pub fn assert_all_proxied(mut self, timeout: Duration) -> Value {
        let done = self.child.finish(timeout).expect("loop finished");
        let line = done.stdout.last().cloned().unwrap_or_default();
        let counts: Value = serde_json::from_str(&line).expect("connect-many JSON");
        assert_eq!(counts["connects"], self.count, "{counts}");
        assert_eq!(counts["ok"], self.count, "no refusal, no reset: {counts}");
        let seen = counts["seen_by_server"]
            .as_object()
            .expect("seen_by_server");
        assert_eq!(
            seen.keys().collect::<Vec<_>>(),
            [&NODE_EXT_V4.to_string()],
            "every connection through a proxy, none direct: {counts}"
        );
        counts
    }
}

/// A connection opened through the agent about to be stopped, which sends only after
/// `send_after_ms`: it must be drained, not cut.
pub struct LongConnection {
    child: ChildGuard,
}

impl LongConnection {
    /// Connects to echo.redirector.test:8080 from the pod and waits until connected.
    pub fn open(topology: &Topology, send_after_ms: u32, timeout: Duration) -> LongConnection {
        let after = send_after_ms.to_string();
        let args = [
            "connect",
            "echo.redirector.test:8080",
            "-4",
            "--send",
            "hello",
            "--send-after-ms",
            &after,
        ];
        let mut child = ChildGuard::spawn("long", &mut topology.spawn_in_pod(PROBE, args))
            .expect("long connection");
        child
            .wait_for_line("connected", timeout)
            .expect("connected");
        LongConnection { child }
    }

    /// Waits for its answer and asserts it came through the proxy, whole.
    pub fn assert_answered(mut self, timeout: Duration) {
        let finished = self
            .child
            .finish(timeout)
            .expect("long connection finished");
        let reply = finished.stdout.last().cloned().unwrap_or_default();
        assert!(
            reply.contains(&format!("peer={NODE_EXT_V4}:")) && reply.contains("got=hello"),
            "{reply}"
        );
    }
}
