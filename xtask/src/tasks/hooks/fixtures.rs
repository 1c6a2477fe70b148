//! What the bench runs next to the agent: a quiet `netprobe serve` in ext, and the fake
//! Kubernetes API server (`fakeapi ADDR STATE_DIR`, the binary the `--kubernetes` tests
//! use) in the node, started the way `xtask/tests/support` starts it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use xtask::netlab::{ChildGuard, Netns, probe::PROBE_TIMEOUT};

/// The Backend hostname and port every case dials (by address).
pub const HOSTNAME: &str = "echo.redirector.test";
pub const PORT: u16 = 8080;
/// The node name the agent is told, and the pods' `spec.nodeName`.
pub const NODE: &str = "node1";
/// Where fakeapi listens, inside the node.
const API_ADDR: &str = "127.0.0.1:6443";

/// `netprobe serve ADDR` whose per-connection output is read and dropped (thousands of
/// `accepted` lines would only flood the terminal); killed and reaped on drop.
pub struct QuietServer {
    child: Child,
}

impl QuietServer {
    pub fn start(probe: &Path, netns: &Netns, addr: &str) -> Result<QuietServer> {
        let mut command = netns.exec(probe);
        command.args(["serve", addr]).stdout(Stdio::piped());
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot spawn {command:?}"))?;
        let stdout = child.stdout.take();
        // The guard exists before anything can fail.
        let server = QuietServer { child };
        let Some(stdout) = stdout else {
            bail!("netprobe serve: no stdout pipe");
        };
        let mut reader = BufReader::new(stdout);
        let mut first = String::new();
        reader
            .read_line(&mut first)
            .context("reading netprobe serve's first line")?;
        if !first.starts_with("listening") {
            bail!("netprobe serve {addr} did not start (printed {first:?})");
        }
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        Ok(server)
    }
}

impl Drop for QuietServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running fakeapi (killed on drop) and its state directory.
pub struct FakeApi {
    _child: ChildGuard,
    dir: tempfile::TempDir,
}

impl FakeApi {
    /// Starts `fakeapi` in `netns` serving `objects` and waits until it listens.
    pub fn start(bin: &Path, netns: &Netns, objects: &[Value]) -> Result<FakeApi> {
        let dir = tempfile::Builder::new()
            .prefix("rdhooksapi")
            .tempdir()
            .context("cannot create fakeapi's directory")?;
        let state = dir.path().join("state");
        std::fs::create_dir(&state)
            .with_context(|| format!("cannot create {}", state.display()))?;
        let text = serde_json::to_string_pretty(objects).context("objects as JSON")?;
        write(&state.join("initial.json"), &text)?;
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters: [{{name: fake, cluster: {{server: \"http://{API_ADDR}\"}}}}]\n\
             users: [{{name: fake, user: {{}}}}]\n\
             contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]\n"
        );
        write(&dir.path().join("kubeconfig"), &kubeconfig)?;
        let mut command = netns.exec(bin);
        command.arg(API_ADDR).arg(&state);
        let mut child = ChildGuard::spawn("fakeapi", &mut command)?;
        child
            .wait_for_line("listening", PROBE_TIMEOUT)
            .context("fakeapi did not start")?;
        Ok(FakeApi { _child: child, dir })
    }

    /// `redirector run` arguments for Backends from this server with `scope`.
    pub fn agent_args(&self, scope: &str) -> Vec<String> {
        vec![
            "--kubernetes".into(),
            "--kubeconfig".into(),
            self.kubeconfig().display().to_string(),
            "--node-name".into(),
            NODE.into(),
            "--backend-scope".into(),
            scope.into(),
        ]
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }
}

/// The plain-TCP XBackend `echo` of `namespace` for [`HOSTNAME`]:[`PORT`].
pub fn backend(namespace: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
        "kind": "XBackend",
        "metadata": {"name": "echo", "namespace": namespace},
        "spec": {
            "type": "ExternalHostname",
            "externalHostname": {"hostname": HOSTNAME},
            "port": {"port": PORT},
            "protocol": "TCP"
        }
    })
}

/// A pod of [`NODE`].
pub fn pod(name: &str, namespace: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "app"}]}
    })
}

/// The same Backend as [`backend`], as YAML for a Backend directory.
pub fn backend_yaml() -> String {
    format!(
        "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\n\
         metadata: {{name: echo, namespace: demo}}\n\
         spec:\n  type: ExternalHostname\n  externalHostname: {{hostname: {HOSTNAME}}}\n  \
         port: {{number: {PORT}}}\n  protocol: TCP\n"
    )
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
