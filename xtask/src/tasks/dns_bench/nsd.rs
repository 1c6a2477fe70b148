//! The pod's nameserver: NSD, authoritative for the bench's zone, in the ext namespace.
//!
//! NSD rather than the repository's `fakedns` (which rereads its zone for every query):
//! a real server answers from memory at tens of thousands of queries per second, so the
//! bench measures the agent, not the nameserver. Everything NSD would read or write
//! (configuration, zone, pid, state files) is in the bench's temp dir; it runs in the
//! foreground, as root (no chroot, no user switch), without remote control.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use xtask::netlab::{Cgroup, ChildGuard, Netns, Stream, in_cgroup_in_netns};

/// How long NSD may take to load the zone and start serving.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long NSD may take to stop its server processes on SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A running NSD: SIGTERMed on drop, so its server processes (which a SIGKILL of the main
/// process would leave behind) go with it; SIGKILLed if it does not exit in time.
pub struct Nsd {
    child: ChildGuard,
}

impl Nsd {
    /// Writes the configuration and zone into `dir` and starts `bin` in `netns` and
    /// `cgroup` (its own, so its CPU time can be read), listening on port 53 of `v4` and
    /// `v6`; returns once NSD says it has started.
    pub fn start(
        bin: &Path,
        netns: &Netns,
        cgroup: &Cgroup,
        dir: &Path,
        zone: &str,
        (v4, v6): (Ipv4Addr, Ipv6Addr),
    ) -> Result<Nsd> {
        let zone_file = dir.join("zone");
        write(&zone_file, zone)?;
        let conf = dir.join("nsd.conf");
        write(&conf, &config(dir, &zone_file, v4, v6))?;
        let args = [PathBuf::from("-d"), PathBuf::from("-c"), conf];
        let mut command = in_cgroup_in_netns(cgroup, netns, bin, args);
        let child = ChildGuard::spawn_watching("nsd", &mut command, Stream::Stderr)?;
        let mut nsd = Nsd { child };
        nsd.child
            .wait_for_line("nsd started", START_TIMEOUT)
            .context("NSD did not start")?;
        Ok(nsd)
    }
}

impl Drop for Nsd {
    fn drop(&mut self) {
        if self.child.signal(libc::SIGTERM).is_ok()
            && !matches!(self.child.wait_timeout(STOP_TIMEOUT), Ok(Some(_)))
        {
            eprintln!("bench-dns: NSD did not stop on SIGTERM; killing it");
        }
    }
}

/// `nsd.conf`: one server process (the machine's CPUs are shared with dnsperf and the
/// agent), response rate limiting off (Debian's NSD limits a source to 200 queries/s by
/// default, which would be the bench's ceiling), every file in `dir`.
fn config(dir: &Path, zone_file: &Path, v4: Ipv4Addr, v6: Ipv6Addr) -> String {
    let d = dir.display();
    format!(
        "server:\n  ip-address: {v4}\n  ip-address: {v6}\n  port: 53\n  server-count: 1\n  \
         username: \"\"\n  chroot: \"\"\n  zonesdir: \"{d}\"\n  database: \"\"\n  \
         zonelistfile: \"{d}/zone.list\"\n  xfrdfile: \"{d}/xfrd.state\"\n  xfrdir: \"{d}\"\n  \
         pidfile: \"{d}/nsd.pid\"\n  verbosity: 0\n  hide-version: yes\n  \
         rrl-ratelimit: 0\n  rrl-whitelist-ratelimit: 0\n\
         remote-control:\n  control-enable: no\n\
         zone:\n  name: {}\n  zonefile: \"{}\"\n",
        super::names::ZONE,
        zone_file.display()
    )
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keeps_everything_in_the_dir_and_turns_rate_limiting_off() {
        let text = config(
            Path::new("/tmp/x"),
            Path::new("/tmp/x/zone"),
            Ipv4Addr::new(10, 200, 2, 2),
            "fd00:200:2::2".parse().unwrap(),
        );
        assert!(text.contains("ip-address: 10.200.2.2\n"), "{text}");
        assert!(text.contains("ip-address: fd00:200:2::2\n"), "{text}");
        assert!(text.contains("rrl-ratelimit: 0\n"), "{text}");
        assert!(text.contains("pidfile: \"/tmp/x/nsd.pid\""), "{text}");
        assert!(text.contains("zonefile: \"/tmp/x/zone\""), "{text}");
    }
}
