//! Throughput and failure timing: `rate` (closed-loop requests on keep-alive
//! connections) and `churn` (connect, ask once, time how it ends, again).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::conn::{connect, kind, open_all};
use crate::emit;
use crate::proto::{Proto, read_response};
use crate::stats::{Samples, Tally};

/// Longest wait for one reply or one end.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(clap::Args)]
pub struct RateArgs {
    #[arg(long)]
    target: SocketAddr,
    #[arg(long)]
    conns: usize,
    #[arg(long)]
    http: Option<String>,
    #[arg(long, default_value = "/")]
    path: String,
    #[arg(long)]
    secs: u64,
}

/// Every connection asks, waits for the answer, asks again, for `--secs`; a connection
/// that fails is counted and replaced. `result`: requests, req/s, latency.
pub async fn rate(args: RateArgs) -> Result<()> {
    let proto = Proto::new(args.http.clone(), &args.path);
    let (streams, opened) = open_all(args.target, args.conns).await;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.secs);
    let mut set = JoinSet::new();
    for stream in streams {
        let (proto, target) = (proto.clone(), args.target);
        set.spawn(async move {
            let (mut latency, mut errors) = (Samples::default(), Tally::default());
            let mut stream = Some(stream);
            while Instant::now() < deadline {
                let mut s = match stream.take() {
                    Some(s) => s,
                    None => match connect(target).await {
                        Ok(s) => s,
                        Err(kind) => {
                            errors.add(format!("connect-{kind}"));
                            continue;
                        }
                    },
                };
                let t = Instant::now();
                match proto.exchange(&mut s, REPLY_TIMEOUT).await {
                    Ok(()) => {
                        latency.push(t.elapsed());
                        stream = Some(s);
                    }
                    Err(kind) => errors.add(kind),
                }
            }
            (latency, errors)
        });
    }
    let (mut latency, mut errors) = (Samples::default(), Tally::default());
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((l, e)) => {
                latency.extend(l);
                errors.merge(e);
            }
            Err(_) => errors.add("task-failed"),
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let ok = latency.len();
    emit(
        "result",
        json!({
            "conns": args.conns,
            "opened": opened,
            "secs": wall,
            "requests": ok,
            "rps": ok as f64 / wall.max(1e-9),
            "errors": errors.json(),
            "latency": latency.summary(),
        }),
    );
    Ok(())
}

#[derive(clap::Args)]
pub struct ChurnArgs {
    #[arg(long)]
    target: SocketAddr,
    /// Workers, each with one connection at a time.
    #[arg(long)]
    conns: usize,
    #[arg(long)]
    http: Option<String>,
    #[arg(long, default_value = "/")]
    path: String,
    #[arg(long)]
    secs: u64,
}

/// Workers that connect, send one request and time how the connection ends (from the
/// connect call): against a black-holed upstream, a proxy's close (TCP) or 502 (HTTP)
/// after its connect timeout. `result`: attempts and, per way of ending, the times.
pub async fn churn(args: ChurnArgs) -> Result<()> {
    let proto = Proto::new(args.http.clone(), &args.path);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.secs);
    let mut set = JoinSet::new();
    for i in 0..args.conns {
        let (proto, target) = (proto.clone(), args.target);
        set.spawn(async move {
            // Staggered over a second: a steady stream of attempts, not waves.
            tokio::time::sleep(Duration::from_millis((i % 1000) as u64)).await;
            let mut ends: BTreeMap<String, Samples> = BTreeMap::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                let end = once(&proto, target).await;
                ends.entry(end).or_default().push(t.elapsed());
            }
            ends
        });
    }
    let mut ends: BTreeMap<String, Samples> = BTreeMap::new();
    while let Some(joined) = set.join_next().await {
        for (end, samples) in joined.unwrap_or_default() {
            ends.entry(end).or_default().extend(samples);
        }
    }
    let attempts: usize = ends.values().map(Samples::len).sum();
    let by_end: serde_json::Map<String, Value> = (ends.into_iter())
        .map(|(end, samples)| (end, samples.summary()))
        .collect();
    emit(
        "result",
        json!({
            "workers": args.conns,
            "secs": started.elapsed().as_secs_f64(),
            "attempts": attempts,
            "ends": by_end,
        }),
    );
    Ok(())
}

/// One connection's life: how it ended (`eof`, `reset`, `reply`, `status-502`, ...).
async fn once(proto: &Proto, target: SocketAddr) -> String {
    let mut stream: TcpStream = match connect(target).await {
        Ok(s) => s,
        Err(kind) => return format!("connect-{kind}"),
    };
    let ending = async {
        stream.write_all(&proto.request()).await?;
        match proto {
            Proto::Http { .. } => read_response(&mut stream)
                .await
                .map(|status| format!("status-{status}")),
            Proto::Echo => {
                let mut buf = [0u8; 512];
                let n = stream.read(&mut buf).await?;
                Ok(if n == 0 { "eof" } else { "reply" }.to_owned())
            }
        }
    };
    match tokio::time::timeout(REPLY_TIMEOUT, ending).await {
        Ok(Ok(end)) => end,
        Ok(Err(e)) => kind(&e),
        Err(_) => "no-end".into(),
    }
}
