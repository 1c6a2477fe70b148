//! Shared fixture of the end-to-end tests: a pod, a node running the agent, and an
//! external server, with the Backend names pinned in the hosts files.

#![allow(dead_code, reason = "each test binary uses a different part")]

pub mod capture;
pub mod tls;

use std::{net::IpAddr, path::PathBuf};

use xtask::netlab::{
    Bpffs, EXT_V4, EXT_V6, Topology,
    agent::{Agent, AgentConfig},
    probe::{self, ProbeServer, Reply},
};

pub const PROBE: &str = env!("CARGO_BIN_EXE_netprobe");

/// The Backend most tests declare: `echo.redirector.test:8080`, plain TCP.
pub const ECHO_BACKEND: &str = r#"
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata:
  name: echo
  namespace: demo
spec:
  type: ExternalHostname
  externalHostname:
    hostname: echo.redirector.test
  port:
    port: 8080
  protocol: TCP
"#;

/// Names the hosts files of the pod and the node resolve, all to the external server.
pub const NAMES: [&str; 3] = [
    "echo.redirector.test",
    "api.redirector.test",
    "other.redirector.test",
];

pub fn require_root() {
    // SAFETY: geteuid(2) has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert!(
        euid == 0,
        "end-to-end tests load eBPF programs and create network namespaces: run them as \
         root (sudo -E cargo xtask test); euid is {euid}"
    );
}

/// Field order is drop order: the server goes first, the namespaces last.
pub struct Bed {
    pub server: ProbeServer,
    pub backends: tempfile::TempDir,
    pub bpffs: Bpffs,
    pub topo: Topology,
}

impl Bed {
    /// A test bed whose Backend directory holds `backends_yaml` as `backends.yaml`, with
    /// a `netprobe serve [::]:8080` in the external namespace.
    pub fn new(backends_yaml: &str) -> Bed {
        require_root();
        let topo = Topology::new().expect("topology");
        let mut hosts: Vec<(IpAddr, &str)> = Vec::new();
        for name in NAMES {
            hosts.push((EXT_V4.into(), name));
            hosts.push((EXT_V6.into(), name));
        }
        topo.node.set_hosts(&hosts).expect("node hosts");
        topo.pod.set_hosts(&hosts).expect("pod hosts");
        let backends = tempfile::tempdir().expect("backend dir");
        std::fs::write(backends.path().join("backends.yaml"), backends_yaml).expect("write");
        let bpffs = Bpffs::new().expect("bpffs");
        let server = ProbeServer::start(PROBE.as_ref(), &topo.ext, "[::]:8080").expect("server");
        Bed {
            server,
            backends,
            bpffs,
            topo,
        }
    }

    pub fn pin_dir(&self) -> PathBuf {
        self.bpffs.path().join("redirector")
    }

    pub fn config(&self) -> AgentConfig {
        AgentConfig::new(self.backends.path(), self.pin_dir())
    }

    pub fn agent(&self) -> Agent {
        Agent::start(&self.topo, &self.config()).expect("agent")
    }

    /// `netprobe connect TARGET --send hello` from the pod.
    pub fn connect(&self, target: &str, extra: &[&str]) -> Reply {
        probe::connect_from_pod(PROBE.as_ref(), &self.topo, target, "hello", extra)
            .expect("client ran")
    }

    /// `netprobe connect TARGET --send TEXT [extra..]` from the pod.
    pub fn connect_sending(&self, target: &str, text: &str, extra: &[&str]) -> Reply {
        probe::connect_from_pod(PROBE.as_ref(), &self.topo, target, text, extra)
            .expect("client ran")
    }
}
