//! `loadgen`: the load client and the servers of `cargo xtask bench-load`.
//!
//! One process holds thousands of connections (tokio), which `netprobe`'s blocking
//! thread-per-connection design cannot. Clients run in the pod (netns + cgroup), so their
//! connects to a Backend's address are redirected to the agent's proxy like any
//! workload's; servers run in the ext namespace.
//!
//! ```text
//! loadgen serve [--echo ADDR]... [--sink ADDR]...
//! loadgen hold    --target IP:PORT --conns N [--http HOST] [--hold-secs S]
//! loadgen noread  --target IP:PORT --conns N [--http HOST --path P] [--bytes B] [--watch-secs S]
//! loadgen trickle --target IP:PORT --conns N [--http HOST] [--trickle-secs S] [--watch-secs S]
//! loadgen rate    --target IP:PORT --conns N [--http HOST] --secs S
//! loadgen churn   --target IP:PORT --conns N [--http HOST] --secs S
//! ```
//!
//! `serve`: `--echo` writes back every byte it reads; `--sink` accepts and never reads
//! (dropping a connection once its peer has gone). Each prints `listening <role> <addr>`.
//! Without `--http` a client exchange is `ping\n` echoed back; with it, an HTTP/1.1
//! `GET` with that Host that must answer 200. Clients print JSON lines on stdout, each
//! with an `event`: progress (`opened`, `held`) and last `result`; durations are in
//! milliseconds, distributions as `{n,min,p50,p90,p99,max,mean}`, failures as counts
//! by kind. See each mode's module for what it measures.

#[path = "loadgen/conn.rs"]
mod conn;
#[path = "loadgen/hold.rs"]
mod hold;
#[path = "loadgen/proto.rs"]
mod proto;
#[path = "loadgen/rate.rs"]
mod rate;
#[path = "loadgen/serve.rs"]
mod serve;
#[path = "loadgen/slow.rs"]
mod slow;
#[path = "loadgen/stats.rs"]
mod stats;

use std::io::Write as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::Value;

#[derive(Parser)]
#[command(
    name = "loadgen",
    about = "load client and servers of cargo xtask bench-load"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Echo and sink servers.
    Serve(serve::ServeArgs),
    /// Open N connections, exchange on all while all are open, hold, exchange again, close.
    Hold(hold::HoldArgs),
    /// Open N connections, send a large body (or ask for a large response) and never read.
    Noread(slow::NoreadArgs),
    /// Open N connections and send one byte per second, then go silent.
    Trickle(slow::TrickleArgs),
    /// Closed-loop requests on N keep-alive connections: rate and latency.
    Rate(rate::RateArgs),
    /// N workers, each connecting, asking once and waiting for the end, over and over.
    Churn(rate::ChurnArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    conn::raise_open_file_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("loadgen: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.mode {
            Mode::Serve(args) => serve::run(args).await,
            Mode::Hold(args) => hold::run(args).await,
            Mode::Noread(args) => slow::noread(args).await,
            Mode::Trickle(args) => slow::trickle(args).await,
            Mode::Rate(args) => rate::rate(args).await,
            Mode::Churn(args) => rate::churn(args).await,
        }
    });
    // Thousands of tasks may still hold sockets; do not wait for them.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `{"event": event, ...fields}` as one line and flushes (stdout is a pipe, which
/// would otherwise hold it back from the supervising bench).
pub fn emit(event: &str, fields: Value) {
    let mut object = serde_json::Map::new();
    object.insert("event".into(), event.into());
    if let Value::Object(map) = fields {
        object.extend(map);
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", Value::Object(object));
    let _ = out.flush();
}
