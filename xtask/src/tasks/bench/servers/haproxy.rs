//! HAProxy, the reference proxy: its config and process. One process serves both
//! references, `mode tcp` and `mode http`, on two ports; the DNAT picks the port.

use super::{stop, wait_listening, write};
use crate::tasks::bench::report::Layer;
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use xtask::netlab::{ChildGuard, Netns, Stream};

const HAPROXY_TEMPLATE: &str = include_str!("../../../../../bench/haproxy.cfg.tmpl");

/// HAProxy in the node namespace; stopped on drop.
pub struct Haproxy {
    child: ChildGuard,
    listen: Listen,
}

/// Where HAProxy listens, by mode.
#[derive(Debug, Clone, Copy)]
pub struct Listen {
    pub tcp: SocketAddr,
    pub http: SocketAddr,
}

impl Haproxy {
    /// Renders the config into `dir` (which holds `ca.crt`), checks it, starts HAProxy in
    /// the foreground in `ns` and waits until both listeners accept connections.
    pub fn start(
        haproxy: &Path,
        ns: &Netns,
        dir: &Path,
        listen: Listen,
        upstream: SocketAddr,
    ) -> Result<Haproxy> {
        let config = HAPROXY_TEMPLATE
            .replace("{{DIR}}", &dir.display().to_string())
            .replace("{{LISTEN_TCP}}", &listen.tcp.to_string())
            .replace("{{LISTEN_HTTP}}", &listen.http.to_string())
            .replace("{{UPSTREAM}}", &upstream.to_string());
        let cfg = dir.join("haproxy.cfg");
        write(&cfg, &config, 0o644)?;
        crate::tasks::check_status(
            Command::new(haproxy)
                .arg("-c")
                .arg("-q")
                .arg("-f")
                .arg(&cfg),
        )
        .context("HAProxy rejects its config")?;
        let mut command = ns.exec(haproxy);
        command.arg("-db").arg("-f").arg(&cfg);
        let mut child = ChildGuard::spawn_watching("haproxy", &mut command, Stream::Stderr)?;
        for addr in [listen.tcp, listen.http] {
            wait_listening(&mut child, ns, addr).context("HAProxy did not start")?;
        }
        Ok(Haproxy { child, listen })
    }

    /// Where the mode of `layer` listens.
    pub fn addr(&self, layer: Layer) -> SocketAddr {
        match layer {
            Layer::Tcp => self.listen.tcp,
            Layer::Http => self.listen.http,
        }
    }

    /// `ip netns exec` execs, so the child is HAProxy itself (one process, one thread).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        stop(&mut self.child, "haproxy");
    }
}
