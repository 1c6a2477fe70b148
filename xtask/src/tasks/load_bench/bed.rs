//! The test bed of `bench-load`: the netlab topology, a black-holed subnet, the
//! Backends, the upstream servers, a bpffs, and a fresh agent per case.
//!
//! ```text
//!  pod (cgroup, loadgen)      node (agent :15001)                 ext
//!  10.200.1.2   -->  10.200.1.1 | 10.200.2.1   -->  10.200.2.2  echo :7000, sink :7001, nginx :80
//!                                                                and :443 (TLS, a test CA)
//!                                              -->  10.200.3.2  (routed to ext, which drops it:
//!                                                               a blackhole route, no ICMP)
//! ```

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;
use xtask::netlab::{
    Bpffs, ChildGuard, EXT_V4, Topology,
    agent::{Agent, AgentConfig},
};

use super::probe::{self, Memory, Sampler};
use super::servers::{Nginx, TcpServers};
use crate::tasks::bench::servers::{HOSTNAME, Pki};

/// The black-holed upstream address: routed from the node into ext, dropped there.
pub const HOLE_V4: Ipv4Addr = Ipv4Addr::new(10, 200, 3, 2);
const HOLE_NET: &str = "10.200.3.0/24";

/// A Backend the clients dial: its real address and, for clients that speak HTTP, the
/// Host to send.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub addr: SocketAddr,
    pub http: Option<&'static str>,
    /// `metadata.name` (namespace `load`).
    name: &'static str,
    hostname: &'static str,
    /// `spec.protocol`.
    protocol: &'static str,
    /// Whether the agent originates TLS (`mode: ServerOnly` against the bed's CA).
    tls: bool,
}

impl Target {
    /// Its label in the agent's metrics.
    pub fn backend(&self) -> String {
        format!("load/{}", self.name)
    }
}

const fn target(
    ip: Ipv4Addr,
    port: u16,
    name: &'static str,
    hostname: &'static str,
    http: bool,
) -> Target {
    Target {
        addr: SocketAddr::new(IpAddr::V4(ip), port),
        http: if http { Some(hostname) } else { None },
        name,
        hostname,
        protocol: if http { "HTTP" } else { "TCP" },
        tls: false,
    }
}

pub const ECHO: Target = target(EXT_V4, 7000, "echo", "echo.load.test", false);
pub const SINK: Target = target(EXT_V4, 7001, "sink", "sink.load.test", false);
pub const WEB: Target = target(EXT_V4, 80, "web", "web.load.test", true);
pub const HOLE: Target = target(HOLE_V4, 7002, "hole", "hole.load.test", false);
pub const HOLE_WEB: Target = target(HOLE_V4, 80, "holeweb", "holeweb.load.test", true);
/// nginx over TLS behind a bytes Backend: clients send HTTP in plaintext, the agent's
/// TLS relay carries it (the hostname is the one the bench's test certificate names).
pub const TLS_WEB: Target = Target {
    protocol: "TCP",
    tls: true,
    ..target(EXT_V4, 443, "tlsweb", HOSTNAME, true)
};
const ALL: [Target; 6] = [ECHO, SINK, WEB, HOLE, HOLE_WEB, TLS_WEB];

/// Everything but the agent. Field order is drop order: servers, bpffs (releasing the
/// pins detaches the hooks), namespaces and cgroup, then the directory.
pub struct Bed {
    pub servers: TcpServers,
    pub nginx: Nginx,
    bpffs: Bpffs,
    pub topology: Topology,
    dir: tempfile::TempDir,
    loadgen: PathBuf,
}

impl Bed {
    pub fn new(loadgen: &Path, nginx: &Path) -> Result<Bed> {
        let dir = tempfile::Builder::new().prefix("rdload").tempdir()?;
        let topology = Topology::new()?;
        let hosts: Vec<(IpAddr, &str)> = ALL.iter().map(|t| (t.addr.ip(), t.hostname)).collect();
        topology.node.set_hosts(&hosts)?;
        // The hole: the node routes it to ext, where forwarding meets a blackhole route.
        // A blackhole drops without an ICMP error (unlike `unreachable`, or forwarding
        // off), so the agent's SYNs go unanswered, as to a firewalled host.
        topology.node.route_add(HOLE_NET, &EXT_V4.to_string())?;
        crate::tasks::check_status(topology.ext.exec("sysctl").args([
            "-q",
            "-w",
            "net.ipv4.ip_forward=1",
        ]))?;
        topology.ext.ip(["route", "add", "blackhole", HOLE_NET])?;
        let hole = SocketAddr::new(HOLE_V4.into(), HOLE.addr.port());
        match probe::connect_in(&topology.node, hole, Duration::from_millis(500)) {
            Err(e) if is_timeout(&e) => {}
            other => bail!("{hole} should swallow SYNs from the node, but: {other:?}"),
        }
        let backends = dir.path().join("backends");
        std::fs::create_dir(&backends)?;
        let pki = Pki::generate()?;
        std::fs::write(backends.join("load.yaml"), backend_yaml(&pki.ca_pem))?;
        let nginx_dir = dir.path().join("nginx");
        std::fs::create_dir_all(&nginx_dir)?;
        pki.write(&nginx_dir)?;
        let nginx = Nginx::start(nginx, &topology.ext, &nginx_dir, WEB.addr, TLS_WEB.addr)?;
        let servers = TcpServers::start(loadgen, &topology.ext, ECHO.addr, SINK.addr)?;
        let bpffs = Bpffs::new()?;
        Ok(Bed {
            servers,
            nginx,
            bpffs,
            topology,
            dir,
            loadgen: loadgen.to_owned(),
        })
    }

    fn pins(&self) -> PathBuf {
        self.bpffs.path().join("redirector")
    }

    /// Starts a fresh agent (the pins of the previous one are adopted) with `args`.
    pub fn agent(&self, args: &[&str]) -> Result<AgentRun> {
        let mut config = AgentConfig::new(self.dir.path().join("backends"), self.pins());
        config.in_pod_cgroup = false;
        config.extra_args = ["--drain-timeout", "2s"]
            .iter()
            .chain(args)
            .map(|a| (*a).to_owned())
            .collect();
        let agent = Agent::start(&self.topology, &config)?;
        let pid = probe::find_agent(&self.pins())?;
        let open_files = agent.logs().iter().find_map(|l| {
            let (_, rest) = l.split_once("open_files=")?;
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        });
        // Let start-up allocations settle before the baseline.
        std::thread::sleep(Duration::from_secs(1));
        let before = probe::memory(pid)?;
        let base_fds = probe::fds(pid);
        Ok(AgentRun {
            base_fds,
            sampler: Sampler::start(pid),
            agent: Some(agent),
            pid,
            open_files,
            before,
        })
    }

    /// Starts `loadgen <args>` in the pod (netns and cgroup: its connects are redirected).
    pub fn client(&self, args: &[String]) -> Result<Client> {
        let mut command = self.topology.spawn_in_pod(&self.loadgen, args);
        Ok(Client {
            child: ChildGuard::spawn("loadgen", &mut command)?,
        })
    }

    /// `redirector uninstall` of the bench's pins (the bpffs guard would release them
    /// anyway; this says so if it fails).
    pub fn uninstall(&self) {
        let pins = self.pins().display().to_string();
        match xtask::netlab::agent::redirector(&["uninstall", "--bpffs", &pins]) {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "bench-load: redirector uninstall failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => eprintln!("bench-load: redirector uninstall: {e:#}"),
        }
    }
}

/// How long after the clients closed the agent's memory is read.
pub const SETTLE: Duration = Duration::from_secs(3);

/// The agent of one case, its memory watched from start to finish.
pub struct AgentRun {
    sampler: Sampler,
    agent: Option<Agent>,
    pub pid: u32,
    /// What the agent logged as its open file limit.
    pub open_files: Option<u64>,
    /// Its descriptors once ready and idle.
    pub base_fds: Option<usize>,
    pub before: Memory,
}

/// The agent's memory over one case, KiB.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryUse {
    pub before: u64,
    /// Largest VmRSS sampled (every 50 ms).
    pub peak_sampled: u64,
    /// VmHWM at the end: the kernel's own peak.
    pub hwm: u64,
    pub after: u64,
    /// A second reading, (seconds after the clients closed, VmRSS), if one was asked for:
    /// whether freed memory goes back to the system.
    pub later: Option<(u64, u64)>,
}

impl AgentRun {
    /// Waits [`SETTLE`], reads the memory (and again `later` after that, if given),
    /// stops the agent (SIGTERM).
    pub fn finish(mut self, later: Option<Duration>) -> Result<MemoryUse> {
        std::thread::sleep(SETTLE);
        let end = probe::memory(self.pid)?;
        let later = match later {
            Some(wait) => {
                std::thread::sleep(wait);
                let secs = (SETTLE + wait).as_secs();
                Some((secs, probe::memory(self.pid)?.rss_kib))
            }
            None => None,
        };
        let used = MemoryUse {
            before: self.before.rss_kib,
            peak_sampled: self.sampler.peak(),
            hwm: end.hwm_kib,
            after: end.rss_kib,
            later,
        };
        if let Some(agent) = self.agent.take() {
            let finished = agent.terminate()?;
            if !finished.status.success() {
                bail!("the agent exited with {}", finished.status);
            }
        }
        Ok(used)
    }

    /// The agent's WARN and ERROR lines so far (for the report).
    pub fn warnings(&self) -> Vec<String> {
        (self.agent.iter().flat_map(Agent::logs))
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .collect()
    }
}

/// A running `loadgen` client.
pub struct Client {
    child: ChildGuard,
}

impl Client {
    /// Waits for its `event` line and returns it.
    pub fn event(&mut self, event: &str, timeout: Duration) -> Result<Value> {
        let line = (self.child).wait_for_line(&format!("\"event\":\"{event}\""), timeout)?;
        serde_json::from_str(&line).with_context(|| format!("loadgen printed {line}"))
    }

    /// Waits for it to exit and returns its `result` line.
    pub fn result(mut self, timeout: Duration) -> Result<Value> {
        let finished = self.child.finish(timeout)?;
        if !finished.status.success() {
            bail!(
                "loadgen exited with {}: {}",
                finished.status,
                finished.stderr.join(" / ")
            );
        }
        let line = (finished.stdout.iter().rev())
            .find(|l| l.contains("\"event\":\"result\""))
            .context("loadgen printed no result")?;
        serde_json::from_str(line).with_context(|| format!("loadgen printed {line}"))
    }
}

fn is_timeout(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            )
        })
    })
}

/// Every Backend of the bench, namespace `load`, and the ConfigMap of the CA that the
/// TLS ones trust.
fn backend_yaml(ca_pem: &str) -> String {
    let tls = format!(
        "  tls:\n    mode: ServerOnly\n    validation:\n      hostname: {HOSTNAME}\n      \
         caCertificateRefs: [{{group: \"\", kind: ConfigMap, name: load-ca}}]\n"
    );
    let backends = ALL.iter().map(|t| {
        format!(
            "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\n\
             metadata: {{name: {}, namespace: load}}\n\
             spec:\n  type: ExternalHostname\n  externalHostname: {{hostname: {}}}\n  \
             port: {{number: {}}}\n  protocol: {}\n{}",
            t.name,
            t.hostname,
            t.addr.port(),
            t.protocol,
            if t.tls { tls.as_str() } else { "" }
        )
    });
    let ca: String = ca_pem.lines().map(|line| format!("    {line}\n")).collect();
    let config_map = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: load-ca, namespace: load}}\n\
         data:\n  ca.crt: |\n{ca}"
    );
    backends
        .chain(std::iter::once(config_map))
        .collect::<Vec<_>>()
        .join("---\n")
}
