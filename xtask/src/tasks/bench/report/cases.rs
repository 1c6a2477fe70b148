//! The nine ways from the pod to the service, and the `--cases` names that select them.
//!
//! Two kinds of TLS Backend are measured, each against the HAProxy mode that does the
//! same work: a TCP Backend (bytes spliced, one upstream TLS connection per client
//! connection) against HAProxy `mode tcp`, and an HTTP Backend (requests parsed, upstream
//! connections pooled and reused across client connections) against HAProxy `mode http`
//! with `http-reuse always`. Direct TLS is the floor both are held to for bulk
//! throughput. A plaintext Backend (no `tls`, bytes forwarded unchanged, port 80) is held
//! to plaintext HTTP straight to nginx, with HAProxy `mode tcp` in plaintext (splice) as
//! the reference proxy on the same path. The TCP Backend is measured once more under
//! `--egress-policy deny`, against itself under the default `allow`, and the HTTP Backend
//! once more with a BackendPolicy (one credential, two rules), against itself without.

use anyhow::{Result, bail};

use crate::tasks::bench::SERVICE_PORT;

/// What a proxy forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// Bytes: one upstream connection per client connection.
    Tcp,
    /// HTTP requests: upstream connections pooled and reused.
    Http,
}

impl Layer {
    /// The XBackend `spec.protocol` of the redirector case of this layer.
    pub fn protocol(self) -> &'static str {
        match self {
            Layer::Tcp => "TCP",
            Layer::Http => "HTTP",
        }
    }
}

/// One way from the pod to the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// wrk speaks TLS to nginx itself: the floor no proxy can beat.
    Direct,
    /// Plaintext to HAProxy `mode tcp` (via DNAT), which originates TLS.
    HaproxyTcp,
    /// Plaintext, redirected by the agent's eBPF hooks to its proxy, which originates TLS
    /// for a `protocol: TCP` Backend.
    RedirectorTcp,
    /// As [`Case::RedirectorTcp`] with `--egress-policy deny`: what the policy costs the
    /// bytes path (the pod's packets pass the `cgroup_skb` program's policy check).
    RedirectorTcpDeny,
    /// Plaintext HTTP/1.1 to HAProxy `mode http`, `http-reuse always` (via DNAT).
    HaproxyHttp,
    /// Plaintext HTTP/1.1, redirected to the agent's proxy, for a `protocol: HTTP` Backend.
    RedirectorHttp,
    /// As [`Case::RedirectorHttp`] with a BackendPolicy on the Backend: one credential
    /// from a Secret set on every request and two rules to match (the request matches the
    /// second), what the policy costs per request.
    RedirectorHttpPolicy,
    /// Plaintext HTTP straight to nginx's port 80: the floor of the plaintext Backend.
    DirectPlain,
    /// Plaintext HTTP to port 80, sent by DNAT to HAProxy `mode tcp` (splice), which
    /// forwards it to nginx's port 80 unchanged: the reference proxy of the plaintext path.
    HaproxyPlain,
    /// Plaintext HTTP to port 80, redirected to the agent's proxy, for a Backend with no
    /// `tls` and `protocol: TCP`: bytes forwarded unchanged.
    RedirectorPlain,
}

/// How many cases there are (the size of the per-case tables).
pub const CASES: usize = 10;

/// The port the plaintext cases dial (nginx listens on it without TLS).
pub const PLAIN_PORT: u16 = 80;

impl Case {
    /// Run order within a repetition: the reference first, then each proxy pair.
    pub const ALL: [Case; CASES] = [
        Case::Direct,
        Case::HaproxyTcp,
        Case::RedirectorTcp,
        Case::RedirectorTcpDeny,
        Case::HaproxyHttp,
        Case::RedirectorHttp,
        Case::RedirectorHttpPolicy,
        Case::DirectPlain,
        Case::HaproxyPlain,
        Case::RedirectorPlain,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Case::Direct => "direct TLS (wrk → nginx)",
            Case::HaproxyTcp => "HAProxy mode tcp (nbthread 1)",
            Case::RedirectorTcp => "redirector, protocol TCP",
            Case::RedirectorTcpDeny => "redirector, protocol TCP, --egress-policy deny",
            Case::HaproxyHttp => "HAProxy mode http (nbthread 1)",
            Case::RedirectorHttp => "redirector, protocol HTTP",
            Case::RedirectorHttpPolicy => {
                "redirector, protocol HTTP, BackendPolicy (1 credential, 2 rules)"
            }
            Case::DirectPlain => "direct plaintext (wrk → nginx :80)",
            Case::HaproxyPlain => "HAProxy mode tcp, plaintext (nbthread 1, splice)",
            Case::RedirectorPlain => "redirector, plaintext Backend",
        }
    }

    /// The name `--cases` knows it by.
    pub fn name(self) -> &'static str {
        match self {
            Case::Direct => "direct",
            Case::HaproxyTcp => "haproxy-tcp",
            Case::RedirectorTcp => "redirector-tcp",
            Case::RedirectorTcpDeny => "redirector-tcp-deny",
            Case::HaproxyHttp => "haproxy-http",
            Case::RedirectorHttp => "redirector-http",
            Case::RedirectorHttpPolicy => "redirector-http-policy",
            Case::DirectPlain => "direct-plain",
            Case::HaproxyPlain => "haproxy-plain",
            Case::RedirectorPlain => "redirector-plain",
        }
    }

    /// The URL prefix the client uses: the same host and port for all, plaintext for the
    /// proxies (the client cannot tell which proxy, if any, is in the way); plaintext to
    /// port 80 for the plaintext cases.
    pub fn base_url(self) -> &'static str {
        match self {
            Case::Direct => "https://api.redirector.test",
            Case::DirectPlain | Case::HaproxyPlain | Case::RedirectorPlain => {
                "http://api.redirector.test:80"
            }
            _ => "http://api.redirector.test:443",
        }
    }

    /// The service port the client dials: the TLS port, or [`PLAIN_PORT`] for the
    /// plaintext cases (the port a HAProxy case's DNAT matches).
    pub fn port(self) -> u16 {
        match self {
            Case::DirectPlain | Case::HaproxyPlain | Case::RedirectorPlain => PLAIN_PORT,
            _ => SERVICE_PORT,
        }
    }

    /// The direct cases and HAProxy: the cases that must work for the report to mean
    /// anything.
    pub fn is_reference(self) -> bool {
        !self.is_redirector()
    }

    /// The cases measured through the agent.
    pub fn is_redirector(self) -> bool {
        matches!(
            self,
            Case::RedirectorTcp
                | Case::RedirectorTcpDeny
                | Case::RedirectorHttp
                | Case::RedirectorHttpPolicy
                | Case::RedirectorPlain
        )
    }

    /// The cases measured through HAProxy (reached by the DNAT).
    pub fn is_haproxy(self) -> bool {
        matches!(
            self,
            Case::HaproxyTcp | Case::HaproxyHttp | Case::HaproxyPlain
        )
    }

    /// The cases with no proxy in the way.
    pub fn is_direct(self) -> bool {
        matches!(self, Case::Direct | Case::DirectPlain)
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// Parses `--cases`: comma-separated case names or groups, returned in run order.
    /// `tcp` and `http` include direct TLS, the bulk reference of both; `plain` is direct
    /// plaintext, HAProxy in plaintext and the plaintext Backend.
    pub fn select(text: &str) -> Result<Vec<Case>> {
        let mut chosen = Vec::new();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let group: Vec<Case> = match word {
                "all" => Case::ALL.to_vec(),
                "tcp" => vec![Case::Direct, Case::HaproxyTcp, Case::RedirectorTcp],
                "http" => vec![Case::Direct, Case::HaproxyHttp, Case::RedirectorHttp],
                "plain" => vec![Case::DirectPlain, Case::HaproxyPlain, Case::RedirectorPlain],
                "haproxy" => vec![Case::HaproxyTcp, Case::HaproxyHttp, Case::HaproxyPlain],
                "redirector" => vec![
                    Case::RedirectorTcp,
                    Case::RedirectorTcpDeny,
                    Case::RedirectorHttp,
                    Case::RedirectorHttpPolicy,
                    Case::RedirectorPlain,
                ],
                _ => match Case::ALL.iter().find(|c| c.name() == word) {
                    Some(&case) => vec![case],
                    None => bail!(
                        "--cases: unknown case {word:?} (known: {}, or tcp, http, plain, haproxy, redirector, all)",
                        Case::ALL.map(Case::name).join(", ")
                    ),
                },
            };
            chosen.extend(group);
        }
        if chosen.is_empty() {
            bail!("--cases: no case named");
        }
        Ok(Case::ALL
            .into_iter()
            .filter(|c| chosen.contains(c))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection() {
        assert_eq!(Case::select("all").unwrap(), Case::ALL);
        assert_eq!(
            Case::select("redirector-http, haproxy-http").unwrap(),
            [Case::HaproxyHttp, Case::RedirectorHttp]
        );
        assert_eq!(
            Case::select("http").unwrap(),
            [Case::Direct, Case::HaproxyHttp, Case::RedirectorHttp]
        );
        assert_eq!(
            Case::select("redirector,direct").unwrap(),
            [
                Case::Direct,
                Case::RedirectorTcp,
                Case::RedirectorTcpDeny,
                Case::RedirectorHttp,
                Case::RedirectorHttpPolicy,
                Case::RedirectorPlain
            ]
        );
        assert_eq!(
            Case::select("plain").unwrap(),
            [Case::DirectPlain, Case::HaproxyPlain, Case::RedirectorPlain]
        );
        assert_eq!(
            Case::select("haproxy").unwrap(),
            [Case::HaproxyTcp, Case::HaproxyHttp, Case::HaproxyPlain]
        );
        assert_eq!(Case::select("haproxy-plain").unwrap(), [Case::HaproxyPlain]);
        for case in Case::ALL {
            assert_eq!(
                case.base_url().ends_with(&format!(":{}", case.port())),
                case != Case::Direct
            );
        }
        assert!(Case::select("nginx").is_err());
        assert!(Case::select(",").is_err());
        for (i, case) in Case::ALL.iter().enumerate() {
            assert_eq!(case.index(), i);
        }
    }
}
