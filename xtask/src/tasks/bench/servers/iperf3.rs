//! `iperf3 -s`, the far end of the copy ceiling: one TCP stream over the bench's own path.

use super::{stop, wait_listening};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::Path;
use xtask::netlab::{ChildGuard, Netns};

/// `iperf3 -s` bound to one address in `ns`; stopped on drop.
pub struct Iperf3Server {
    child: ChildGuard,
}

impl Iperf3Server {
    /// Starts the server and waits until it accepts connections (the probe connection
    /// sends no cookie: the server logs an error for it and goes on serving).
    pub fn start(iperf3: &Path, ns: &Netns, listen: SocketAddr) -> Result<Iperf3Server> {
        let mut command = ns.exec(iperf3);
        command
            .arg("-s")
            .arg("-B")
            .arg(listen.ip().to_string())
            .arg("-p")
            .arg(listen.port().to_string());
        let mut child = ChildGuard::spawn("iperf3-s", &mut command)?;
        wait_listening(&mut child, ns, listen).context("iperf3 -s did not start")?;
        Ok(Iperf3Server { child })
    }
}

impl Drop for Iperf3Server {
    fn drop(&mut self) {
        stop(&mut self.child, "iperf3 -s");
    }
}
