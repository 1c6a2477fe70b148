//! A named network namespace (`ip netns`) and veth links between two of them.

use super::{ip, next_id, run, short, unique_name};
use anyhow::{Context, Result, bail};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Serialises `ip netns add/del` within this process.
///
/// The first `ip netns add` on a boot turns `/run/netns` into a shared bind mount; two
/// concurrent first calls can stack two such mounts and hide each other's namespace files.
/// Tests run in parallel threads, so take the lock; it costs a few milliseconds.
static NETNS_LOCK: Mutex<()> = Mutex::new(());

/// A network namespace, deleted on drop (with every interface inside it).
#[derive(Debug)]
pub struct Netns {
    name: String,
    prefix: String,
    /// Whether [`Netns::set_hosts`] created `/etc/netns/<name>` (so drop removes it).
    created_etc: AtomicBool,
}

/// The two ends of a veth pair made by [`Netns::link`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Veth {
    /// Interface name inside the namespace `link` was called on.
    pub local: String,
    /// Interface name inside the other namespace.
    pub remote: String,
}

impl Netns {
    /// Creates a namespace named `rd<prefix><pid>-<n>` and brings its `lo` up.
    pub fn new(prefix: &str) -> Result<Netns> {
        let name = {
            let _lock = NETNS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            // A namespace left behind by a killed run with a recycled pid must not make
            // us fail or, worse, share it: skip names that exist.
            let mut name = unique_name(prefix);
            while Path::new("/run/netns").join(&name).exists() {
                name = unique_name(prefix);
            }
            ip(["netns", "add", &name])?;
            name
        };
        let ns = Netns {
            name,
            prefix: prefix.to_owned(),
            created_etc: AtomicBool::new(false),
        };
        ns.ip(["link", "set", "lo", "up"])?;
        // No duplicate address detection on any interface created in here later: addresses
        // are unique by construction, and a tentative link-local address makes a router
        // (which solicits neighbours from it when forwarding) drop the first packets for
        // 1-2 s, which would show up as a slow first connect.
        run(ns.exec("sysctl").args([
            "-q",
            "-w",
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
        ]))?;
        Ok(ns)
    }

    /// The namespace name as `ip netns list` shows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip netns exec <name> <program>`: add arguments, then spawn.
    pub fn exec(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Runs `ip -n <name> <args>` to completion (setup helper; fails on non-zero exit).
    pub fn ip<I, S>(&self, args: I) -> Result<String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new("ip");
        cmd.args(["-n", &self.name]).args(args);
        run(&mut cmd)
    }

    /// Makes `names` resolve to the given addresses for processes started with
    /// [`Netns::exec`], and points `resolv.conf` at 127.0.0.1 so nothing in a test ever
    /// queries a real DNS server.
    ///
    /// iproute2 bind-mounts every file of `/etc/netns/<name>/` over `/etc/` for
    /// `ip netns exec`, which is how this stays invisible to the rest of the host.
    pub fn set_hosts(&self, entries: &[(IpAddr, &str)]) -> Result<()> {
        let dir = self.etc_dir();
        if !dir.exists() {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            self.created_etc.store(true, Ordering::Relaxed);
        }
        let mut hosts = String::from("127.0.0.1 localhost\n::1 localhost\n");
        for (addr, name) in entries {
            // Writing to a String cannot fail.
            let _ = writeln!(hosts, "{addr} {name}");
        }
        write(&dir.join("hosts"), &hosts)?;
        write(&dir.join("resolv.conf"), "nameserver 127.0.0.1\n")
    }

    /// Connects this namespace to `other` with a new veth pair and brings both ends up.
    ///
    /// The pair is created inside the namespaces (`ip -n A link add .. peer .. netns B`),
    /// so no name is ever taken in the root namespace and parallel tests cannot collide.
    /// Addresses are CIDR strings (`10.200.1.1/24`, `fd00:200:1::1/64`); IPv6 ones get
    /// `nodad` so they are usable at once instead of after duplicate address detection.
    pub fn link(&self, other: &Netns, local_addrs: &[&str], remote_addrs: &[&str]) -> Result<Veth> {
        let n = next_id();
        let veth = Veth {
            local: ifname(&other.prefix, n),
            remote: ifname(&self.prefix, n),
        };
        self.ip([
            "link",
            "add",
            &veth.local,
            "type",
            "veth",
            "peer",
            "name",
            &veth.remote,
            "netns",
            &other.name,
        ])?;
        // Up first, addresses second: an IPv6 address added while the veth has no carrier
        // loses the first neighbour solicitation for about a second after the link comes
        // up (measured on kernel 6.18: the first connect took 1 s, later ones 5 ms).
        self.ip(["link", "set", &veth.local, "up"])?;
        other.ip(["link", "set", &veth.remote, "up"])?;
        self.add_addrs(&veth.local, local_addrs)?;
        other.add_addrs(&veth.remote, remote_addrs)?;
        Ok(veth)
    }

    /// `ip route add <dest_cidr> via <via>` in this namespace.
    ///
    /// Default routes are refused: a test bed must never be able to reach a real network.
    pub fn route_add(&self, dest_cidr: &str, via: &str) -> Result<()> {
        if matches!(dest_cidr, "default" | "0.0.0.0/0" | "::/0") {
            bail!("netlab never adds a default route (asked for {dest_cidr} via {via})");
        }
        self.ip(["route", "add", dest_cidr, "via", via]).map(drop)
    }

    /// Turns on IPv4 and IPv6 forwarding inside this namespace (a router, like `node`).
    pub fn enable_forwarding(&self) -> Result<()> {
        run(self.exec("sysctl").args([
            "-q",
            "-w",
            "net.ipv4.ip_forward=1",
            "net.ipv6.conf.all.forwarding=1",
        ]))
        .map(drop)
    }

    fn add_addrs(&self, dev: &str, addrs: &[&str]) -> Result<()> {
        for addr in addrs {
            let ip_part = addr.split('/').next().unwrap_or(addr);
            let parsed: IpAddr = ip_part
                .parse()
                .with_context(|| format!("{addr:?} is not an IP address with a prefix"))?;
            let mut args = vec!["addr", "add", addr, "dev", dev];
            if parsed.is_ipv6() {
                args.push("nodad");
            }
            self.ip(args)?;
        }
        Ok(())
    }

    /// `/etc/netns/<name>`: the files `ip netns exec` bind-mounts over `/etc`.
    pub fn etc_dir(&self) -> PathBuf {
        Path::new("/etc/netns").join(&self.name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        {
            let _lock = NETNS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = ip(["netns", "del", &self.name]) {
                eprintln!("netlab: cannot delete netns {}: {e:#}", self.name);
            }
        }
        if self.created_etc.load(Ordering::Relaxed) {
            let dir = self.etc_dir();
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                eprintln!("netlab: cannot remove {}: {e}", dir.display());
            }
        }
    }
}

/// Interface name for the end facing a namespace made with `peer_prefix`: at most
/// 9 + 6 characters, below the kernel's 15-byte limit, and readable in `ip link`.
fn ifname(peer_prefix: &str, n: u32) -> String {
    let mut name = short(peer_prefix, 9);
    if name.is_empty() {
        name.push_str("veth");
    }
    name.push_str(&(n % 1_000_000).to_string());
    name
}

fn write(path: &Path, content: &str) -> Result<()> {
    std::fs::write(path, content).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_fit_the_kernel_limit() {
        assert_eq!(ifname("node", 3), "node3");
        assert_eq!(ifname("", 3), "veth3");
        assert!(ifname("averyveryverylongprefix", u32::MAX).len() <= 15);
    }
}
