//! Part 3: an upstream that swallows SYNs, under load, with `--connect-timeout`: how
//! long its clients wait for the failure, and whether another Backend notices.
//!
//! One agent for the whole part. The healthy Backends' closed-loop rate is measured
//! alone, then while churn clients keep the black-holed Backends (TCP and HTTP) busy,
//! then alone again (so a drift of the machine shows as a difference between the two
//! "alone" runs rather than as an effect of the load).

use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

use super::BenchLoadArgs;
use super::bed::{Bed, ECHO, HOLE, HOLE_WEB, MemoryUse, Target, WEB};
use super::probe;

/// Time the black-hole load runs before the healthy Backends are measured under it.
const WARMUP: Duration = Duration::from_secs(4);

pub struct Rates {
    pub label: &'static str,
    pub alone: Value,
    pub during: Value,
    pub after: Value,
}

pub struct Hole {
    /// Per black-holed Backend: its label and the churn result.
    pub churn: Vec<(&'static str, Value)>,
    pub rates: Vec<Rates>,
    /// `redirector_connections_refused_total{backend="load/hole",reason="upstream_connect"}`.
    pub refused: f64,
    pub memory: MemoryUse,
    pub warnings: Vec<String>,
}

const GOOD: [(&str, Target); 2] = [("TCP Backend (echo)", ECHO), ("HTTP Backend (nginx)", WEB)];
const BAD: [(&str, Target); 2] = [
    ("TCP Backend, black-holed", HOLE),
    ("HTTP Backend, black-holed", HOLE_WEB),
];

pub fn run(bed: &Bed, args: &BenchLoadArgs) -> Result<Hole> {
    println!(
        "\n==> black-holed upstream, --connect-timeout {}s",
        args.connect_timeout_secs
    );
    let timeout = format!("{}s", args.connect_timeout_secs);
    let agent = bed.agent(&["--connect-timeout", &timeout])?;
    let alone = rates(bed, args, "alone")?;

    let churn_secs = WARMUP.as_secs() + (GOOD.len() as u64) * (args.rate_secs + 2) + 3;
    let mut churners = Vec::new();
    for (label, target) in BAD {
        let cmd = client_args("churn", target, args.hole_workers, churn_secs);
        churners.push((label, bed.client(&cmd)?));
    }
    std::thread::sleep(WARMUP);
    let during = rates(bed, args, "during the black-hole load")?;
    let mut churn = Vec::new();
    for (label, client) in churners {
        churn.push((label, client.result(Duration::from_secs(churn_secs + 60))?));
    }
    let after = rates(bed, args, "alone again")?;

    let metrics = probe::metrics(&bed.topology.node)?;
    let refused = probe::sample(
        &metrics,
        "redirector_connections_refused_total",
        &[("backend", &HOLE.backend()), ("reason", "upstream_connect")],
    );
    let warnings = agent.warnings();
    let memory = agent.finish(None)?;
    let rates = (GOOD.iter().zip(alone).zip(during).zip(after))
        .map(|((((label, _), alone), during), after)| Rates {
            label,
            alone,
            during,
            after,
        })
        .collect();
    Ok(Hole {
        churn,
        rates,
        refused,
        memory,
        warnings,
    })
}

/// A rate run on each healthy Backend, one after the other.
fn rates(bed: &Bed, args: &BenchLoadArgs, when: &str) -> Result<Vec<Value>> {
    GOOD.iter()
        .map(|(label, target)| {
            let cmd = client_args("rate", *target, args.rate_conns, args.rate_secs);
            let result = bed
                .client(&cmd)?
                .result(Duration::from_secs(args.rate_secs + 60))?;
            println!(
                "    {label}, {when}: {:.0} req/s, p99 {} ms",
                result["rps"].as_f64().unwrap_or(0.0),
                result["latency"]["p99"]
            );
            Ok(result)
        })
        .collect()
}

fn client_args(mode: &str, target: Target, conns: usize, secs: u64) -> Vec<String> {
    let mut cmd: Vec<String> = [mode, "--target", &target.addr.to_string()]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    cmd.extend([
        "--conns".into(),
        conns.to_string(),
        "--secs".into(),
        secs.to_string(),
    ]);
    if let Some(host) = target.http {
        cmd.extend(["--http".into(), host.to_owned()]);
    }
    cmd
}
