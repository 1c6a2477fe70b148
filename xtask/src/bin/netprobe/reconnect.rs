//! `netprobe reconnect FIRST SECOND`: one IPv6-only socket connects to FIRST, an
//! IPv4-mapped address the kernel refuses on such a socket (after the cgroup connect
//! hook has run), then to SECOND on the same socket, sends `hello` and reads the reply.
//! Prints `{"first_error":..,"ok":true,"peer":..,"reply":..}` (`peer`: what
//! getpeername(2) says), or `{"ok":false,"error":..,"stage":..}` with exit status 2.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::ExitCode;

use serde_json::json;
use socket2::{Domain, Protocol, Socket, Type};

use super::{say, show};

pub fn run(first: &str, second: &str) -> ExitCode {
    match reconnect(first, second) {
        Ok(line) => {
            say(&line.to_string());
            ExitCode::SUCCESS
        }
        Err((stage, e)) => {
            say(&json!({"ok": false, "error": e.to_string(), "stage": stage}).to_string());
            ExitCode::from(2)
        }
    }
}

fn reconnect(first: &str, second: &str) -> Result<serde_json::Value, (&'static str, String)> {
    let parse = |addr: &str| {
        addr.parse::<SocketAddr>()
            .map_err(|e| ("parse", e.to_string()))
    };
    let (first, second) = (parse(first)?, parse(second)?);
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))
        .and_then(|socket| socket.set_only_v6(true).map(|()| socket))
        .map_err(|e| ("socket", e.to_string()))?;
    let first_error = match socket.connect(&first.into()) {
        Ok(()) => return Err(("first", format!("{first} accepted an IPv6-only socket"))),
        Err(e) => e.to_string(),
    };
    socket
        .connect(&second.into())
        .map_err(|e| ("connect", e.to_string()))?;
    let mut stream = TcpStream::from(socket);
    let peer = stream.peer_addr().map_err(|e| ("peer", e.to_string()))?;
    let mut reply = String::new();
    (stream.write_all(b"hello\n"))
        .and_then(|()| stream.shutdown(Shutdown::Write))
        .and_then(|()| stream.read_to_string(&mut reply).map(drop))
        .map_err(|e| ("io", e.to_string()))?;
    Ok(json!({"first_error": first_error, "ok": true, "peer": show(peer), "reply": reply}))
}
