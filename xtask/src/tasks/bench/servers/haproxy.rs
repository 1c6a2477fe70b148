//! HAProxy, the reference proxy: its config and process. One process serves the three
//! references, `mode tcp` and `mode http` (TLS upstream) and plaintext `mode tcp`
//! (splice), on three ports; the DNAT picks the port.

use super::{stop, wait_listening, write};
use crate::tasks::bench::report::Case;
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

/// Where HAProxy listens, by case.
#[derive(Debug, Clone, Copy)]
pub struct Listen {
    /// `mode tcp`, TLS to nginx.
    pub tcp: SocketAddr,
    /// `mode http`, TLS to nginx.
    pub http: SocketAddr,
    /// `mode tcp` with splice, plaintext to nginx.
    pub plain: SocketAddr,
}

/// Where HAProxy connects: nginx's TLS port and its plaintext port.
#[derive(Debug, Clone, Copy)]
pub struct Upstream {
    pub tls: SocketAddr,
    pub plain: SocketAddr,
}

impl Haproxy {
    /// Renders the config into `dir` (which holds `ca.crt`), checks it, starts HAProxy in
    /// the foreground in `ns` and waits until every listener accepts connections.
    pub fn start(
        haproxy: &Path,
        ns: &Netns,
        dir: &Path,
        listen: Listen,
        upstream: Upstream,
    ) -> Result<Haproxy> {
        let config = HAPROXY_TEMPLATE
            .replace("{{DIR}}", &dir.display().to_string())
            .replace("{{LISTEN_TCP}}", &listen.tcp.to_string())
            .replace("{{LISTEN_HTTP}}", &listen.http.to_string())
            .replace("{{LISTEN_PLAIN}}", &listen.plain.to_string())
            .replace("{{UPSTREAM}}", &upstream.tls.to_string())
            .replace("{{UPSTREAM_PLAIN}}", &upstream.plain.to_string());
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
        for addr in [listen.tcp, listen.http, listen.plain] {
            wait_listening(&mut child, ns, addr).context("HAProxy did not start")?;
        }
        Ok(Haproxy { child, listen })
    }

    /// Where the frontend of a HAProxy case listens (none for the other cases).
    pub fn addr(&self, case: Case) -> Option<SocketAddr> {
        match case {
            Case::HaproxyTcp => Some(self.listen.tcp),
            Case::HaproxyHttp => Some(self.listen.http),
            Case::HaproxyPlain => Some(self.listen.plain),
            _ => None,
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
