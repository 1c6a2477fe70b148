//! What the agent is doing, per Backend: served as JSON on `/backends` and rendered by
//! `redirector status`.

use std::{
    collections::BTreeMap,
    io::Read,
    io::Write,
    net::SocketAddr,
    net::TcpStream,
    sync::{Arc, RwLock},
    time::Duration,
};

use serde::{Deserialize, Serialize};

/// A Backend's state as an operator needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendStatus {
    /// `namespace/name`.
    pub name: String,
    /// `Ready`, `Invalid`, `Resolving`, `RefError` or `Contested` (its id is claimed by
    /// another Backend's name too: connections refused).
    pub state: String,
    /// Why it is not `Ready`, or what to know although it is (a kept last good version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub port: u16,
    /// `spec.protocol`: `TCP` (bytes) or the HTTP protocol the proxy speaks.
    #[serde(default)]
    pub protocol: String,
    /// `none` when the bytes pass unchanged.
    #[serde(default)]
    pub tls: String,
    #[serde(default)]
    pub addresses: Vec<String>,
    /// With DNS capture: the hostname's virtual IPv4 and IPv6 addresses, which pods
    /// get from the agent's DNS answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub virtual_addresses: Vec<String>,
    /// The BackendPolicy in force (`namespace/name`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default)]
    pub active_connections: i64,
    /// The same by the namespace of the pods that opened them (`""`: outside Kubernetes,
    /// or a process in no known pod); absent when none are open.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub active_by_source_namespace: BTreeMap<String, i64>,
}

/// Renders the statuses of one published state.
pub type Rows = Arc<dyn Fn() -> Vec<BackendStatus> + Send + Sync>;

/// The latest state, replaced as a whole by the reconciler and rendered only when asked:
/// with 10,000 Backends, rows kept ready would cost megabytes for a page rarely read.
#[derive(Default)]
pub struct StatusBoard(RwLock<Option<Rows>>);

impl StatusBoard {
    pub fn publish(&self, rows: Rows) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(rows);
    }

    pub fn snapshot(&self) -> Vec<BackendStatus> {
        let rows = self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        rows.map(|rows| rows()).unwrap_or_default()
    }
}

/// `redirector status`: fetches `/backends` from a running agent and prints a table.
pub fn print(admin: SocketAddr) -> anyhow::Result<()> {
    let body = http_get(admin, "/backends")?;
    let statuses: Vec<BackendStatus> = serde_json::from_str(&body)
        .map_err(|e| anyhow::anyhow!("unexpected /backends answer from {admin}: {e}"))?;
    print!("{}", render(&statuses));
    Ok(())
}

fn render(statuses: &[BackendStatus]) -> String {
    let mut rows = vec![[
        "BACKEND".to_owned(),
        "STATE".to_owned(),
        "HOSTNAME:PORT".to_owned(),
        "PROTOCOL".to_owned(),
        "TLS".to_owned(),
        "ACTIVE".to_owned(),
        "VIRTUAL".to_owned(),
        "ADDRESSES".to_owned(),
    ]];
    for s in statuses {
        let state = match &s.reason {
            Some(reason) => format!("{} ({reason})", s.state),
            None => s.state.clone(),
        };
        rows.push([
            s.name.clone(),
            state,
            format!("{}:{}", s.hostname, s.port),
            s.protocol.clone(),
            s.tls.clone(),
            active(s),
            match s.virtual_addresses.is_empty() {
                true => "-".to_owned(),
                false => s.virtual_addresses.join(","),
            },
            s.addresses.join(","),
        ]);
    }
    let widths: Vec<usize> = (0..8)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Active connections, and by source namespace when any came from a pod: `3 (team-a:
/// 2, -: 1)`, `-` for sources outside any pod.
fn active(status: &BackendStatus) -> String {
    let total = status.active_connections.to_string();
    let by = &status.active_by_source_namespace;
    if by.keys().all(String::is_empty) {
        return total;
    }
    let each: Vec<String> = (by.iter())
        .map(|(namespace, n)| match namespace.as_str() {
            "" => format!("-: {n}"),
            namespace => format!("{namespace}: {n}"),
        })
        .collect();
    format!("{total} ({})", each.join(", "))
}

/// A one-shot HTTP/1.0 GET; the admin endpoint is local and answers small bodies.
fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let stream = TcpStream::connect_timeout(&addr, TIMEOUT)
        .map_err(|e| anyhow::anyhow!("cannot reach the agent's admin endpoint at {addr} ({e}); is `redirector run` running with this --admin-addr?"))?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    get_over(stream, &addr.to_string(), path)
}

const TIMEOUT: Duration = Duration::from_secs(5);

/// `GET path` on an open connection to the admin endpoint; the body if it says 200.
fn get_over(mut stream: impl Read + Write, host: &str, path: &str) -> anyhow::Result<String> {
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("malformed HTTP answer from {host}"))?;
    let status = head.lines().next().unwrap_or_default();
    anyhow::ensure!(status.contains(" 200 "), "{host}{path} answered {status}");
    Ok(body.to_owned())
}

/// `redirector probe ready|live --admin-socket PATH`: exit 0 if this pod's own agent
/// answers 200 on `/readyz` or `/healthz` (for exec probes; see deploy/daemonset.yaml).
pub fn probe(socket: &std::path::Path, path: &str) -> anyhow::Result<()> {
    let stream = std::os::unix::net::UnixStream::connect(socket).map_err(|e| {
        anyhow::anyhow!(
            "cannot reach the agent's admin socket {} ({e}); is `redirector run` running with --admin-socket?",
            socket.display()
        )
    })?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    get_over(stream, "localhost", path).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_an_aligned_table() {
        let statuses = vec![
            BackendStatus {
                name: "demo/echo".into(),
                state: "Ready".into(),
                reason: None,
                hostname: "echo.redirector.test".into(),
                port: 8080,
                protocol: "TCP".into(),
                tls: "none".into(),
                addresses: vec!["10.200.2.2".into(), "fd00:200:2::2".into()],
                virtual_addresses: vec!["240.0.16.196".into(), "fd72:6564:6972::10c4".into()],
                policy: None,
                active_connections: 3,
                active_by_source_namespace: BTreeMap::from([
                    (String::new(), 1),
                    ("team-a".into(), 2),
                ]),
            },
            BackendStatus {
                name: "demo/api".into(),
                state: "RefError".into(),
                reason: Some("ConfigMap demo/api-ca does not exist".into()),
                hostname: "api.redirector.test".into(),
                port: 443,
                protocol: "HTTP".into(),
                tls: "ServerOnly".into(),
                addresses: vec![],
                virtual_addresses: vec![],
                policy: None,
                active_connections: 0,
                active_by_source_namespace: BTreeMap::new(),
            },
        ];
        let table = render(&statuses);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("BACKEND    STATE"), "{table}");
        assert!(
            lines[1].contains("Ready")
                && lines[1].contains("240.0.16.196,fd72:6564:6972::10c4  10.200.2.2,fd00:200:2::2"),
            "{table}"
        );
        assert!(lines[1].contains("  3 (-: 1, team-a: 2)  "), "{table}");
        assert!(
            lines[2].contains("RefError (ConfigMap demo/api-ca does not exist)"),
            "{table}"
        );
    }
}
