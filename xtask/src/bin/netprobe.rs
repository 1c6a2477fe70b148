//! `netprobe`: the plain, unmodified TCP client and server of the tests and the demo.
//!
//! It is deliberately ordinary (std sockets, getaddrinfo, blocking I/O) so that what the
//! tests observe is what any workload would observe under the redirector.
//!
//! ```text
//! netprobe serve ADDR                      e.g. 0.0.0.0:8080 or [::]:8080
//! netprobe connect HOST:PORT [-4|-6] [--send TEXT] [--timeout-ms N]
//! ```
//!
//! `serve` prints `listening <addr>` once bound and `accepted <peer>` per connection; it
//! reads until a newline or EOF and replies `peer=<peer> got=<text>`. `connect` prints one
//! JSON line, `{"ok":true,"peer":..,"local":..,"reply":..}` or
//! `{"ok":false,"error":..,"stage":"resolve|connect|io"}` (exit status 2).

use serde_json::json;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: netprobe serve ADDR\n       \
                     netprobe connect HOST:PORT [-4|-6] [--send TEXT] [--timeout-ms N]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") if args.len() == 2 => serve(&args[1]),
        Some("connect") => match ConnectArgs::parse(&args[1..]) {
            Ok(c) => connect(&c),
            Err(e) => usage(&e),
        },
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
                std::thread::spawn(move || {
                    if let Err(e) = answer(stream, &peer) {
                        eprintln!("netprobe: connection from {peer}: {e}");
                    }
                });
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
}

impl ConnectArgs {
    fn parse(args: &[String]) -> Result<ConnectArgs, String> {
        let mut parsed = ConnectArgs {
            target: String::new(),
            family: None,
            send: None,
            timeout: Duration::from_millis(5000),
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "-4" => parsed.family = Some(4),
                "-6" => parsed.family = Some(6),
                "--send" => parsed.send = Some(it.next().ok_or("--send needs TEXT")?.clone()),
                "--timeout-ms" => {
                    let ms = it.next().ok_or("--timeout-ms needs N")?;
                    let ms: u64 = ms.parse().map_err(|_| format!("bad --timeout-ms {ms:?}"))?;
                    parsed.timeout = Duration::from_millis(ms.max(1));
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
