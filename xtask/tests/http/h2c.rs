//! Clients that offer cleartext HTTP/2 on their first request to an `http://` address
//! (`Connection: Upgrade, HTTP2-Settings`, `Upgrade: h2c`, `HTTP2-Settings`): Java's
//! `HttpClient` with its defaults and `curl --http2`. The proxy declines the offer,
//! answers in HTTP/1.1 and forwards every request on the Backend's pool in the protocol
//! the Backend declares, to a server that speaks only h2 (`netprobe serve-h2`) and to one
//! that speaks only HTTP/1.1 (nginx); neither sees the offer's headers.

use std::{collections::BTreeSet, path::PathBuf, time::Duration};

use serde_json::Value;
use xtask::netlab::{ChildGuard, Netns, probe::PROBE_TIMEOUT};

use super::{
    API_HOST, HttpBackend, HttpBed, OPENED, OTHER_HOST, REQUESTS, TLS_H1_PORT, url, yaml_of,
};
use crate::support::{
    PROBE,
    nginx::{Nginx, Site, field},
    poll,
    tls::{Ca, Leaf, sample},
};

/// `netprobe serve-h2`: TLS, h2 only.
const H2_PORT: u16 = 8445;
/// nginx, TLS, HTTP/1.1 only, like [`TLS_H1_PORT`] (a second port for a third Backend).
const H1_SECOND_PORT: u16 = 8447;

/// Java's `HttpClient`, run from source in the pod.
const JAVA_CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/support/HttpClientGet.java"
);

#[derive(Clone, Copy, PartialEq)]
enum Server {
    H2Only,
    Http11Only,
}

/// One Backend of the bed: `demo/{name}` for `host:port` with `protocol`, in front of
/// `server`, which must see every request in `upstream` (`HTTP/2.0`, `HTTP/1.1`).
struct Case {
    name: &'static str,
    host: &'static str,
    port: u16,
    protocol: &'static str,
    server: Server,
    upstream: &'static str,
}

const CASES: [Case; 5] = [
    Case::new("h2-http", API_HOST, H2_PORT, "HTTP", Server::H2Only),
    Case::new("h2-http2", OTHER_HOST, H2_PORT, "HTTP2", Server::H2Only),
    Case::new("h1-http", API_HOST, TLS_H1_PORT, "HTTP", Server::Http11Only),
    Case::new(
        "h1-http11",
        OTHER_HOST,
        TLS_H1_PORT,
        "HTTP11",
        Server::Http11Only,
    ),
    Case::new(
        "h1-mcp",
        API_HOST,
        H1_SECOND_PORT,
        "MCP",
        Server::Http11Only,
    ),
];

impl Case {
    const fn new(
        name: &'static str,
        host: &'static str,
        port: u16,
        protocol: &'static str,
        server: Server,
    ) -> Case {
        let upstream = match server {
            Server::H2Only => "HTTP/2.0",
            Server::Http11Only => "HTTP/1.1",
        };
        Case {
            name,
            host,
            port,
            protocol,
            server,
            upstream,
        }
    }

    fn backend<'a>(&self, ca: &'a Ca) -> HttpBackend<'a> {
        HttpBackend {
            name: self.name,
            host: self.host,
            port: self.port,
            protocol: self.protocol,
            ca: Some(ca),
        }
    }

    fn url(&self) -> String {
        url(self.host, self.port, "/")
    }

    fn label(&self) -> String {
        format!("demo/{}", self.name)
    }
}

/// Each client makes two requests per Backend, each on a client connection of its own
/// (so each offers h2c): four per Backend, which must all go on one upstream connection.
#[test]
fn h2c_upgrade_offers_are_declined_and_the_requests_pooled_in_the_declared_protocol() {
    let ca = Ca::new("test CA");
    let leaf = ca.server(&[API_HOST, OTHER_HOST]);
    let backends: Vec<HttpBackend<'_>> = CASES.iter().map(|c| c.backend(&ca)).collect();
    let t = HttpBed::new(&yaml_of(&backends), &[]);
    let h1_only = |port| Site {
        names: vec![API_HOST, OTHER_HOST],
        http2: false,
        ..Site::tls(port, API_HOST, &leaf)
    };
    let nginx = Nginx::start(
        &t.bed.topo.ext,
        &[h1_only(TLS_H1_PORT), h1_only(H1_SECOND_PORT)],
    );
    let h2 = H2Server::start(&t.bed.topo.ext, &leaf);

    // Every failure of every case is gathered, so one run shows the whole table.
    let mut problems = Vec::new();
    let urls: Vec<String> = CASES.iter().map(Case::url).collect();
    for line in java_get(&t, &urls) {
        let fields: Vec<&str> = line.splitn(4, '\t').collect();
        let case = CASES.iter().find(|c| c.url() == fields[0]);
        let host = case.map_or("?", |c| c.host);
        let expected = ["200", "HTTP_1_1"];
        if fields.get(1..3) != Some(&expected[..])
            || !fields[3].starts_with(&format!("host={host}"))
        {
            problems.push(format!("java: {line}"));
        }
    }
    for case in &CASES {
        for _ in 0..2 {
            let response = t.curl(&["--http2", &case.url()]);
            let body = response.text();
            if response.code() != 200
                || response.http_version() != "1.1"
                || !body.starts_with(&format!("host={}", case.host))
            {
                problems.push(format!(
                    "curl --http2 {}: {} HTTP/{} {body:?} {}",
                    case.url(),
                    response.code(),
                    response.http_version(),
                    response.stderr
                ));
            }
        }
    }

    let nginx_requests = nginx.wait_for_requests(12);
    let h2_requests = h2.wait_for_requests(8);
    for case in &CASES {
        let seen: Vec<Seen> = match case.server {
            Server::Http11Only => (nginx_requests.iter())
                .filter(|r| field(r, "port") == case.port.to_string())
                .filter(|r| field(r, "host") == case.host)
                .map(Seen::of_nginx)
                .collect(),
            Server::H2Only => (h2_requests.iter())
                .filter(|r| {
                    r["authority"]
                        .as_str()
                        .is_some_and(|a| a.starts_with(case.host))
                })
                .map(Seen::of_h2)
                .collect(),
        };
        problems.extend(case.judge(&seen, &t));
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}\nagent:\n{}",
        problems.len(),
        problems.join("\n"),
        t.agent.logs().join("\n")
    );
}

impl Case {
    /// What is wrong with what the server saw of this Backend's four requests and with
    /// the agent's counters of them.
    fn judge(&self, seen: &[Seen], t: &HttpBed) -> Vec<String> {
        let mut problems = Vec::new();
        let at = format!("{} ({} to {})", self.label(), self.protocol, self.upstream);
        if seen.len() != 4 {
            problems.push(format!("{at}: the server saw {} requests", seen.len()));
        }
        for request in seen {
            if request.protocol != self.upstream || !request.offer.is_empty() {
                problems.push(format!("{at}: the server saw {request:?}"));
            }
        }
        let connections: BTreeSet<&str> = seen.iter().map(|r| r.connection.as_str()).collect();
        if connections.len() > 1 {
            problems.push(format!(
                "{at}: on {} upstream connections",
                connections.len()
            ));
        }
        let label = self.label();
        let backend = [("backend", label.as_str())];
        let answered = [("backend", label.as_str()), ("class", "2xx")];
        let text = t.wait_for_sample(REQUESTS, &answered, 4.0);
        let counted = (
            sample(&text, REQUESTS, &answered),
            sample(&text, OPENED, &backend),
        );
        if counted != (Some(4.0), Some(1.0)) {
            problems.push(format!(
                "{at}: 2xx answers and upstream connections opened {counted:?}"
            ));
        }
        problems
    }
}

/// What a server saw of one request.
#[derive(Debug)]
struct Seen {
    connection: String,
    protocol: String,
    /// The h2c offer's headers that reached the server (`upgrade: h2c`...).
    offer: Vec<String>,
}

impl Seen {
    fn of_nginx(request: &Value) -> Seen {
        let offer = ["upgrade", "http2_settings", "connection_header"]
            .into_iter()
            .filter(|name| !matches!(field(request, name), "" | "-"))
            .map(|name| format!("{name}: {}", field(request, name)))
            .collect();
        Seen {
            connection: field(request, "connection").to_owned(),
            protocol: field(request, "protocol").to_owned(),
            offer,
        }
    }

    fn of_h2(request: &Value) -> Seen {
        let offer = ["upgrade", "http2-settings", "connection"]
            .into_iter()
            .filter_map(|name| Some(format!("{name}: {}", request["headers"].get(name)?)))
            .collect();
        Seen {
            connection: request["connection"].to_string(),
            protocol: request["version"].as_str().unwrap_or_default().to_owned(),
            offer,
        }
    }
}

/// `java HttpClientGet.java URLS..` in the pod: its output lines, two per URL.
fn java_get(t: &HttpBed, urls: &[String]) -> Vec<String> {
    let mut args = vec![JAVA_CLIENT.to_owned()];
    args.extend(urls.iter().cloned());
    let mut command = t.bed.topo.spawn_in_pod(java_bin(), &args);
    let mut java = ChildGuard::spawn("java", &mut command).expect("start java");
    let done = java
        .finish(Duration::from_secs(120))
        .expect("java finished");
    assert_eq!(
        done.stdout.len(),
        2 * urls.len(),
        "java exited {}: {:?}\n{}",
        done.status,
        done.stdout,
        done.stderr.join("\n")
    );
    done.stdout
}

/// The `java` launcher, or a test failure that says how to get it.
fn java_bin() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join("java"))
        .find(|p| p.is_file())
        .expect(
            "java is not installed: the HTTP tests run Java's HttpClient \
             (`cargo xtask test` installs it: apt-get install openjdk-17-jdk-headless)",
        )
}

/// `netprobe serve-h2 [::]:8445` in `netns` with `leaf`; killed on drop.
struct H2Server {
    child: ChildGuard,
    _files: tempfile::TempDir,
}

impl H2Server {
    fn start(netns: &Netns, leaf: &Leaf) -> H2Server {
        let files = tempfile::tempdir().expect("server files");
        let cert = files.path().join("server.crt");
        let key = files.path().join("server.key");
        std::fs::write(&cert, &leaf.cert_pem).expect("certificate");
        std::fs::write(&key, &leaf.key_pem).expect("key");
        let mut command = netns.exec(PROBE);
        command.arg("serve-h2").arg(format!("[::]:{H2_PORT}"));
        command.arg("--cert").arg(&cert).arg("--key").arg(&key);
        let mut child = ChildGuard::spawn("serve-h2", &mut command).expect("start serve-h2");
        child
            .wait_for_line("listening", PROBE_TIMEOUT)
            .expect("serve-h2 listens");
        H2Server {
            child,
            _files: files,
        }
    }

    /// The `request {json}` lines so far, once there are `count` (or after 5 s).
    fn wait_for_requests(&self, count: usize) -> Vec<Value> {
        let read = || {
            (self.child.lines(xtask::netlab::Stream::Stdout).iter())
                .filter_map(|line| line.strip_prefix("request "))
                .map(|json| serde_json::from_str(json).expect("request line is JSON"))
                .collect::<Vec<Value>>()
        };
        poll(read, |requests| requests.len() >= count)
    }
}
