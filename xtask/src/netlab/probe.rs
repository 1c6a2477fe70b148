//! Driving `netprobe` (the plain client and server) from tests and the demo.

use std::{path::Path, time::Duration};

use anyhow::{Context, Result};
use serde_json::Value;

use super::{ChildGuard, Netns, Topology};

/// How long a probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// A `netprobe serve` process.
pub struct ProbeServer {
    child: ChildGuard,
}

impl ProbeServer {
    /// Starts `netprobe serve ADDR` in `netns` and waits until it listens.
    pub fn start(probe: &Path, netns: &Netns, addr: &str) -> Result<ProbeServer> {
        let label = format!("server {addr}");
        let mut child = ChildGuard::spawn(&label, netns.exec(probe).args(["serve", addr]))?;
        child.wait_for_line("listening", PROBE_TIMEOUT)?;
        Ok(ProbeServer { child })
    }

    /// Start `netprobe serve-tls ADDR --cert CERT --key KEY` in `netns` and wait until it
    /// listens.
    pub fn start_tls(
        probe: &Path,
        netns: &Netns,
        addr: &str,
        cert: &Path,
        key: &Path,
    ) -> Result<ProbeServer> {
        let label = format!("tls server {addr}");
        let mut command = netns.exec(probe);
        command
            .args(["serve-tls", addr, "--cert"])
            .arg(cert)
            .arg("--key")
            .arg(key);
        let mut child = ChildGuard::spawn(&label, &mut command)?;
        child.wait_for_line("listening", PROBE_TIMEOUT)?;
        Ok(ProbeServer { child })
    }

    /// The next line containing `needle` (waits for it).
    pub fn wait_for(&mut self, needle: &str) -> Result<String> {
        self.child.wait_for_line(needle, PROBE_TIMEOUT)
    }

    /// Every connection the server accepted so far (`accepted <peer>` lines).
    pub fn accepted(&self) -> Vec<String> {
        let lines = self.child.lines(super::Stream::Stdout);
        lines
            .into_iter()
            .filter(|l| l.starts_with("accepted"))
            .collect()
    }
}

/// What `netprobe connect` printed.
#[derive(Debug, Clone)]
pub struct Reply {
    pub json: Value,
}

impl Reply {
    pub fn ok(&self) -> bool {
        self.json["ok"] == true
    }

    /// `getpeername()` as the client saw it.
    pub fn peer(&self) -> &str {
        self.json["peer"].as_str().unwrap_or_default()
    }

    /// The server's answer: `peer=<client address as the server saw it> got=<text>`.
    pub fn reply(&self) -> &str {
        self.json["reply"].as_str().unwrap_or_default().trim_end()
    }

    /// The client address the server saw, from the reply.
    pub fn seen_by_server(&self) -> Option<&str> {
        self.reply().strip_prefix("peer=")?.split(' ').next()
    }
}

/// Runs `netprobe connect TARGET --send TEXT [extra..]` in the pod (netns and cgroup).
pub fn connect_from_pod(
    probe: &Path,
    topology: &Topology,
    target: &str,
    send: &str,
    extra: &[&str],
) -> Result<Reply> {
    let mut args = vec!["connect", target, "--send", send];
    args.extend_from_slice(extra);
    let mut client = ChildGuard::spawn("client", &mut topology.spawn_in_pod(probe, &args))?;
    let done = client.finish(PROBE_TIMEOUT)?;
    let line = done.stdout.first().cloned().unwrap_or_default();
    let json = serde_json::from_str(&line)
        .with_context(|| format!("netprobe printed {line:?}; stderr {:?}", done.stderr))?;
    Ok(Reply { json })
}
