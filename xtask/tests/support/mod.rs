//! Shared fixture of the end-to-end tests: a pod, a node running the agent, and an
//! external server, with the Backend names pinned in the hosts files.

#![allow(dead_code, reason = "each test binary uses a different part")]

pub mod capture;
pub mod connect_loop;
pub mod curl;
pub mod fakeapi;
pub mod fixtures;
pub mod nginx;
pub mod programs;
pub mod python;
pub mod tls;

use std::{net::IpAddr, path::PathBuf};

use xtask::netlab::{
    Bpffs, EXT_V4, EXT_V6, Topology,
    agent::{Agent, AgentConfig},
    probe::{self, ProbeServer, Reply},
};

pub const PROBE: &str = env!("CARGO_BIN_EXE_netprobe");

/// Reads with `read` every 20 ms until `done` holds of what it read, for at most 5 s;
/// returns the last reading either way (the caller asserts on it). For what the agent
/// or a server records just after the client has its answer: a counter, a log line.
pub fn poll<T>(mut read: impl FnMut() -> T, done: impl Fn(&T) -> bool) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let last = read();
        if done(&last) || std::time::Instant::now() >= deadline {
            return last;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

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
    number: 8080
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

    /// The agent's configuration for the Kubernetes source: `kube_args` (from
    /// [`fakeapi::FakeApi::agent_args`]) and Backends applying cluster-wide (the test
    /// pods are no pods the API knows, so per-namespace scoping would apply none).
    pub fn kube_config(&self, kube_args: Vec<String>) -> AgentConfig {
        let mut config = self.config();
        config.extra_args = kube_args;
        (config.extra_args).extend(["--backend-scope".to_owned(), "cluster".to_owned()]);
        config
    }

    /// Another `netprobe serve` in the external namespace, on `addr` (`[::]:9090`).
    pub fn serve(&self, addr: &str) -> ProbeServer {
        ProbeServer::start(PROBE.as_ref(), &self.topo.ext, addr).expect("server")
    }

    /// Connects from the pod over IPv4; true if the connection went through the proxy,
    /// false if it went direct (anything else fails the test).
    pub fn via_proxy(&self, target: &str) -> bool {
        let reply = self.connect(target, &["-4"]);
        assert!(reply.ok(), "{target}: {:?}", reply.json);
        let seen = reply.seen_by_server().unwrap_or_default().to_owned();
        if seen.starts_with(&format!("{}:", xtask::netlab::NODE_EXT_V4)) {
            return true;
        }
        assert!(
            seen.starts_with(&format!("{}:", xtask::netlab::POD_V4)),
            "{target}: server saw {seen}"
        );
        false
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
