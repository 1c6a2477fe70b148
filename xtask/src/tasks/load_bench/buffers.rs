//! Small TCP socket buffers in the bench's namespaces while peers stall.
//!
//! A connection whose reader never reads fills every socket buffer on its path: with
//! this kernel's defaults (tcp_rmem max 32 MiB, tcp_wmem max 4 MiB, autotuned) that is
//! tens of MiB per connection, and a thousand of them would push the whole machine's
//! TCP memory (`tcp_mem`, shared by every namespace) into pressure, slowing everyone
//! else's connections. Capped per namespace (these sysctls are per netns), a stalled
//! connection holds at most a few hundred KiB of kernel memory, and the agent's own
//! buffers, which are what the bench measures, fill just the same.

use anyhow::Result;
use xtask::netlab::Netns;

use super::probe::sysctl_in;

/// min, default, max bytes.
pub const RMEM: &str = "4096 32768 65536";
pub const WMEM: &str = "4096 16384 65536";

const KEYS: [(&str, &str, &str); 2] = [
    ("net.ipv4.tcp_rmem", "/proc/sys/net/ipv4/tcp_rmem", RMEM),
    ("net.ipv4.tcp_wmem", "/proc/sys/net/ipv4/tcp_wmem", WMEM),
];

/// The capped buffers; the previous values come back on drop.
pub struct SmallBuffers<'a> {
    saved: Vec<(&'a Netns, &'static str, String)>,
}

impl<'a> SmallBuffers<'a> {
    pub fn set(namespaces: &[&'a Netns]) -> Result<SmallBuffers<'a>> {
        let mut guard = SmallBuffers { saved: Vec::new() };
        for ns in namespaces {
            for (key, path, value) in KEYS {
                let previous = sysctl_in(ns, path);
                sysctl(ns, key, value)?;
                guard.saved.push((ns, key, previous));
            }
        }
        Ok(guard)
    }
}

impl Drop for SmallBuffers<'_> {
    fn drop(&mut self) {
        for (ns, key, value) in &self.saved {
            if let Err(e) = sysctl(ns, key, value) {
                eprintln!("bench-load: cannot restore {key} in {}: {e:#}", ns.name());
            }
        }
    }
}

fn sysctl(ns: &Netns, key: &str, value: &str) -> Result<()> {
    crate::tasks::check_status(
        ns.exec("sysctl")
            .args(["-q", "-w"])
            .arg(format!("{key}={value}")),
    )
}
