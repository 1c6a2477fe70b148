//! Third-party Python peers (grpcio, websockets, the MCP SDK from PyPI) run from the
//! helper scripts beside this file and under `mcp/`, with the interpreter of the
//! environment `cargo xtask test` makes.

use std::{ffi::OsStr, path::PathBuf, time::Duration};

use xtask::netlab::{ChildGuard, Netns, Topology};

use super::tls::Leaf;

/// `grpc_peer.py`: grpcio server (TLS) and client (plaintext).
pub const GRPC_PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/grpc_peer.py");
/// `ws_peer.py`: websockets server (TLS) and client (`ws://`).
pub const WS_PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/ws_peer.py");

/// How long a server may take to start listening (grpcio's import takes ~1 s on a
/// loaded machine).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The interpreter with grpcio, websockets and the MCP SDK: `$REDIRECTOR_TEST_PYTHON`, which
/// `cargo xtask test` sets after making the environment.
pub fn python() -> PathBuf {
    let path = std::env::var_os("REDIRECTOR_TEST_PYTHON").map(PathBuf::from);
    path.filter(|p| p.is_file()).expect(
        "REDIRECTOR_TEST_PYTHON must name a Python with grpcio, websockets and mcp: run the \
         tests with `cargo xtask test`, which makes target/test-python and sets it",
    )
}

/// `python SCRIPT ARGS..` in the pod (its netns and cgroup), to its end.
pub fn run_in_pod<S: AsRef<OsStr>>(topo: &Topology, args: &[S]) -> Vec<String> {
    let mut command = topo.spawn_in_pod(python(), args);
    // Nothing from the test's environment reroutes the client: its connection is the
    // pod's own, seen by the hooks. The native resolver reads the pod's hosts file.
    for proxy in ["http_proxy", "https_proxy", "all_proxy", "grpc_proxy"] {
        command.env_remove(proxy).env_remove(proxy.to_uppercase());
    }
    command.env("GRPC_DNS_RESOLVER", "native");
    let mut child = ChildGuard::spawn("python-client", &mut command).expect("start python");
    let done = child
        .finish(Duration::from_secs(120))
        .expect("python client finished");
    assert!(
        done.status.success(),
        "python client exited {}: {:?}\n{}",
        done.status,
        done.stdout,
        done.stderr.join("\n")
    );
    done.stdout
}

/// A Python server (`SCRIPT serve PORT CERT KEY`) in a namespace, with `leaf` as its
/// certificate; killed on drop.
pub struct PythonServer {
    pub child: ChildGuard,
    _files: tempfile::TempDir,
}

impl PythonServer {
    /// Starts `script` in `netns` on `port` and waits until it says it listens.
    pub fn start(netns: &Netns, script: &str, port: u16, leaf: &Leaf) -> PythonServer {
        let files = tempfile::tempdir().expect("server files");
        let cert = files.path().join("server.crt");
        let key = files.path().join("server.key");
        std::fs::write(&cert, &leaf.cert_pem).expect("certificate");
        std::fs::write(&key, &leaf.key_pem).expect("key");
        let mut command = netns.exec(python());
        command.arg(script).arg("serve").arg(port.to_string());
        command.arg(&cert).arg(&key);
        let label = std::path::Path::new(script)
            .file_stem()
            .and_then(OsStr::to_str)
            .unwrap_or("python-server")
            .to_owned();
        let mut child = ChildGuard::spawn(&label, &mut command).expect("start server");
        child
            .wait_for_line("listening", START_TIMEOUT)
            .expect("python server listens");
        PythonServer {
            child,
            _files: files,
        }
    }

    /// The lines it printed so far that start with `prefix`.
    pub fn lines_starting(&self, prefix: &str) -> Vec<String> {
        (self.child.lines(xtask::netlab::Stream::Stdout).into_iter())
            .filter(|line| line.starts_with(prefix))
            .collect()
    }
}
