//! Part 2: peers that never read, or trickle, against an agent with a short
//! `--idle-timeout`: its memory must stay bounded and silent connections must be closed
//! and counted (`redirector_connections_idle_closed_total{backend}`).

use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

use super::BenchLoadArgs;
use super::bed::{Bed, ECHO, MemoryUse, SINK, TLS_WEB, Target, WEB};
use super::buffers::SmallBuffers;
use super::probe;
use super::servers::BIG_FILE;

/// Bytes each never-reading TCP client tries to send: far more than the socket buffers
/// and the proxy's two 64 KiB buffers on the way can hold.
const BODY_BYTES: u64 = 4 << 20;
/// Trickle this long: several idle timeouts, so a proxy that ignored the trickled bytes
/// would have closed them.
const TRICKLE_SECS: u64 = 12;
/// An HTTP head trickled this long outlasts the proxy's 30 s head timeout.
const HEAD_TRICKLE_SECS: u64 = 45;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// TCP clients send a large body to the echo server and never read the echo.
    NoreadTcp,
    /// HTTP clients ask for a large file and never read the response.
    NoreadHttp,
    /// Clients ask a TLS bytes Backend (nginx over TLS) for a large file and never
    /// read: the agent's TLS relay gathers whole records for a client that takes none.
    NoreadTls,
    /// TCP clients send a large body to an upstream that never reads.
    Sink,
    /// TCP clients send one byte a second (echoed), then fall silent.
    TrickleTcp,
    /// HTTP clients send a request head one byte a second.
    TrickleHttp,
}

#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub kind: Kind,
    pub label: &'static str,
    pub target: Target,
}

pub const CASES: [Case; 6] = [
    Case {
        kind: Kind::NoreadTcp,
        label: "TCP clients send 4 MiB, never read (echo upstream)",
        target: ECHO,
    },
    Case {
        kind: Kind::NoreadHttp,
        label: "HTTP clients GET a 1 GiB file, never read",
        target: WEB,
    },
    Case {
        kind: Kind::NoreadTls,
        label: "TLS TCP Backend: clients GET a 1 GiB file, never read",
        target: TLS_WEB,
    },
    Case {
        kind: Kind::Sink,
        label: "TCP upstream never reads (clients send 4 MiB)",
        target: SINK,
    },
    Case {
        kind: Kind::TrickleTcp,
        label: "TCP clients trickle 1 byte/s for 12 s, then silent",
        target: ECHO,
    },
    Case {
        kind: Kind::TrickleHttp,
        label: "HTTP clients trickle a request head 1 byte/s",
        target: WEB,
    },
];

pub struct Slow {
    pub case: Case,
    pub conns: usize,
    /// The `held` event of never-reading clients (all stalled) and the agent's VmRSS then.
    pub held: Option<(Value, u64)>,
    pub result: Value,
    pub idle_closed: f64,
    /// How long after the clients exited the agent still had connections of the Backend
    /// open (`redirector_connections_active{backend}`, polled), and how many then.
    pub lingering: Lingering,
    pub memory: MemoryUse,
    pub warnings: Vec<String>,
}

pub fn run(bed: &Bed, args: &BenchLoadArgs) -> Vec<Result<Slow>> {
    let t = &bed.topology;
    let _small = match SmallBuffers::set(&[&t.pod, &t.node, &t.ext]) {
        Ok(guard) => guard,
        Err(e) => return vec![Err(e.context("capping the socket buffers"))],
    };
    (CASES.iter())
        .filter(|c| args.slow_cases.is_empty() || args.slow_cases.contains(&c.kind))
        .map(|case| {
            println!(
                "\n==> slow peers, {} connections: {}",
                args.slow_conns, case.label
            );
            one(bed, args, *case)
        })
        .collect()
}

/// What the agent still held once the clients were gone.
#[derive(Debug, Clone, Copy)]
pub struct Lingering {
    /// Active connections right after the client process exited.
    pub at_exit: f64,
    /// Seconds until none were left, if that happened within [`LINGER`].
    pub gone_after: Option<f64>,
    /// Active connections at the end of the wait.
    pub at_end: f64,
}

/// How long to wait for the agent to let go of connections whose clients have exited.
pub const LINGER_SECS: u64 = 20;
const LINGER: Duration = Duration::from_secs(LINGER_SECS);

/// Polls the Backend's active connections until none are left or [`LINGER`] passed.
fn linger(bed: &Bed, labels: &[(&str, &str)]) -> Result<Lingering> {
    let started = std::time::Instant::now();
    let active = || -> Result<f64> {
        let text = probe::metrics(&bed.topology.node)?;
        Ok(probe::sample(
            &text,
            "redirector_connections_active",
            labels,
        ))
    };
    let at_exit = active()?;
    let mut now = at_exit;
    while now > 0.0 && started.elapsed() < LINGER {
        std::thread::sleep(Duration::from_millis(250));
        now = active()?;
    }
    Ok(Lingering {
        at_exit,
        gone_after: (now == 0.0).then(|| started.elapsed().as_secs_f64()),
        at_end: now,
    })
}

fn one(bed: &Bed, args: &BenchLoadArgs, case: Case) -> Result<Slow> {
    let idle = format!("{}s", args.idle_timeout_secs);
    let watch = (args.idle_timeout_secs + 10).to_string();
    let agent = bed.agent(&["--idle-timeout", &idle])?;
    let t = case.target;
    let mut cmd: Vec<String> = Vec::new();
    let mut arg = |items: &[&str]| cmd.extend(items.iter().map(|s| (*s).to_owned()));
    let mode = match case.kind {
        Kind::NoreadTcp | Kind::NoreadHttp | Kind::NoreadTls | Kind::Sink => "noread",
        Kind::TrickleTcp | Kind::TrickleHttp => "trickle",
    };
    let (addr, conns) = (t.addr.to_string(), args.slow_conns.to_string());
    arg(&[mode, "--target", &addr, "--conns", &conns]);
    if let Some(host) = t.http {
        arg(&["--http", host]);
    }
    let (body, trickle, head) = (
        BODY_BYTES.to_string(),
        TRICKLE_SECS.to_string(),
        HEAD_TRICKLE_SECS.to_string(),
    );
    match case.kind {
        Kind::NoreadTcp | Kind::Sink => arg(&["--bytes", &body, "--watch-secs", &watch]),
        Kind::NoreadHttp | Kind::NoreadTls => arg(&["--path", BIG_FILE, "--watch-secs", &watch]),
        Kind::TrickleTcp => arg(&["--trickle-secs", &trickle, "--watch-secs", &watch]),
        Kind::TrickleHttp => arg(&["--trickle-secs", &head]),
    }
    let mut client = bed.client(&cmd)?;
    let timeout = Duration::from_secs(180);
    let held = if mode == "noread" {
        let event = client.event("held", timeout)?;
        let rss = probe::memory(agent.pid)?.rss_kib;
        println!("    all stalled: agent VmRSS {rss} KiB");
        Some((event, rss))
    } else {
        None
    };
    let result = client.result(timeout)?;
    let backend = t.backend();
    let labels = [("backend", backend.as_str())];
    let metrics = probe::metrics(&bed.topology.node)?;
    let idle_closed = probe::sample(
        &metrics,
        "redirector_connections_idle_closed_total",
        &labels,
    );
    let lingering = linger(bed, &labels)?;
    let warnings = agent.warnings();
    let memory = agent.finish(None)?;
    Ok(Slow {
        case,
        conns: args.slow_conns,
        held,
        result,
        idle_closed,
        lingering,
        memory,
        warnings,
    })
}
