//! TLS towards Backends, end to end: a plaintext client in the pod, the agent in the node
//! originating TLS as `spec.tls` says, a rustls server (`netprobe serve-tls`) in the
//! external namespace, certificates made at test time.
//!
//! A refused connection is checked from three sides: the client gets a closed connection,
//! the server never sees an application byte, and the agent counts the reason in
//! `/metrics` and logs it.

mod support;

#[path = "tls/client_tls.rs"]
mod client_tls;
#[path = "tls/kernel.rs"]
mod kernel;
#[path = "tls/mutual.rs"]
mod mutual;
#[path = "tls/origination.rs"]
mod origination;
#[path = "tls/refusals.rs"]
mod refusals;
#[path = "tls/wire.rs"]
mod wire;

use support::{
    Bed,
    tls::{
        API_BACKEND, API_PORT, API_TARGET, ApiBackend, Ca, Leaf, TlsServer, sample, wait_for_sample,
    },
};
use xtask::netlab::{EXT_V4, NODE_EXT_V4, agent::Agent, probe::Reply};

const REFUSED: &str = "redirector_connections_refused_total";
const HANDSHAKE_FAILURES: &str = "redirector_tls_handshake_failures_total";
const FORWARDED: &str = "redirector_connections_forwarded_total";

/// A bed with the TLS server on ext `[::]:8443` and the agent running.
/// Field order is drop order: processes first, namespaces last.
struct TlsBed {
    server: TlsServer,
    agent: Agent,
    bed: Bed,
}

impl TlsBed {
    fn new(backend: &ApiBackend<'_>, leaf: &Leaf, client_ca: Option<&Ca>) -> TlsBed {
        TlsBed::with_yaml(&backend.yaml(), leaf, client_ca)
    }

    fn with_yaml(yaml: &str, leaf: &Leaf, client_ca: Option<&Ca>) -> TlsBed {
        let bed = Bed::new(yaml);
        let server = TlsServer::start(&bed.topo.ext, "[::]:8443", leaf, client_ca);
        let agent = bed.agent();
        TlsBed { server, agent, bed }
    }

    /// The plaintext client: `netprobe connect api.redirector.test:8443 -4 --send hello`.
    fn connect(&self, extra: &[&str]) -> Reply {
        let mut args = vec!["-4"];
        args.extend_from_slice(extra);
        self.bed.connect(API_TARGET, &args)
    }

    /// One connection went through: the client got the server's answer over TLS.
    fn assert_answered(&mut self, reply: &Reply) {
        assert!(reply.ok(), "{:?}", reply.json);
        assert_eq!(
            reply.peer(),
            format!("{EXT_V4}:{API_PORT}"),
            "getpeername()"
        );
        assert!(reply.reply().ends_with("got=hello"), "{:?}", reply.json);
        let seen = reply.seen_by_server().unwrap_or_default();
        assert!(
            seen.starts_with(&format!("{NODE_EXT_V4}:")),
            "the server must see the node (the proxy), saw {seen}"
        );
        self.server.wait_closed();
    }

    /// The handshake the server completed last (`handshake-ok <peer> sni=.. alpn=..`).
    fn last_handshake(&self) -> String {
        let ok = self.server.lines_starting("handshake-ok");
        ok.last()
            .cloned()
            .expect("the server completed a handshake")
    }

    /// A refused connection: closed for the client, no application byte at the server,
    /// `reason` counted once for demo/api (and `failure` among handshake failures), and
    /// a log line naming the Backend, the destination and the reason.
    fn assert_refused(&mut self, reply: &Reply, reason: &str, failure: Option<&str>) {
        assert!(
            !reply.ok() || reply.reply().is_empty(),
            "the client got an answer from a refused connection: {:?}",
            reply.json
        );
        let lines = self.server.wait_closed();
        let received: Vec<&String> = lines.iter().filter(|l| l.starts_with("received")).collect();
        assert!(
            received.is_empty(),
            "application bytes reached the server: {received:?}"
        );
        self.assert_counted(reason, failure);
    }

    fn assert_counted(&mut self, reason: &str, failure: Option<&str>) {
        let node = &self.bed.topo.node;
        let labels = [("backend", API_BACKEND), ("reason", reason)];
        let text = wait_for_sample(node, REFUSED, &labels, 1.0);
        assert_eq!(
            sample(&text, REFUSED, &labels),
            Some(1.0),
            "{REFUSED}{labels:?} must count the refusal once; /metrics:\n{text}\nagent:\n{}",
            self.agent.logs().join("\n")
        );
        if let Some(failure) = failure {
            let labels = [("backend", API_BACKEND), ("reason", failure)];
            assert_eq!(
                sample(&text, HANDSHAKE_FAILURES, &labels),
                Some(1.0),
                "{HANDSHAKE_FAILURES}{labels:?}; /metrics:\n{text}"
            );
            // With TLS 1.3 the server judges our client certificate after the proxy's
            // side of the handshake is complete: the proxy is already forwarding (the
            // client's bytes go out encrypted, and the server drops them) when the
            // rejection arrives. Every other failure happens before forwarding.
            if failure != "rejected_by_server" {
                assert_eq!(
                    sample(&text, FORWARDED, &[("backend", API_BACKEND)]).unwrap_or(0.0),
                    0.0,
                    "a failed handshake is not a forwarded connection; /metrics:\n{text}"
                );
            }
        }
        let needle = format!("reason=\"{reason}\"");
        let line = self.agent.wait_for_log(&needle).expect("refusal logged");
        for part in ["refused", API_BACKEND, &format!("{EXT_V4}:{API_PORT}")] {
            assert!(line.contains(part), "the log line must name {part}: {line}");
        }
    }
}
