//! The fake Kubernetes API server (`fakeapi`) of the `--kubernetes` tests, run in the
//! node's network namespace where the agent reaches it at [`API_ADDR`].

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
            line.starts_with(&prefix) && params.iter().all(|p| query.split('&').any(|q| q == *p))
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
