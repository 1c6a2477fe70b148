//! Part 1: 10,000 client connections held through the proxy together, every one served
//! while all are open, for a TCP and for an HTTP Backend.

use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

use super::BenchLoadArgs;
use super::bed::{Bed, ECHO, MemoryUse, Target, WEB};
use super::probe;
use crate::tasks::numbers::thousands;

/// What the bench saw while every connection was open.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub rss_kib: u64,
    pub fds: Option<usize>,
    /// `redirector_connections_active{backend}`, or why `/metrics` did not answer (an
    /// agent out of descriptors cannot accept its admin connections either).
    pub active: Result<f64, String>,
    /// ESTABLISHED connections on the upstream server's port (ext namespace).
    pub upstream: Option<usize>,
    /// `nf_conntrack_count` in the node namespace.
    pub conntrack: String,
}

pub struct Held {
    pub label: String,
    pub conns: usize,
    pub result: Value,
    pub snapshot: Snapshot,
    pub memory: MemoryUse,
    pub open_files: Option<u64>,
    /// The agent's descriptors right after it became ready.
    pub base_fds: Option<usize>,
    /// HTTP exchanges in flight at once (`None`: all at once).
    pub exchange_parallel: Option<usize>,
    pub warnings: Vec<String>,
}

/// HTTP exchanges in flight at once: what one client process can ask at the same
/// moment without making the proxy dial thousands of upstream connections (see
/// `loadgen hold --exchange-parallel`).
const HTTP_PARALLEL: usize = 256;
/// When the agent's memory is read a second time after the clients closed (on top of
/// the first reading's settle time): whether freed memory goes back to the system.
pub const LATER: Duration = Duration::from_secs(17);
/// Descriptors the agent may need beyond two per held connection: a few accepts and
/// timers in flight.
const FD_MARGIN: u64 = 16;

/// A smaller copy buffer (`--buffer-size`) for the case that shows what the TCP
/// splice's per-connection memory is made of (two buffers of this size).
const SMALL_BUFFER: &str = "8192";

/// One held-connections case: what the report calls it, where the clients go, how
/// many, with which extra agent flags.
struct Case {
    label: String,
    target: Target,
    conns: usize,
    agent_args: &'static [&'static str],
}

/// The TCP (echo) and the HTTP (nginx) case, each with its own agent; then the TCP case
/// with `--buffer-size 8192`. If the agent's descriptor limit (`nofile`) cannot hold
/// `--conns` spliced connections (two descriptors each), those two TCP cases run with
/// the most connections it can hold, the default one twice (at `--conns` and at that).
pub fn run(bed: &Bed, args: &BenchLoadArgs, nofile: u64) -> Vec<Result<Held>> {
    let n = thousands(args.conns as u64);
    let first = [
        Case {
            label: format!("TCP Backend (echo), {n}"),
            target: ECHO,
            conns: args.conns,
            agent_args: &[],
        },
        Case {
            label: format!("HTTP Backend (nginx), {n}"),
            target: WEB,
            conns: args.conns,
            agent_args: &[],
        },
    ];
    let mut runs: Vec<Result<Held>> = first.into_iter().map(|c| one(bed, c, args)).collect();
    let base = runs.iter().flatten().find_map(|h| h.base_fds).unwrap_or(0);
    let fit =
        usize::try_from(nofile.saturating_sub(base as u64 + FD_MARGIN) / 2).unwrap_or(usize::MAX);
    let mut more = Vec::new();
    let conns = if fit < args.conns {
        let fit_n = thousands(fit as u64);
        more.push(Case {
            label: format!(
                "TCP Backend (echo), {fit_n}: the most RLIMIT_NOFILE {} allows",
                thousands(nofile)
            ),
            target: ECHO,
            conns: fit,
            agent_args: &[],
        });
        fit
    } else {
        args.conns
    };
    more.push(Case {
        label: format!(
            "TCP Backend (echo), {}, agent `--buffer-size {SMALL_BUFFER}`",
            thousands(conns as u64)
        ),
        target: ECHO,
        conns,
        agent_args: &["--buffer-size", SMALL_BUFFER],
    });
    runs.extend(more.into_iter().map(|c| one(bed, c, args)));
    runs
}

fn one(bed: &Bed, case: Case, args: &BenchLoadArgs) -> Result<Held> {
    let Case {
        label,
        target,
        conns,
        agent_args,
    } = case;
    println!("\n==> held connections: {label}");
    let server = match target.http {
        Some(_) => bed.nginx.pid(),
        None => bed.servers.pid(),
    };
    let agent = bed.agent(agent_args)?;
    let mut cmd = vec![
        "hold".to_owned(),
        "--target".into(),
        target.addr.to_string(),
        "--conns".into(),
        conns.to_string(),
        "--hold-secs".into(),
        args.hold_secs.to_string(),
    ];
    if let Some(host) = target.http {
        cmd.extend(["--http".into(), host.to_owned()]);
        cmd.extend(["--exchange-parallel".into(), HTTP_PARALLEL.to_string()]);
    }
    let mut client = bed.client(&cmd)?;
    let minutes = Duration::from_secs(180);
    client.event("held", minutes)?;
    // What needs nothing from the agent first: at its descriptor limit its admin
    // endpoint answers only once the clients let go.
    let (rss_kib, fds) = (probe::memory(agent.pid)?.rss_kib, probe::fds(agent.pid));
    let upstream = probe::established_on(server, target.addr.port());
    let conntrack = probe::sysctl_in(
        &bed.topology.node,
        "/proc/sys/net/netfilter/nf_conntrack_count",
    );
    let metrics = probe::metrics_within(&bed.topology.node, Duration::from_secs(2))
        .map_err(|e| format!("{e:#}"));
    let snapshot = Snapshot {
        rss_kib,
        fds,
        active: metrics.map(|text| {
            let backend = target.backend();
            probe::sample(
                &text,
                "redirector_connections_active",
                &[("backend", &backend)],
            )
        }),
        upstream,
        conntrack,
    };
    println!(
        "    all held: agent VmRSS {} KiB, {} descriptors, {:?} active",
        snapshot.rss_kib,
        snapshot.fds.unwrap_or(0),
        snapshot.active
    );
    let result = client.result(minutes)?;
    let warnings = agent.warnings();
    let (open_files, base_fds) = (agent.open_files, agent.base_fds);
    let memory = agent.finish(Some(LATER))?;
    Ok(Held {
        label,
        conns,
        exchange_parallel: target.http.map(|_| HTTP_PARALLEL),
        result,
        snapshot,
        memory,
        open_files,
        base_fds,
        warnings,
    })
}
