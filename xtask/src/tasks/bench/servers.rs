//! The processes and files the benchmark sets up around the agent: the test CA and
//! certificate, nginx (the external HTTPS service), HAProxy (the reference proxy) and the
//! DNAT that sends the pod to it.
//!
//! Each server is a guard: dropped, it stops its process by pid (SIGTERM, then SIGKILL),
//! so an error anywhere in the benchmark leaves nothing running.
//!
//! The pieces: [`pki`] (CA, certificate, Backend directory), [`nginx`], [`haproxy`],
//! [`dnat`], [`iperf3`] (the copy ceiling's server) and [`process`] (what /proc says about the servers and the agent); this module
//! keeps what the servers share: starting, waiting for a listener, stopping.

mod dnat;
mod haproxy;
mod iperf3;
mod nginx;
mod pki;
mod process;

use anyhow::{Context, Result, bail};
use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};
use xtask::netlab::{ChildGuard, Netns, Stream};

pub use dnat::Dnat;
pub use haproxy::{Haproxy, Listen, Upstream};
pub use iperf3::Iperf3Server;
pub use nginx::Nginx;
pub use pki::{BackendSpec, Pki, write_backend_dir};
pub use process::{
    MachineCpu, cpu_seconds, cpu_times, find_redirector, machine_cpu, passive_opens, threads,
};

/// The name the service is declared and served under.
pub const HOSTNAME: &str = "api.redirector.test";

/// How long nginx and HAProxy may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// SIGTERM, a few seconds to exit, then the guard's SIGKILL.
fn stop(child: &mut ChildGuard, label: &str) {
    if child.signal(libc::SIGTERM).is_ok()
        && !matches!(child.wait_timeout(Duration::from_secs(5)), Ok(Some(_)))
    {
        eprintln!("bench: {label} ignored SIGTERM for 5 s; killing it");
    }
}

/// Polls a TCP connect to `addr` from inside `ns` until it succeeds: the readiness signal
/// of a server that prints nothing when it is ready. Fails at once if the child exits.
fn wait_listening(child: &mut ChildGuard, ns: &Netns, addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = child.wait_timeout(Duration::ZERO)? {
            let said: Vec<String> = child
                .lines(Stream::Stderr)
                .into_iter()
                .chain(child.lines(Stream::Stdout))
                .filter(|l| !l.contains("[NOTICE]"))
                .collect();
            bail!("it exited ({status}): {}", said.join(" / "));
        }
        match connect_in_netns(ns, addr, Duration::from_millis(200)) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("{addr} not accepting after {START_TIMEOUT:?}")));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// One TCP connect to `addr` from a thread that has joined `ns` (the thread ends with it,
/// so this process never leaves its own namespace).
pub fn connect_in_netns(ns: &Netns, addr: SocketAddr, timeout: Duration) -> Result<()> {
    let path = Path::new("/run/netns").join(ns.name());
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> Result<()> {
                let file =
                    File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
                // SAFETY: setns(2) on a valid namespace fd; it only affects this thread.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    bail!(
                        "setns {}: {}",
                        path.display(),
                        std::io::Error::last_os_error()
                    );
                }
                TcpStream::connect_timeout(&addr, timeout)
                    .with_context(|| format!("connect {addr} in {}", ns.name()))?;
                Ok(())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the netns connect thread panicked"))?
    })
}

/// Sets sysctls inside `ns` (`key=value` pairs).
pub fn sysctl(ns: &Netns, settings: &[&str]) -> Result<()> {
    crate::tasks::check_status(ns.exec("sysctl").arg("-q").arg("-w").args(settings))
}

fn write(path: &Path, content: &str, mode: u32) -> Result<()> {
    std::fs::write(path, content).with_context(|| format!("cannot write {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", path.display()))
}
