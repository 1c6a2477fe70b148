//! Slow peers: clients that never read, and clients that trickle one byte a second.
//!
//! Neither reads what would tell it the proxy closed it, so closure is seen through the
//! kernel (TCP_INFO: no longer ESTABLISHED) or, for the trickle, through the echo.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::conn::{established, kind, open_all};
use crate::emit;
use crate::proto::Proto;
use crate::stats::{Samples, Tally};

/// Size of one write of the large body.
const CHUNK: usize = 64 * 1024;
/// How often stalled connections are looked at.
const WATCH_EVERY: Duration = Duration::from_millis(100);

#[derive(clap::Args)]
pub struct NoreadArgs {
    #[arg(long)]
    target: SocketAddr,
    #[arg(long)]
    conns: usize,
    /// Send `GET path` with this Host once (the response is never read); else write up
    /// to --bytes to an echo server.
    #[arg(long)]
    http: Option<String>,
    #[arg(long, default_value = "/")]
    path: String,
    /// Bytes each client tries to write (TCP).
    #[arg(long, default_value_t = 1 << 20)]
    bytes: u64,
    /// A write that makes no progress for this long is given up: the path is full.
    #[arg(long, default_value_t = 1000)]
    stall_ms: u64,
    /// How long to watch for the proxy closing the stalled connections.
    #[arg(long, default_value_t = 20)]
    watch_secs: u64,
}

/// Writes, never reads: prints `held` (bytes written, how each push ended) once every
/// connection has stalled, then `result`: how many the proxy closed within
/// `--watch-secs` and when, counted from each one's last successful write.
pub async fn noread(args: NoreadArgs) -> Result<()> {
    let request = args.http.clone().map(|host| {
        Proto::Http {
            host,
            path: args.path.clone(),
        }
        .request()
    });
    let stall = Duration::from_millis(args.stall_ms);
    let (streams, opened) = open_all(args.target, args.conns).await;
    emit("opened", opened.clone());
    let mut set = JoinSet::new();
    for mut stream in streams {
        let request = request.clone();
        let bytes = args.bytes;
        set.spawn(async move {
            let (written, outcome) = match &request {
                Some(req) => match tokio::time::timeout(stall, stream.write_all(req)).await {
                    Ok(Ok(())) => (req.len() as u64, "sent".to_owned()),
                    Ok(Err(e)) => (0, kind(&e)),
                    Err(_) => (0, "stalled".to_owned()),
                },
                None => push(&mut stream, bytes, stall).await,
            };
            (stream, written, outcome, Instant::now())
        });
    }
    let (mut pushed, mut outcomes, mut total) = (Vec::new(), Tally::default(), 0u64);
    while let Some(joined) = set.join_next().await {
        let Ok((stream, written, outcome, last_write)) = joined else {
            outcomes.add("task-failed");
            continue;
        };
        total += written;
        outcomes.add(outcome);
        pushed.push((stream, last_write));
    }
    emit(
        "held",
        json!({ "open": pushed.len(), "bytes_written": total, "pushes": outcomes.json() }),
    );
    let watch = Instant::now();
    let mut closed = Samples::default();
    while !pushed.is_empty() && watch.elapsed() < Duration::from_secs(args.watch_secs) {
        tokio::time::sleep(WATCH_EVERY).await;
        pushed.retain(|(stream, last_write)| {
            let open = established(stream);
            if !open {
                closed.push(last_write.elapsed());
            }
            open
        });
    }
    emit(
        "result",
        json!({
            "conns": args.conns,
            "opened": opened,
            "bytes_written": total,
            "pushes": outcomes.json(),
            "closed": closed.len(),
            "open_at_end": pushed.len(),
            "closed_after_last_write": closed.summary(),
        }),
    );
    Ok(())
}

/// Writes up to `bytes` in [`CHUNK`]s until a write makes no progress for `stall`.
async fn push(stream: &mut TcpStream, bytes: u64, stall: Duration) -> (u64, String) {
    let chunk = vec![b'x'; CHUNK];
    let mut written = 0u64;
    while written < bytes {
        let want = usize::try_from(bytes - written).map_or(CHUNK, |left| left.min(CHUNK));
        match tokio::time::timeout(stall, stream.write(&chunk[..want])).await {
            Ok(Ok(n)) => written += n as u64,
            Ok(Err(e)) => return (written, kind(&e)),
            Err(_) => return (written, "stalled".into()),
        }
    }
    (written, "all-written".into())
}

#[derive(clap::Args)]
pub struct TrickleArgs {
    #[arg(long)]
    target: SocketAddr,
    #[arg(long)]
    conns: usize,
    /// Trickle an HTTP request head with this Host (it never completes); else bytes to
    /// an echo server, each echoed back.
    #[arg(long)]
    http: Option<String>,
    /// Seconds of one byte per second.
    #[arg(long, default_value_t = 12)]
    trickle_secs: u64,
    /// Then silence (TCP): how long to wait for the proxy to close the connection.
    #[arg(long, default_value_t = 20)]
    watch_secs: u64,
}

/// One byte a second from every connection: `result` says how many the proxy closed
/// while they trickled (it should not: bytes flow), and for TCP, once they fell silent,
/// when it closed them (counted from the last echoed byte).
pub async fn trickle(args: TrickleArgs) -> Result<()> {
    let (streams, opened) = open_all(args.target, args.conns).await;
    emit("opened", opened.clone());
    let mut set = JoinSet::new();
    for (i, stream) in streams.into_iter().enumerate() {
        // Spread over a second, so the proxy sees a steady trickle, not bursts.
        let offset = Duration::from_millis((i % 1000) as u64);
        let (http, secs, watch) = (args.http.clone(), args.trickle_secs, args.watch_secs);
        set.spawn(async move {
            tokio::time::sleep(offset).await;
            match http {
                Some(host) => trickle_head(stream, &host, secs).await,
                None => trickle_echo(stream, secs, watch).await,
            }
        });
    }
    let (mut during, mut after, mut at_close) =
        (Tally::default(), Tally::default(), Samples::default());
    let mut after_silence = Samples::default();
    while let Some(joined) = set.join_next().await {
        let Ok(end) = joined else {
            during.add("task-failed");
            continue;
        };
        match end {
            Trickled::ClosedWhileTrickling { kind, after: t } => {
                during.add(kind);
                at_close.push(t);
            }
            Trickled::Survived { silence } => {
                during.add("survived");
                if let Some((kind, t)) = silence {
                    after.add(kind);
                    if let Some(t) = t {
                        after_silence.push(t);
                    }
                }
            }
        }
    }
    emit(
        "result",
        json!({
            "conns": args.conns,
            "opened": opened,
            "trickle_secs": args.trickle_secs,
            "while_trickling": during.json(),
            "closed_while_trickling_after": at_close.summary(),
            "after_silence": after.json(),
            "closed_after_silence": after_silence.summary(),
        }),
    );
    Ok(())
}

enum Trickled {
    /// The proxy closed it while bytes still came (after this long).
    ClosedWhileTrickling { kind: String, after: Duration },
    /// It trickled to the end; then, for TCP, how the silence ended (and when, if the
    /// proxy closed it).
    Survived {
        silence: Option<(String, Option<Duration>)>,
    },
}

/// A byte a second, each echoed back; then silence until the proxy closes it.
async fn trickle_echo(mut stream: TcpStream, secs: u64, watch: u64) -> Trickled {
    let started = Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    let mut byte = [0u8; 1];
    for _ in 0..secs {
        ticks.tick().await;
        let round = async {
            stream.write_all(b"x").await?;
            stream.read_exact(&mut byte).await.map(drop)
        };
        let failed = match tokio::time::timeout(Duration::from_secs(3), round).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => kind(&e),
            Err(_) => "echo-timeout".into(),
        };
        return Trickled::ClosedWhileTrickling {
            kind: failed,
            after: started.elapsed(),
        };
    }
    let silent = Instant::now();
    let end = match tokio::time::timeout(Duration::from_secs(watch), stream.read(&mut byte)).await {
        Ok(Ok(0)) => ("closed-eof".to_owned(), Some(silent.elapsed())),
        Ok(Ok(_)) => ("unexpected-bytes".to_owned(), None),
        Ok(Err(e)) => (format!("closed-{}", kind(&e)), Some(silent.elapsed())),
        Err(_) => ("still-open".to_owned(), None),
    };
    Trickled::Survived { silence: Some(end) }
}

/// An HTTP request head, one byte a second for `secs` seconds (it is longer, so it never
/// completes), watching for the proxy's answer or close.
async fn trickle_head(mut stream: TcpStream, host: &str, secs: u64) -> Trickled {
    let head = format!(
        "GET / HTTP/1.1\r\nHost: {host}\r\nX-Trickle: {}\r\n\r\n",
        "a".repeat(usize::try_from(secs).unwrap_or(0))
    );
    let started = Instant::now();
    let (mut rd, mut wr) = stream.split();
    let writer = async {
        for byte in head
            .as_bytes()
            .iter()
            .take(usize::try_from(secs).unwrap_or(0))
        {
            wr.write_all(std::slice::from_ref(byte)).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Ok::<(), std::io::Error>(())
    };
    let mut buf = [0u8; 1024];
    let reader = rd.read(&mut buf);
    tokio::select! {
        written = writer => match written {
            Ok(()) => Trickled::Survived { silence: None },
            Err(e) => Trickled::ClosedWhileTrickling { kind: kind(&e), after: started.elapsed() },
        },
        read = reader => {
            let kind = match read {
                Ok(0) => "closed-eof".to_owned(),
                Ok(n) => String::from_utf8_lossy(&buf[..n])
                    .split(' ')
                    .nth(1)
                    .map_or_else(|| "bytes".to_owned(), |status| format!("answered-{status}")),
                Err(e) => format!("closed-{}", kind(&e)),
            };
            Trickled::ClosedWhileTrickling { kind, after: started.elapsed() }
        }
    }
}
