//! DNS capture, end to end: the pod's nameserver (fakedns, outside the pod) answers
//! Backend names with addresses the agent never saw, as CDNs and geo DNS do every day.
//! The pod's queries are captured by the agent, which answers Backend names with virtual
//! addresses, so every connect still names its Backend and TLS is still originated.
//!
//! The pod resolves through glibc (`getent`, `netprobe connect`, curl): resolvers nobody
//! here wrote, which check where replies come from.

mod support;

#[path = "dns_capture/egress.rs"]
mod egress;
#[path = "dns_capture/lifecycle.rs"]
mod lifecycle;
#[path = "dns_capture/scoping.rs"]
mod scoping;
#[path = "dns_capture/transport.rs"]
mod transport;

use std::{net::IpAddr, path::PathBuf, time::Duration};

use support::{Bed, tls::metrics};
use xtask::netlab::{
    Cgroup, ChildGuard, EXT_V4, EXT_V6,
    agent::{Agent, AgentConfig},
    in_cgroup_in_netns,
};

pub const FAKEDNS: &str = env!("CARGO_BIN_EXE_fakedns");
/// Where the pod's nameserver says Backend names are: a second address of ext, which
/// the agent's own resolution (the node's hosts file) never returns.
pub const POD_VIEW_V4: &str = "10.200.2.3";
pub const POD_VIEW_V6: &str = "fd00:200:2::3";
/// The first address of the virtual IPv4 range (the default 240.0.0.0/16).
const VIRTUAL_V4_PREFIX: &str = "240.0.";
const VIRTUAL_V6_PREFIX: &str = "fd72:6564:6972::";

/// A bed whose pod resolves through fakedns in ext, with the agent outside the pod's
/// cgroup (its own cgroup is never captured). Field order is drop order.
pub struct CaptureBed {
    pub agent: Option<Agent>,
    pub dns: ChildGuard,
    /// Barrier names resolved so far (see [`CaptureBed::queries`]).
    barriers: u32,
    pub zone: PathBuf,
    pub bed: Bed,
}

/// How the pod's resolv.conf names its nameserver and options.
pub struct PodResolver<'a> {
    pub nameserver: IpAddr,
    /// Extra lines (`options use-vc`, `search ...`).
    pub extra: &'a str,
}

impl Default for PodResolver<'_> {
    fn default() -> Self {
        Self {
            nameserver: EXT_V4.into(),
            extra: "",
        }
    }
}

impl CaptureBed {
    /// `zone` is fakedns's zone; `agent_args` extra `redirector run` flags.
    pub fn new(yaml: &str, zone: &str, resolver: PodResolver<'_>, agent_args: &[&str]) -> Self {
        let mut t = Self::without_agent(yaml, zone, resolver);
        t.start_agent(agent_args);
        t
    }

    /// The bed and fakedns, no agent yet.
    pub fn without_agent(yaml: &str, zone: &str, resolver: PodResolver<'_>) -> Self {
        let bed = Bed::new(yaml);
        let topo = &bed.topo;
        // The pod knows no Backend name from a hosts file: it asks its nameserver.
        topo.pod.set_hosts(&[]).expect("pod hosts");
        std::fs::write(
            topo.pod.etc_dir().join("resolv.conf"),
            format!("nameserver {}\n{}", resolver.nameserver, resolver.extra),
        )
        .expect("pod resolv.conf");
        for address in [format!("{POD_VIEW_V4}/24"), format!("{POD_VIEW_V6}/64")] {
            let mut args = vec!["addr", "add", &address, "dev", &topo.ext_link.remote];
            if address.contains(':') {
                // Deprecated at once: never the source of fakedns's replies (a stub
                // resolver, the agent's forwarder too, drops replies from elsewhere).
                args.extend(["nodad", "preferred_lft", "0"]);
            }
            topo.ext.ip(args).expect("second ext address");
        }
        let zone_path = bed.backends.path().join("zone.txt.off");
        std::fs::write(&zone_path, zone).expect("zone");
        let mut dns = ChildGuard::spawn(
            "fakedns",
            topo.ext.exec(FAKEDNS).arg("[::]:53").arg(&zone_path),
        )
        .expect("fakedns");
        dns.wait_for_line("listening", Duration::from_secs(15))
            .expect("fakedns ready");
        CaptureBed {
            agent: None,
            dns,
            barriers: 0,
            zone: zone_path,
            bed,
        }
    }

    pub fn start_agent(&mut self, args: &[&str]) {
        let mut config: AgentConfig = self.bed.config();
        config.extra_args = args.iter().map(|a| a.to_string()).collect();
        self.start_agent_with(config);
    }

    /// Starts the agent outside the pod's cgroup (its own cgroup is never captured).
    pub fn start_agent_with(&mut self, mut config: AgentConfig) {
        config.in_pod_cgroup = false;
        self.agent = Some(Agent::start(&self.bed.topo, &config).expect("agent"));
    }

    pub fn agent(&mut self) -> &mut Agent {
        self.agent.as_mut().expect("agent running")
    }

    /// `getent ahosts NAME` in the pod (glibc's resolver): the addresses, in order.
    pub fn resolve(&self, name: &str) -> Vec<IpAddr> {
        self.resolve_in(&self.bed.topo.pod_cgroup, name)
    }

    /// `getent ahosts NAME` in the pod's network namespace, from `cgroup`.
    pub fn resolve_in(&self, cgroup: &Cgroup, name: &str) -> Vec<IpAddr> {
        let output = in_cgroup_in_netns(cgroup, &self.bed.topo.pod, "getent", ["ahosts", name])
            .output()
            .expect("getent");
        let text = String::from_utf8_lossy(&output.stdout);
        let mut seen = Vec::new();
        for line in text.lines() {
            if let Some(Ok(ip)) = line.split_whitespace().next().map(str::parse::<IpAddr>)
                && !seen.contains(&ip)
            {
                seen.push(ip);
            }
        }
        seen
    }

    /// Resolves `name` in the pod and checks the answer is the agent's: virtual only.
    pub fn assert_virtual(&self, name: &str) -> Vec<IpAddr> {
        let answer = self.resolve(name);
        assert!(
            !answer.is_empty() && answer.iter().all(is_virtual),
            "{name}: {answer:?}"
        );
        answer
    }

    /// Resolves `name` in the pod and checks the answer is the pod's nameserver's.
    pub fn assert_pod_view(&self, name: &str) {
        let answer = self.resolve(name);
        let pod_view: IpAddr = POD_VIEW_V4.parse().expect("address");
        assert!(answer.contains(&pod_view), "{name}: {answer:?}");
        assert!(!answer.iter().any(is_virtual), "{name}: {answer:?}");
    }

    /// fakedns's `query NAME TYPE TRANSPORT` lines for every query the pod made so far.
    ///
    /// fakedns logs a query before answering it, but its stdout reaches the test through
    /// a reader thread: a pod that has its answer does not mean the line was read yet.
    /// So the pod resolves a fresh name as a barrier and this waits for fakedns to log
    /// it; every query made before it is then among the lines, which makes a check that
    /// a name was *not* asked as sound as one that it was.
    pub fn queries(&mut self) -> Vec<String> {
        self.barriers += 1;
        let barrier = format!("query barrier-{}.test", self.barriers);
        self.resolve(&barrier["query ".len()..]);
        self.dns
            .wait_for_line(&barrier, Duration::from_secs(10))
            .expect("fakedns logs the barrier query");
        (self.dns.lines(xtask::netlab::Stream::Stdout).into_iter())
            .filter(|l| l.starts_with("query ") && !l.starts_with("query barrier-"))
            .collect()
    }

    pub fn metric(&self, outcome: &str) -> f64 {
        let text = metrics(&self.bed.topo.node);
        support::tls::sample(
            &text,
            "redirector_dns_queries_total",
            &[("outcome", outcome)],
        )
        .unwrap_or(0.0)
    }
}

pub fn is_virtual(ip: &IpAddr) -> bool {
    let text = ip.to_string();
    text.starts_with(VIRTUAL_V4_PREFIX) || text.starts_with(VIRTUAL_V6_PREFIX)
}

/// The zone where every Backend name of the tests points elsewhere than the agent sees.
pub fn divergent_zone(names: &[&str]) -> String {
    let mut zone = String::new();
    for name in names {
        zone.push_str(&format!(
            "{name} 30 {POD_VIEW_V4}\n{name} 30 {POD_VIEW_V6}\n"
        ));
    }
    zone
}

/// [`divergent_zone`] plus `elsewhere.test`, a name no Backend declares.
pub fn zone_with_elsewhere(names: &[&str]) -> String {
    format!("{}elsewhere.test 30 {POD_VIEW_V4}\n", divergent_zone(names))
}

/// The agent's view: what the node's hosts file says (ext's first addresses).
pub fn agent_view() -> [IpAddr; 2] {
    [EXT_V4.into(), EXT_V6.into()]
}

#[path = "dns_capture/names.rs"]
mod names;
