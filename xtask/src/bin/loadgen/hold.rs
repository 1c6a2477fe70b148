//! `hold`: N connections open together, every one served while all are open.
//!
//! Opens all N (`opened`), then exchanges once on every one of them concurrently and
//! prints `held` with the connections still open; holds them `--hold-secs` (the bench
//! measures the agent meanwhile), exchanges on every one again, then closes them all
//! and prints `result`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::conn::open_all;
use crate::emit;
use crate::proto::Proto;
use crate::stats::{Samples, Tally, ms};

#[derive(clap::Args)]
pub struct HoldArgs {
    #[arg(long)]
    target: SocketAddr,
    #[arg(long)]
    conns: usize,
    /// Speak HTTP/1.1 with this Host (else: a line echoed back).
    #[arg(long)]
    http: Option<String>,
    #[arg(long, default_value = "/")]
    path: String,
    /// How long all connections stay open between the two exchanges.
    #[arg(long, default_value_t = 5)]
    hold_secs: u64,
    /// Longest wait for one reply.
    #[arg(long, default_value_t = 30)]
    reply_timeout_secs: u64,
    /// Exchanges in flight at once (0: all connections at once). An HTTP proxy opens an
    /// upstream connection for every request it cannot give an idle pooled one, so
    /// 10,000 requests at the same instant would cost 10,000 upstream descriptors too.
    #[arg(long, default_value_t = 0)]
    exchange_parallel: usize,
}

pub async fn run(args: HoldArgs) -> Result<()> {
    let proto = Proto::new(args.http.clone(), &args.path);
    let timeout = Duration::from_secs(args.reply_timeout_secs);
    let (streams, opened) = open_all(args.target, args.conns).await;
    emit("opened", opened.clone());
    let parallel = args.exchange_parallel;
    let (streams, first) = exchange_all(streams, &proto, timeout, parallel).await;
    emit("held", json!({ "open": streams.len(), "exchange": first }));
    tokio::time::sleep(Duration::from_secs(args.hold_secs)).await;
    let (streams, second) = exchange_all(streams, &proto, timeout, parallel).await;
    let closing = Instant::now();
    let still_open = streams.len();
    drop(streams);
    emit(
        "result",
        json!({
            "conns": args.conns,
            "opened": opened,
            "exchange": first,
            "after_hold": second,
            "exchange_parallel": parallel,
            "open_at_end": still_open,
            "close_ms": ms(closing.elapsed()),
        }),
    );
    Ok(())
}

/// One exchange on every stream, at most `parallel` at a time (0: all at once);
/// returns the streams that answered (a failed one is closed) and `{wall_ms, ok,
/// failed, latency}`. Latency is counted from the request, not from the wait for a turn.
pub async fn exchange_all(
    streams: Vec<TcpStream>,
    proto: &Proto,
    timeout: Duration,
    parallel: usize,
) -> (Vec<TcpStream>, Value) {
    let started = Instant::now();
    let gate = Arc::new(Semaphore::new(if parallel == 0 {
        Semaphore::MAX_PERMITS
    } else {
        parallel
    }));
    let mut set = JoinSet::new();
    for mut stream in streams {
        let (proto, gate) = (proto.clone(), gate.clone());
        set.spawn(async move {
            // Never closed, so acquiring only waits.
            let _turn = gate.acquire_owned().await.ok();
            let t = Instant::now();
            let result = proto.exchange(&mut stream, timeout).await;
            (stream, result, t.elapsed())
        });
    }
    let mut kept = Vec::with_capacity(set.len());
    let (mut failed, mut latency) = (Tally::default(), Samples::default());
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((stream, Ok(()), took)) => {
                latency.push(took);
                kept.push(stream);
            }
            Ok((_, Err(kind), _)) => failed.add(kind),
            Err(_) => failed.add("task-failed"),
        }
    }
    let report = json!({
        "wall_ms": ms(started.elapsed()),
        "ok": kept.len(),
        "failed": failed.json(),
        "latency": latency.summary(),
    });
    (kept, report)
}
