//! The `netprobe serve-tls` server of the TLS tests, and what it printed.

use std::path::PathBuf;

use xtask::netlab::{ChildGuard, Netns, probe::PROBE_TIMEOUT};

use super::{Ca, Leaf};
use crate::support::PROBE;

/// A `netprobe serve-tls` process; killed on drop. Its PEM files live in its own
/// temporary directory (not in the Backend directory the agent reads).
pub struct TlsServer {
    child: ChildGuard,
    _files: tempfile::TempDir,
}

impl TlsServer {
    /// Starts `netprobe serve-tls ADDR` in `netns` with `leaf`, requiring client
    /// certificates signed by `client_ca` if given, and waits until it listens.
    pub fn start(netns: &Netns, addr: &str, leaf: &Leaf, client_ca: Option<&Ca>) -> TlsServer {
        let files = tempfile::tempdir().expect("server files");
        let write = |name: &str, pem: &str| -> PathBuf {
            let path = files.path().join(name);
            std::fs::write(&path, pem).expect("write PEM");
            path
        };
        let cert = write("server.crt", &leaf.cert_pem);
        let key = write("server.key", &leaf.key_pem);
        let mut command = netns.exec(PROBE);
        command
            .args(["serve-tls", addr, "--cert"])
            .arg(&cert)
            .arg("--key")
            .arg(&key);
        if let Some(ca) = client_ca {
            command
                .arg("--client-ca")
                .arg(write("client-ca.crt", &ca.pem()));
        }
        let label = format!("tls-server {addr}");
        let mut child = ChildGuard::spawn(&label, &mut command).expect("start serve-tls");
        child
            .wait_for_line("listening", PROBE_TIMEOUT)
            .expect("serve-tls listens");
        TlsServer {
            child,
            _files: files,
        }
    }

    /// Waits until the server is done with its next connection (its `closed` line) and
    /// returns everything it printed so far.
    pub fn wait_closed(&mut self) -> Vec<String> {
        self.child
            .wait_for_line("closed ", PROBE_TIMEOUT)
            .expect("the TLS server finished a connection");
        self.lines()
    }

    /// Everything the server printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.child.lines(xtask::netlab::Stream::Stdout)
    }

    /// The lines starting with `word` (`accepted`, `handshake-ok`, `received`...).
    pub fn lines_starting(&self, word: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.split(' ').next() == Some(word))
            .collect()
    }
}
