//! `connect-many`: a run of connects with their outcomes counted (rollout and crash-loop
//! tests count refused, denied and served connects across an agent's restart).

use std::{
    io::{ErrorKind, Read, Write},
    net::{Shutdown, SocketAddr, TcpStream},
    process::ExitCode,
    time::Duration,
};

use serde_json::json;

use super::{say, usage};

/// `netprobe connect-many IP:PORT COUNT [INTERVAL_MS [TEXT]]`: COUNT connects in a row
/// (one starting every INTERVAL_MS at most), each sending TEXT if given, outcomes
/// counted, and the replies by the peer address the server saw.
pub fn connect_many(
    target: &str,
    count: &str,
    interval: Option<&str>,
    send: Option<&str>,
) -> ExitCode {
    let Ok(addr) = target.parse::<SocketAddr>() else {
        return usage(&format!("connect-many needs IP:PORT, not {target:?}"));
    };
    let Ok(count) = count.parse::<u64>() else {
        return usage(&format!("connect-many needs a COUNT, not {count:?}"));
    };
    let interval = match interval.map(str::parse::<u64>) {
        None => Duration::ZERO,
        Some(Ok(ms)) => Duration::from_millis(ms),
        Some(Err(_)) => return usage("connect-many needs INTERVAL_MS in milliseconds"),
    };
    let mut seen: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let timeout = Duration::from_secs(5);
    let (mut ok, mut refused, mut denied, mut other) = (0u64, 0u64, 0u64, 0u64);
    let mut last_other = None;
    let started = std::time::Instant::now();
    for n in 0..count {
        let due = started + interval * u32::try_from(n).unwrap_or(u32::MAX);
        std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => match drain(stream, send, timeout) {
                Ok(reply) => {
                    ok += 1;
                    // `peer=IP:PORT got=...`: who the server saw (proxy or client).
                    let peer = (reply.strip_prefix("peer=").and_then(|r| r.rsplit_once(':')))
                        .map_or("-", |(ip, _)| ip);
                    *seen.entry(peer.to_owned()).or_default() += 1;
                }
                Err(e) => {
                    other += 1;
                    last_other = Some(format!("io: {e}"));
                }
            },
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => refused += 1,
            // EPERM and EACCES: a cgroup hook refused the connect.
            Err(e) if e.kind() == ErrorKind::PermissionDenied => denied += 1,
            Err(e) => {
                other += 1;
                last_other = Some(format!("connect: {e}"));
            }
        }
    }
    let elapsed_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    say(&json!({
        "connects": count,
        "ok": ok,
        "refused": refused,
        "denied": denied,
        "other": other,
        "last_other": last_other,
        "elapsed_ns": elapsed_ns,
        "seen_by_server": seen,
    })
    .to_string());
    ExitCode::SUCCESS
}

/// Sends `send`, half-closes, reads the reply to EOF, closes.
fn drain(mut stream: TcpStream, send: Option<&str>, timeout: Duration) -> std::io::Result<String> {
    stream.set_read_timeout(Some(timeout))?;
    if let Some(text) = send {
        stream.write_all(text.as_bytes())?;
    }
    stream.shutdown(Shutdown::Write)?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply)?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}
