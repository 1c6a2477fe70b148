//! Shared fixture of the end-to-end tests: a pod, a node running the agent, and an
//! external server, with the Backend names pinned in the hosts files.

#![allow(dead_code, reason = "each test binary uses a different part")]

pub mod capture;
pub mod connect_loop;
pub mod curl;
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

/// The fake Kubernetes API server (`fakeapi`) of the `--kubernetes` tests, run in the
/// node's network namespace where the agent reaches it at [`fakeapi::API_ADDR`].
pub mod fakeapi {
    use std::path::{Path, PathBuf};

    use serde::Deserialize as _;
    use serde_json::Value;
    use xtask::netlab::{ChildGuard, Netns, probe::PROBE_TIMEOUT};

    pub const FAKEAPI: &str = env!("CARGO_BIN_EXE_fakeapi");
    /// Where it listens, inside the node.
    pub const API_ADDR: &str = "127.0.0.1:6443";

    /// A running `fakeapi`, killed on drop, and its state directory.
    pub struct FakeApi {
        child: ChildGuard,
        dir: tempfile::TempDir,
    }

    impl FakeApi {
        /// Starts it in `netns` holding the objects of `yaml` (as `initial`, see
        /// [`FakeApi::apply`]) and waits until it listens.
        pub fn start(netns: &Netns, yaml: &str) -> FakeApi {
            FakeApi::start_on(netns, yaml, API_ADDR)
        }

        /// [`FakeApi::start`] listening on `bind` instead of [`API_ADDR`]: `0.0.0.0:6443`
        /// also serves agents of other nodes linked to `netns` (see
        /// [`FakeApi::agent_args_via`]). [`FakeApi::kubeconfig`] still says 127.0.0.1.
        pub fn start_on(netns: &Netns, yaml: &str, bind: &str) -> FakeApi {
            FakeApi::start_with_crd(netns, yaml, bind, "newest")
        }

        /// [`FakeApi::start_on`] with the XBackend CRD of `gateway_api` installed (as
        /// `redirector crd --gateway-api` prints it: `newest` or `v1.6`); every cluster
        /// the agent runs on has one, and the agent writes status in its shape.
        pub fn start_with_crd(netns: &Netns, yaml: &str, bind: &str, gateway_api: &str) -> FakeApi {
            let dir = tempfile::tempdir().expect("fakeapi dir");
            let state = dir.path().join("state");
            std::fs::create_dir(&state).expect("state dir");
            let text = serde_json::to_string_pretty(&documents(yaml)).expect("JSON");
            write_atomically(&state, "initial.json", &text);
            write_atomically(&state, "xbackend-crd.json", &crd_json(gateway_api));
            let local = match bind.parse::<std::net::SocketAddr>() {
                Ok(addr) if addr.ip().is_unspecified() => format!("127.0.0.1:{}", addr.port()),
                _ => bind.to_owned(),
            };
            write_kubeconfig(&dir.path().join("kubeconfig"), &local);
            let mut command = netns.exec(FAKEAPI);
            command.arg(bind).arg(dir.path().join("state"));
            let mut child = ChildGuard::spawn("fakeapi", &mut command).expect("start fakeapi");
            child
                .wait_for_line("listening", PROBE_TIMEOUT)
                .expect("fakeapi listens");
            FakeApi { child, dir }
        }

        /// A kubeconfig whose server is `http://{server}` (`IP:PORT`).
        pub fn kubeconfig_via(&self, server: &str) -> PathBuf {
            let path = (self.dir.path()).join(format!("kubeconfig-{}", server.replace(':', "-")));
            write_kubeconfig(&path, server);
            path
        }

        /// [`FakeApi::agent_args`] for an agent that reaches the server at `server`.
        pub fn agent_args_via(&self, node: &str, server: &str) -> Vec<String> {
            vec![
                "--kubernetes".to_owned(),
                "--kubeconfig".to_owned(),
                self.kubeconfig_via(server).display().to_string(),
                "--node-name".to_owned(),
                node.to_owned(),
            ]
        }

        pub fn state_dir(&self) -> PathBuf {
            self.dir.path().join("state")
        }

        pub fn kubeconfig(&self) -> PathBuf {
            self.dir.path().join("kubeconfig")
        }

        /// `redirector run` arguments for the agent of `node` (Backend scope as the
        /// agent's default: per namespace).
        pub fn agent_args(&self, node: &str) -> Vec<String> {
            vec![
                "--kubernetes".to_owned(),
                "--kubeconfig".to_owned(),
                self.kubeconfig().display().to_string(),
                "--node-name".to_owned(),
                node.to_owned(),
            ]
        }

        /// Stores the objects of `yaml` (documents separated by `---`) as `name`,
        /// replacing what `name` held: the server turns the difference into events.
        pub fn apply(&self, name: &str, yaml: &str) {
            self.apply_objects(name, documents(yaml));
        }

        pub fn apply_objects(&self, name: &str, objects: Vec<Value>) {
            let text = serde_json::to_string_pretty(&objects).expect("JSON");
            write_atomically(&self.state_dir(), &format!("{name}.json"), &text);
        }

        /// Replaces the installed XBackend CRD with `gateway_api`'s (see
        /// [`FakeApi::start_with_crd`]).
        pub fn install_crd(&self, gateway_api: &str) {
            write_atomically(
                &self.state_dir(),
                "xbackend-crd.json",
                &crd_json(gateway_api),
            );
        }

        /// Deletes the objects stored as `name`.
        pub fn delete(&self, name: &str) {
            std::fs::remove_file(self.state_dir().join(format!("{name}.json")))
                .expect("delete objects");
        }

        /// Expires every resourceVersion: open watches get a 410 `ERROR` event, or with
        /// `http`, are closed and their next watch request gets HTTP 410.
        pub fn expire(&mut self, http: bool) -> String {
            let mode = if http { "http" } else { "event" };
            write_atomically(&self.state_dir(), ".gone", mode);
            self.wait_for("gone rv=")
        }

        /// ServiceCIDRs are answered 404 from now on, as by API servers before 1.33.
        pub fn hide_service_cidrs(&mut self) {
            self.hide("servicecidrs");
        }

        /// `plural` is answered 404 from now on (its CRD or kind not served).
        pub fn hide(&mut self, plural: &str) {
            write_atomically(&self.state_dir(), &format!(".no-{plural}"), "");
            self.wait_for(&format!("{plural} served=false"));
        }

        /// `plural` is served again (its CRD installed).
        pub fn unhide(&mut self, plural: &str) {
            let _ = std::fs::remove_file(self.state_dir().join(format!(".no-{plural}")));
            self.wait_for(&format!("{plural} served=true"));
        }

        /// The API server goes away (listener closed, connections cut) until [`Self::up`].
        pub fn down(&mut self) {
            write_atomically(&self.state_dir(), ".down", "refuse");
            self.wait_for("down Refuse");
        }

        pub fn up(&mut self) {
            std::fs::remove_file(self.state_dir().join(".down")).expect("remove .down");
            self.wait_for("up");
        }

        /// Waits for the next line containing `needle` (`list /api/v1/...`, `watch ...`,
        /// `event MODIFIED configmaps demo/api-ca`...).
        pub fn wait_for(&mut self, needle: &str) -> String {
            self.child
                .wait_for_line(needle, xtask::netlab::agent::READY_TIMEOUT)
                .expect("fakeapi line")
        }

        /// Waits until a `list` or `watch` (`verb`) request of `path` whose query has
        /// every one of `params` (`fieldSelector=metadata.name=api-ca`) has been made,
        /// now or at any time before.
        pub fn wait_for_request(&mut self, verb: &str, path: &str, params: &[&str]) -> String {
            let prefix = format!("{verb} {path}?");
            let wanted = |line: &String| {
                let query = line.strip_prefix(&prefix).unwrap_or_default();
                line.starts_with(&prefix)
                    && params.iter().all(|p| query.split('&').any(|q| q == *p))
            };
            loop {
                if let Some(line) = self.lines().into_iter().find(wanted) {
                    return line;
                }
                self.wait_for(&prefix);
            }
        }

        /// [`FakeApi::wait_for`] with its own timeout (a Lease expiry takes longer than
        /// the default).
        pub fn wait_for_within(&mut self, needle: &str, timeout: std::time::Duration) -> String {
            self.child
                .wait_for_line(needle, timeout)
                .expect("fakeapi line")
        }

        /// Everything it printed so far.
        pub fn lines(&self) -> Vec<String> {
            self.child.lines(xtask::netlab::Stream::Stdout)
        }

        /// The status PATCHes it answered 200 so far, in order: the JSON lines
        /// (`path`, `query`, `contentType`, `body`, `code`).
        pub fn status_patches(&self) -> Vec<Value> {
            (self.lines().iter())
                .filter(|l| l.starts_with("{\"") && l.contains("\"PATCH\""))
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|p| p["method"] == "PATCH" && p["code"] == 200)
                .collect()
        }

        /// Waits until more than `before` status PATCHes were answered 200; returns the
        /// ones after the first `before`.
        pub fn wait_for_status_patches(&mut self, before: usize) -> Vec<Value> {
            loop {
                let patches = self.status_patches();
                if patches.len() > before {
                    return patches[before..].to_vec();
                }
                self.wait_for("\"method\":\"PATCH\"");
            }
        }
    }

    fn write_kubeconfig(path: &Path, server: &str) {
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters: [{{name: fake, cluster: {{server: \"http://{server}\"}}}}]\n\
             users: [{{name: fake, user: {{}}}}]\n\
             contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]\n"
        );
        std::fs::write(path, kubeconfig).expect("kubeconfig");
    }

    /// The documents of a multi-document YAML text, as JSON values.
    pub fn documents(yaml: &str) -> Vec<Value> {
        serde_yaml_ng::Deserializer::from_str(yaml)
            .map(|document| Value::deserialize(document).expect("YAML"))
            .filter(|value| !value.is_null())
            .collect()
    }

    /// The XBackend CRD `redirector crd --gateway-api VERSION` prints, as JSON: the one a
    /// cluster would have had applied from it.
    fn crd_json(gateway_api: &str) -> String {
        let out = xtask::netlab::agent::redirector(&["crd", "--gateway-api", gateway_api])
            .expect("redirector crd");
        assert!(out.status.success(), "redirector crd: {out:?}");
        let yaml = String::from_utf8(out.stdout).expect("UTF-8");
        let crds: Vec<Value> = documents(&yaml)
            .into_iter()
            .filter(|d| d["metadata"]["name"] == "xbackends.gateway.networking.x-k8s.io")
            .collect();
        assert_eq!(crds.len(), 1, "one XBackend CRD in `redirector crd`");
        serde_json::to_string_pretty(&crds).expect("JSON")
    }

    fn write_atomically(dir: &Path, name: &str, text: &str) {
        let temporary = dir.join(format!(".{name}.tmp"));
        std::fs::write(&temporary, text).expect("write");
        std::fs::rename(&temporary, dir.join(name)).expect("rename");
    }
}
