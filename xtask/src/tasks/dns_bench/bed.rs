//! The bench's own test bed: the netlab topology, NSD in ext, the agent in the node with
//! 100 Backends, and two client cgroups in the pod's network namespace.
//!
//! ```text
//!  pod netns                       node                                     ext
//!  dnsperf in the pod cgroup  ---> agent DNS listener 10.200.1.1:15053 ---> NSD 10.200.2.2:53
//!  dnsperf in a sibling cgroup ------------------------------------------> NSD 10.200.2.2:53
//! ```
//!
//! Both dnsperfs are told `-s 10.200.2.2`. The agent's hooks are attached to the pod
//! cgroup only, so a dnsperf there is captured and one in the sibling cgroup (same
//! network namespace, same routes, no hooks) is not: the uncaptured cases are the pod as
//! it would be without DNS capture, measured with the same agent running, so the cases
//! can be interleaved without restarting anything.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use xtask::netlab::{
    Bpffs, Cgroup, EXT_V4, EXT_V6, Topology,
    agent::{Agent, AgentConfig},
    in_cgroup_in_netns,
};

use super::names::{self, Kind};
use super::nsd::Nsd;
use super::usage::{self, Sources};

/// How long the agent may take to answer every Backend name after its ready line.
const NAMES_TIMEOUT: Duration = Duration::from_secs(30);

/// The programs the bed runs.
pub struct Bins {
    pub redirector: PathBuf,
    pub dnsperf: PathBuf,
    pub nsd: PathBuf,
}

/// Field order is drop order: the agent and NSD stop before their files, cgroups and
/// namespaces go.
pub struct DnsBed {
    agent: Option<Agent>,
    _nsd: Nsd,
    pub agent_pid: u32,
    admin_socket: PathBuf,
    dir: tempfile::TempDir,
    bpffs: Bpffs,
    /// dnsperf here is not captured (no hooks).
    pub uncaptured: Cgroup,
    /// NSD's, so its CPU time can be read.
    pub nsd_cgroup: Cgroup,
    /// `pod_cgroup` is where the agent's hooks are attached: dnsperf there is captured.
    pub topology: Topology,
}

impl DnsBed {
    /// Builds everything and waits until the agent answers the Backend names.
    pub fn new(bins: &Bins, backends: usize, agent_args: &[String]) -> Result<DnsBed> {
        let topology = Topology::new()?;
        let nsd_cgroup = Cgroup::new("nsd")?;
        let uncaptured = Cgroup::new("podnc")?;
        let bpffs = Bpffs::new()?;
        let dir = tempfile::Builder::new()
            .prefix("rddnsbench")
            .tempdir()
            .context("cannot create a temp dir")?;

        // The agent resolves Backend names through the node's hosts file; the pod asks
        // its nameserver, NSD (which resolv.conf names too, for the getent checks).
        let hosts = names::node_hosts(backends);
        let entries: Vec<(IpAddr, &str)> = hosts.iter().map(|(ip, n)| (*ip, n.as_str())).collect();
        topology.node.set_hosts(&entries)?;
        topology.pod.set_hosts(&[])?;
        write(
            &topology.pod.etc_dir().join("resolv.conf"),
            &format!("nameserver {EXT_V4}\n"),
        )?;
        let backend_dir = dir.path().join("backends");
        std::fs::create_dir(&backend_dir)
            .with_context(|| format!("cannot create {}", backend_dir.display()))?;
        write(
            &backend_dir.join("backends.yaml"),
            &names::backends_yaml(backends),
        )?;
        for kind in [Kind::Forwarded, Kind::Backend] {
            write(
                &queries_file(dir.path(), kind),
                &names::queries(kind, backends),
            )?;
        }
        let nsd_dir = dir.path().join("nsd");
        std::fs::create_dir(&nsd_dir)
            .with_context(|| format!("cannot create {}", nsd_dir.display()))?;
        let nsd = Nsd::start(
            &bins.nsd,
            &topology.ext,
            &nsd_cgroup,
            &nsd_dir,
            &names::zone_file(backends, EXT_V4),
            (EXT_V4, EXT_V6),
        )?;

        // Outside the pod cgroup: the agent's own cgroup is never captured.
        let mut config = AgentConfig::new(&backend_dir, bpffs.path().join("redirector"));
        config.in_pod_cgroup = false;
        config.extra_args = vec![
            "--admin-socket".into(),
            admin_socket(dir.path()).display().to_string(),
        ];
        config.extra_args.extend(agent_args.iter().cloned());
        let agent = Agent::start(&topology, &config)?;
        let admin_socket = admin_socket(dir.path());
        let agent_pid = usage::agent_pid(&admin_socket)?;
        let bed = DnsBed {
            agent: Some(agent),
            _nsd: nsd,
            agent_pid,
            admin_socket,
            dir,
            bpffs,
            uncaptured,
            nsd_cgroup,
            topology,
        };
        bed.check_names(backends)?;
        Ok(bed)
    }

    /// dnsperf's query list for `kind`.
    pub fn queries(&self, kind: Kind) -> PathBuf {
        queries_file(self.dir.path(), kind)
    }

    /// Where the CPU figures and the agent's counters are read.
    pub fn sources(&self) -> Sources<'_> {
        Sources {
            agent_pid: self.agent_pid,
            admin_socket: &self.admin_socket,
            nsd: &self.nsd_cgroup,
        }
    }

    /// The client cgroup of a captured or uncaptured case.
    pub fn client(&self, captured: bool) -> &Cgroup {
        if captured {
            &self.topology.pod_cgroup
        } else {
            &self.uncaptured
        }
    }

    /// Before measuring, with glibc's resolver (`getent`): captured, the first and last
    /// Backend names get virtual addresses and a forwarded name the zone's answer;
    /// uncaptured, a Backend name gets the zone's answer. Retries while the agent is
    /// still resolving its Backends.
    fn check_names(&self, backends: usize) -> Result<()> {
        let deadline = Instant::now() + NAMES_TIMEOUT;
        for i in [0, backends.saturating_sub(1)] {
            let name = Kind::Backend.name(i);
            loop {
                let answer = self.getent(self.client(true), &name)?;
                if !answer.is_empty() && answer.iter().all(names::is_virtual) {
                    break;
                }
                if Instant::now() >= deadline {
                    bail!("captured, {name} resolved to {answer:?}, not virtual addresses");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let forwarded = Kind::Forwarded.name(0);
        let answer = self.getent(self.client(true), &forwarded)?;
        if !answer.contains(&names::zone_v4(Kind::Forwarded, 0))
            || answer.iter().any(names::is_virtual)
        {
            bail!("captured, {forwarded} resolved to {answer:?}, not the zone's answer");
        }
        let name = Kind::Backend.name(0);
        let answer = self.getent(self.client(false), &name)?;
        if !answer.contains(&names::zone_v4(Kind::Backend, 0))
            || answer.iter().any(names::is_virtual)
        {
            bail!("not captured, {name} resolved to {answer:?}, not the zone's answer");
        }
        Ok(())
    }

    /// `getent ahosts NAME` in the pod's network namespace from `cgroup`: the addresses.
    fn getent(&self, cgroup: &Cgroup, name: &str) -> Result<Vec<IpAddr>> {
        let mut command =
            in_cgroup_in_netns(cgroup, &self.topology.pod, "getent", ["ahosts", name]);
        let out = command
            .output()
            .with_context(|| format!("cannot run {command:?}"))?;
        let mut seen = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(Ok(ip)) = line.split_whitespace().next().map(str::parse::<IpAddr>)
                && !seen.contains(&ip)
            {
                seen.push(ip);
            }
        }
        Ok(seen)
    }

    /// SIGTERM to the agent, then `redirector uninstall` of its pins (the bpffs is
    /// unmounted on drop anyway; this is how an operator would remove them).
    pub fn stop_agent(&mut self) -> Result<()> {
        if let Some(agent) = self.agent.take() {
            let finished = agent.terminate()?;
            if !finished.status.success() {
                eprintln!("bench-dns: the agent exited with {}", finished.status);
            }
        }
        let pins = self.bpffs.path().join("redirector").display().to_string();
        let out = xtask::netlab::agent::redirector(&["uninstall", "--bpffs", &pins])?;
        if !out.status.success() {
            eprintln!(
                "bench-dns: redirector uninstall failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

fn queries_file(dir: &Path, kind: Kind) -> PathBuf {
    dir.join(match kind {
        Kind::Forwarded => "queries-forwarded.txt",
        Kind::Backend => "queries-backend.txt",
    })
}

fn admin_socket(dir: &Path) -> PathBuf {
    dir.join("admin.sock")
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
