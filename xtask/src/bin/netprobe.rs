//! `netprobe`: the plain, unmodified TCP client and server of the tests and the demo.
//!
//! It is deliberately ordinary (std sockets, getaddrinfo, blocking I/O) so that what the
//! tests observe is what any workload would observe under the redirector.
//!
//! ```text
//! netprobe serve ADDR                      e.g. 0.0.0.0:8080 or [::]:8080
//! netprobe serve-tls ADDR --cert PEM --key PEM [--client-ca PEM]
//! netprobe serve-h2 ADDR --cert PEM --key PEM
//! netprobe connect HOST:PORT [-4|-6] [--send TEXT] [--timeout-ms N]
//!                            [--tls-sni NAME | --tls-no-sni] [--tls-split N]
//! netprobe get HOST:PORT PATH
//! netprobe connect-many IP:PORT COUNT [INTERVAL_MS [TEXT]]
//! netprobe serve-http ADDR
//! netprobe ws HOST:PORT PATH [-4|-6] [--send TEXT]... [--hold-ms N]
//! netprobe reconnect FIRST SECOND
//! ```
//!
//! `serve` prints `listening <addr>` once bound and `accepted <peer>` per connection; it
//! reads until a newline or EOF and replies `peer=<peer> got=<text>`. `connect` prints one
//! JSON line, `{"ok":true,"peer":..,"local":..,"reply":..}` or
//! `{"ok":false,"error":..,"stage":"resolve|connect|tls|io"}` (exit status 2).
//!
//! `serve-tls` is `serve` behind a rustls server (ALPN `h2` and `http/1.1` offered; with
//! `--client-ca` a client certificate signed by that CA is required). Per connection it
//! prints, in order: `accepted <peer>`; `handshake-failed <peer> <error>` or
//! `handshake-ok <peer> sni=<sni|-> alpn=<alpn|-> client-cert=<yes|no> resumed=<yes|no>`;
//! then `received <peer> <text>` only if application bytes arrived, `read-failed <peer>
//! <error>` if reading failed; and always `closed <peer>` last.
//!
//! `connect --tls-sni NAME` does TLS itself (any server certificate accepted: a test
//! client) with that SNI, `--tls-no-sni` without SNI; the JSON then has `"tls": VERSION`.
//! `--tls-split N` sends the ClientHello in TCP segments of at most N bytes.
//! `get` is a minimal HTTP/1.0 GET that prints the body (exit status 1 unless 2xx).
//! `connect-many` connects COUNT times, one after the other, one starting every
//! INTERVAL_MS at most if given (no name resolution); each
//! connection that opens is half-closed and read to EOF before it is closed, so a server
//! or proxy behind it sees complete connections. It prints one JSON line with the
//! outcomes, `{"connects":N,"ok":..,"refused":..,"denied":..,"other":..,"elapsed_ns":..}`
//! (`denied`: EPERM/EACCES) and `seen_by_server` (replies by the peer IP the server
//! saw), exit status 0 whatever they were. `connect --send-after-ms N` prints
//! `{"connected":PEER}` once connected and waits N ms before sending.
//! `serve-h2`: a TLS server that speaks HTTP/2 only (ALPN `h2` alone); see
//! `netprobe/h2.rs`.
//! `serve-http` and `ws`: an HTTP/1.1 server (events, late answers, WebSocket echo) and
//! a WebSocket client; see `netprobe/http.rs` and `netprobe/websocket.rs`.
//! `reconnect`: one IPv6-only socket that connects to FIRST (an IPv4-mapped address,
//! so the kernel refuses it), then to SECOND; see `netprobe/reconnect.rs`.

use serde_json::json;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

#[path = "netprobe/h2.rs"]
mod h2;
#[path = "netprobe/http.rs"]
mod http;
#[path = "netprobe/many.rs"]
mod many;
#[path = "netprobe/reconnect.rs"]
mod reconnect;
#[path = "netprobe/tls.rs"]
mod tls;
#[path = "netprobe/websocket.rs"]
mod websocket;

const USAGE: &str = "usage: netprobe serve ADDR\n       \
                     netprobe serve-tls ADDR --cert PEM --key PEM [--client-ca PEM]\n       \
                     netprobe serve-h2 ADDR --cert PEM --key PEM\n       \
                     netprobe connect HOST:PORT [-4|-6] [--send TEXT] [--timeout-ms N] \
                     [--tls-sni NAME | --tls-no-sni] [--tls-split N]\n       \
                     netprobe get HOST:PORT PATH\n       \
                     netprobe connect-many IP:PORT COUNT [INTERVAL_MS [TEXT]]\n       \
                     netprobe serve-http ADDR\n       \
                     netprobe ws HOST:PORT PATH [-4|-6] [--send TEXT]... [--hold-ms N]\n       \
                     netprobe reconnect FIRST SECOND";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") if args.len() == 2 => serve(&args[1]),
        Some("serve-tls") => tls::serve(&args[1..]),
        Some("serve-h2") => h2::serve(&args[1..]),
        Some("connect") => match ConnectArgs::parse(&args[1..]) {
            Ok(c) => connect(&c),
            Err(e) => usage(&e),
        },
        Some("get") if args.len() == 3 => get(&args[1], &args[2]),
        Some("connect-many") if (3..=5).contains(&args.len()) => many::connect_many(
            &args[1],
            &args[2],
            args.get(3).map(String::as_str),
            args.get(4).map(String::as_str),
        ),
        Some("serve-http") if args.len() == 2 => http::serve(&args[1]),
        Some("ws") => websocket::client(&args[1..]),
        Some("reconnect") if args.len() == 3 => reconnect::run(&args[1], &args[2]),
        _ => usage("missing or unknown command"),
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("netprobe: {problem}\n{USAGE}");
    ExitCode::from(64)
}

/// IPv4-mapped IPv6 peers (from a dual-stack `[::]` listener) are shown as plain IPv4, so
/// tests can compare against the pod's address whichever way the server was bound.
fn show(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()).to_string(),
            None => addr.to_string(),
        },
        SocketAddr::V4(_) => addr.to_string(),
    }
}

/// Prints a line on stdout and flushes, so a supervising test sees it at once even
/// though stdout is a pipe (block-buffered otherwise).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn serve(addr: &str) -> ExitCode {
    accept_each(addr, |stream, peer| {
        if let Err(e) = answer(stream, peer) {
            eprintln!("netprobe: connection from {peer}: {e}");
        }
    })
}

/// Listens on `addr` (printing `listening ADDR`) and runs `handle` on a thread of its
/// own for every connection (printing `accepted PEER` first), until killed.
fn accept_each<F>(addr: &str, handle: F) -> ExitCode
where
    F: Fn(TcpStream, &str) + Clone + Send + 'static,
{
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("netprobe: cannot listen on {addr}: {e}");
            return ExitCode::from(2);
        }
    };
    match listener.local_addr() {
        Ok(local) => say(&format!("listening {local}")),
        Err(_) => say(&format!("listening {addr}")),
    }
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let peer = stream
                    .peer_addr()
                    .map(show)
                    .unwrap_or_else(|e| format!("?({e})"));
                say(&format!("accepted {peer}"));
                let handle = handle.clone();
                std::thread::spawn(move || handle(stream, &peer));
            }
            Err(e) => eprintln!("netprobe: accept: {e}"),
        }
    }
    ExitCode::SUCCESS
}

/// Reads one line (or everything until EOF) and echoes it with the peer address.
fn answer(mut stream: TcpStream, peer: &str) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.contains(&b'\n') {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    stream.write_all(format!("peer={peer} got={}\n", text.trim()).as_bytes())?;
    stream.shutdown(Shutdown::Both)
}

#[derive(Debug)]
struct ConnectArgs {
    target: String,
    family: Option<u8>,
    send: Option<String>,
    timeout: Duration,
    /// Start TLS ourselves: `Some(Some(name))` with that SNI, `Some(None)` without SNI.
    tls: Option<Option<String>>,
    /// With `tls`: the ClientHello in segments of at most this many bytes.
    tls_split: Option<usize>,
    /// Wait this long after connecting before sending (a connection that outlives an
    /// event, e.g. the agent's restart).
    send_after: Duration,
}

impl ConnectArgs {
    fn parse(args: &[String]) -> Result<ConnectArgs, String> {
        let mut parsed = ConnectArgs {
            target: String::new(),
            family: None,
            send: None,
            timeout: Duration::from_millis(5000),
            tls: None,
            tls_split: None,
            send_after: Duration::ZERO,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "-4" => parsed.family = Some(4),
                "-6" => parsed.family = Some(6),
                "--send" => parsed.send = Some(it.next().ok_or("--send needs TEXT")?.clone()),
                "--tls-sni" if parsed.tls.is_none() => {
                    parsed.tls = Some(Some(it.next().ok_or("--tls-sni needs NAME")?.clone()));
                }
                "--tls-no-sni" if parsed.tls.is_none() => parsed.tls = Some(None),
                "--tls-split" => {
                    let n = it.next().ok_or("--tls-split needs N")?;
                    let n: usize = n.parse().map_err(|_| format!("bad --tls-split {n:?}"))?;
                    parsed.tls_split = Some(n);
                }
                "--timeout-ms" => {
                    let ms = it.next().ok_or("--timeout-ms needs N")?;
                    let ms: u64 = ms.parse().map_err(|_| format!("bad --timeout-ms {ms:?}"))?;
                    parsed.timeout = Duration::from_millis(ms.max(1));
                }
                "--send-after-ms" => {
                    let ms = it.next().ok_or("--send-after-ms needs N")?;
                    let ms: u64 = ms
                        .parse()
                        .map_err(|_| format!("bad --send-after-ms {ms:?}"))?;
                    parsed.send_after = Duration::from_millis(ms);
                }
                _ if parsed.target.is_empty() && !arg.starts_with('-') => {
                    parsed.target.clone_from(arg);
                }
                _ => return Err(format!("unexpected argument {arg:?}")),
            }
        }
        if parsed.target.is_empty() {
            return Err("connect needs HOST:PORT".into());
        }
        if parsed.tls_split.is_some() && parsed.tls.is_none() {
            return Err("--tls-split needs --tls-sni NAME or --tls-no-sni".into());
        }
        Ok(parsed)
    }
}

/// A failure and the stage it happened in.
type Failure = (&'static str, std::io::Error);

fn connect(args: &ConnectArgs) -> ExitCode {
    match try_connect(args) {
        Ok(line) => {
            say(&line.to_string());
            ExitCode::SUCCESS
        }
        Err((stage, e)) => {
            let error = format!("{:?}: {e}", e.kind());
            say(&json!({"ok": false, "error": error, "stage": stage}).to_string());
            ExitCode::from(2)
        }
    }
}

fn try_connect(args: &ConnectArgs) -> Result<serde_json::Value, Failure> {
    let addrs: Vec<SocketAddr> = args
        .target
        .to_socket_addrs()
        .map_err(|e| ("resolve", e))?
        .filter(|a| match args.family {
            Some(4) => a.is_ipv4(),
            Some(6) => a.is_ipv6(),
            _ => true,
        })
        .collect();
    if addrs.is_empty() {
        let e = std::io::Error::new(
            ErrorKind::NotFound,
            format!("no address for {}", args.target),
        );
        return Err(("resolve", e));
    }

    // Like most clients: try each address in order, report the last failure.
    let mut last = None;
    let mut stream = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, args.timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let Some(mut stream) = stream else {
        let e = last.unwrap_or_else(|| std::io::Error::other("no address tried"));
        return Err(("connect", e));
    };

    let io = |e| ("io", e);
    // getpeername(2)/getsockname(2): what the application sees, which is exactly what the
    // redirector's getpeername hooks are supposed to preserve.
    let peer = stream.peer_addr().map_err(io)?;
    let local = stream.local_addr().map_err(io)?;
    stream.set_read_timeout(Some(args.timeout)).map_err(io)?;
    stream.set_write_timeout(Some(args.timeout)).map_err(io)?;
    if let Some(sni) = &args.tls {
        let client = tls::ClientTls {
            sni: sni.clone(),
            split: args.tls_split,
        };
        let (reply, version) = tls::exchange(&client, stream, args.send.as_deref())?;
        return Ok(json!({
            "ok": true,
            "peer": show(peer),
            "local": show(local),
            "reply": String::from_utf8_lossy(&reply),
            "tls": version,
        }));
    }
    if !args.send_after.is_zero() {
        // Connected (and the connected line printed): a test can act, then see the
        // connection finish.
        say(&json!({"connected": show(peer)}).to_string());
        std::thread::sleep(args.send_after);
    }
    if let Some(text) = &args.send {
        stream.write_all(text.as_bytes()).map_err(io)?;
    }
    // Half-close: the server reads to EOF, answers, and closes its side.
    stream.shutdown(Shutdown::Write).map_err(io)?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).map_err(io)?;
    Ok(json!({
        "ok": true,
        "peer": show(peer),
        "local": show(local),
        "reply": String::from_utf8_lossy(&reply),
    }))
}

/// `netprobe get HOST:PORT PATH`: HTTP/1.0, so the server closes after the response.
fn get(target: &str, path: &str) -> ExitCode {
    let fetched = (|| -> std::io::Result<Vec<u8>> {
        let mut stream = TcpStream::connect(target)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {target}\r\n\r\n").as_bytes())?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        Ok(response)
    })();
    let response = match fetched {
        Ok(response) => response,
        Err(e) => {
            eprintln!("netprobe: GET http://{target}{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or_default();
    print!("{body}");
    let _ = std::io::stdout().flush();
    if status
        .split(' ')
        .nth(1)
        .is_some_and(|code| code.starts_with('2'))
    {
        ExitCode::SUCCESS
    } else {
        eprintln!("netprobe: GET http://{target}{path}: {status}");
        ExitCode::from(1)
    }
}
