//! Looking at processes and namespaces from outside: the agent's memory (sampled, so the
//! peak of a run is seen), its descriptors, the connections a server holds, the agent's
//! `/metrics`, and a connect from inside a namespace.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use xtask::netlab::Netns;

/// Resident memory of a process (`/proc/<pid>/status`), as the scale bench reads it.
pub use crate::tasks::scale::inspect::{Memory, memory};

/// Open descriptors of a process.
pub fn fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// The pid of the `redirector` process whose command line names `pins` (our agent; a
/// concurrently running test's agent has other pins).
pub fn find_agent(pins: &Path) -> Result<u32> {
    let needle = pins.display().to_string();
    let entries = std::fs::read_dir("/proc").context("cannot list /proc")?;
    let pids: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "redirector")
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                String::from_utf8_lossy(&cmdline)
                    .split('\0')
                    .any(|arg| arg == needle)
            })
        })
        .collect();
    match pids[..] {
        [pid] => Ok(pid),
        _ => bail!("expected one redirector process with --bpffs {needle}, found {pids:?}"),
    }
}

/// ESTABLISHED IPv4 TCP connections whose local port is `port`, in the network
/// namespace of `pid` (`/proc/<pid>/net/tcp` shows that process's namespace).
pub fn established_on(pid: u32, port: u16) -> Option<usize> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).ok()?;
    let local = format!(":{port:04X}");
    Some(
        text.lines()
            .skip(1)
            .filter(|l| {
                let mut fields = l.split_whitespace();
                let addr = fields.nth(1).unwrap_or("");
                let state = fields.nth(1).unwrap_or("");
                addr.ends_with(&local) && state == "01"
            })
            .count(),
    )
}

/// Samples a process's `VmRSS` every 50 ms on a thread, keeping the largest.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    pub fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, peak) = (stop.clone(), peak.clone());
            std::thread::Builder::new()
                .name("rss-sampler".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(m) = memory(pid) {
                            peak.fetch_max(m.rss_kib, Ordering::Relaxed);
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                })
                .map_err(|e| eprintln!("bench-load: no RSS sampler: {e}"))
                .ok()
        };
        Sampler { stop, peak, thread }
    }

    /// The largest `VmRSS` seen so far, KiB.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs `f` on a thread that has joined `netns` (the thread ends with it, so this
/// process never leaves its own namespace).
fn in_netns<T: Send>(netns: &Netns, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let path = Path::new("/run/netns").join(netns.name());
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> Result<T> {
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
                f()
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the netns thread panicked"))?
    })
}

/// A TCP connect to `addr` from inside `netns`, with `timeout`.
pub fn connect_in(netns: &Netns, addr: SocketAddr, timeout: Duration) -> Result<()> {
    in_netns(netns, || {
        TcpStream::connect_timeout(&addr, timeout)
            .map(drop)
            .with_context(|| format!("connect {addr} in {}", netns.name()))
    })
}

/// `GET /metrics`, waiting up to 10 s.
pub fn metrics(node: &Netns) -> Result<String> {
    metrics_within(node, Duration::from_secs(10))
}

/// The agent's admin address inside the node.
const ADMIN: &str = "127.0.0.1:15000";

/// `GET /metrics` from the agent's admin endpoint inside `node`, failing after `wait`
/// (an agent out of descriptors cannot accept the connection: it then sits in the
/// listen queue, answered only once a descriptor frees up).
pub fn metrics_within(node: &Netns, wait: Duration) -> Result<String> {
    in_netns(node, || {
        let addr: SocketAddr = ADMIN.parse()?;
        let mut stream =
            TcpStream::connect_timeout(&addr, wait).with_context(|| format!("connect {ADMIN}"))?;
        stream.set_read_timeout(Some(wait))?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut text = String::new();
        stream
            .read_to_string(&mut text)
            .with_context(|| format!("no answer from {ADMIN} within {wait:?}"))?;
        match text.split_once("\r\n\r\n") {
            Some((head, body))
                if head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200") =>
            {
                Ok(body.to_owned())
            }
            _ => bail!(
                "GET /metrics: {}",
                text.lines().next().unwrap_or("no answer")
            ),
        }
    })
}

/// The value of `name{labels..}` (other labels ignored) in Prometheus text; 0 if absent
/// (a counter that never counted is not written).
pub fn sample(metrics: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    xtask::netlab::agent::metric_sample(metrics, name, labels).unwrap_or(0.0)
}

/// A sysctl's value as seen from inside `netns` (`?` if unreadable).
pub fn sysctl_in(netns: &Netns, path: &str) -> String {
    netns
        .exec("cat")
        .arg(path)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().replace('\t', " "))
        .unwrap_or_else(|| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_by_label() {
        let text =
            "# TYPE x counter\nx_total{backend=\"load/echo\"} 1000\nx_total{backend=\"b\"} 2\n";
        assert_eq!(sample(text, "x_total", &[("backend", "load/echo")]), 1000.0);
        assert_eq!(sample(text, "x_total", &[("backend", "none")]), 0.0);
    }
}
