//! The report's ratios: each redirector Backend kind against the HAProxy mode doing the
//! same work, and against direct TLS for bulk, with their targets.
//!
//! The HTTP targets are stricter than the TCP ones on purpose: an HTTP proxy that pools
//! upstream connections skips the upstream TLS handshake of every new client connection
//! and parses requests anyway, so it should beat HAProxy `mode http` clearly on requests
//! and at least match it on new connections.

use std::fmt::Write as _;

use super::cases::{Case, Layer};
use super::results::{Results, Sample, per_10k};
use super::wrk::Workload;

/// A number read from one sample.
pub(super) type Metric = fn(&Sample) -> Option<f64>;

/// A ratio's goal.
#[derive(Clone, Copy)]
pub(super) enum Target {
    AtLeast(f64),
    AtMost(f64),
    /// Shown for information: lower is better, no bound.
    None,
}

impl Target {
    pub(super) fn text(self) -> String {
        match self {
            Target::AtLeast(bound) => format!("≥ {bound:.1}"),
            Target::AtMost(bound) => format!("≤ {bound:.1}"),
            Target::None => "lower is better (no target)".to_owned(),
        }
    }

    /// "yes", "**no**", or "—" when there is no target.
    pub(super) fn met(self, ratio: f64) -> &'static str {
        match self {
            Target::AtLeast(bound) => yes_no(ratio >= bound),
            Target::AtMost(bound) => yes_no(ratio <= bound),
            Target::None => "—",
        }
    }
}

pub(super) fn rps(s: &Sample) -> Option<f64> {
    Some(s.wrk.requests_per_s)
}

pub(super) fn mib(s: &Sample) -> Option<f64> {
    Some(s.wrk.mib_per_s)
}

fn p99(s: &Sample) -> Option<f64> {
    Some(s.wrk.p99_us)
}

fn cpu(s: &Sample) -> Option<f64> {
    per_10k(s.proxy_cpu_s, s.wrk.requests)
}

/// One ratio row: `ours` over `base` for `workload`.
struct Row {
    name: String,
    ours: Case,
    base: Case,
    workload: Workload,
    metric: Metric,
    target: Target,
}

/// The rows of one Backend kind: against HAProxy in the same mode, and direct TLS for bulk.
fn rows(layer: Layer) -> Vec<Row> {
    use Workload::{Bulk, Close, Keepalive};
    let (ours, haproxy, keepalive_rps, conn_rps) = match layer {
        Layer::Tcp => (Case::RedirectorTcp, Case::HaproxyTcp, 1.0, 0.9),
        Layer::Http => (Case::RedirectorHttp, Case::HaproxyHttp, 1.2, 1.0),
    };
    let mode = match layer {
        Layer::Tcp => "mode tcp",
        Layer::Http => "mode http",
    };
    let them = format!("HAProxy {mode}");
    let row = |what: &str, base: Case, workload, metric, target| Row {
        name: format!(
            "redirector {} / {}, {what}",
            layer.protocol(),
            if base == Case::Direct {
                "direct TLS"
            } else {
                &them
            }
        ),
        ours,
        base,
        workload,
        metric,
        target,
    };
    vec![
        row(
            "req/s (keepalive)",
            haproxy,
            Keepalive,
            rps,
            Target::AtLeast(keepalive_rps),
        ),
        row(
            "p99 (keepalive)",
            haproxy,
            Keepalive,
            p99,
            Target::AtMost(1.0),
        ),
        row("conn/s", haproxy, Close, rps, Target::AtLeast(conn_rps)),
        row(
            "CPU per 10k req (keepalive)",
            haproxy,
            Keepalive,
            cpu,
            Target::None,
        ),
        row("CPU per 10k conn", haproxy, Close, cpu, Target::None),
        row("bulk MiB/s", Case::Direct, Bulk, mib, Target::AtLeast(0.9)),
    ]
}

/// The ratio tables, one per Backend kind whose redirector case was planned; a row whose
/// base case or workload was not planned is left out.
pub(super) fn ratios(results: &Results) -> String {
    let mut md = String::new();
    for (layer, title) in [(Layer::Tcp, "TCP Backends"), (Layer::Http, "HTTP Backends")] {
        let rows: Vec<Row> = rows(layer)
            .into_iter()
            .filter(|r| results.planned(r.ours, r.workload) && results.planned(r.base, r.workload))
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            md,
            "\n### {title}\n\n| ratio | value | target | met |\n|---|---:|---|---|"
        );
        for r in rows {
            md.push_str(&ratio_row(results, &r));
        }
    }
    if md.is_empty() {
        md.push_str("\nNo ratio: the run had no redirector case together with its reference.\n");
    }
    md
}

fn ratio_row(results: &Results, r: &Row) -> String {
    let ours = results.median(r.ours, r.workload, r.metric);
    let theirs = results.median(r.base, r.workload, r.metric);
    let target = r.target.text();
    match (ours, theirs) {
        (Some(a), Some(b)) if b > 0.0 => {
            let ratio = a / b;
            format!(
                "| {} | {ratio:.3} | {target} | {} |\n",
                r.name,
                r.target.met(ratio)
            )
        }
        _ => {
            let who = if ours.is_none() { r.ours } else { r.base };
            let met = match r.target {
                Target::None => "—",
                _ => "no",
            };
            format!(
                "| {} | n/a ({} has no result) | {target} | {met} |\n",
                r.name,
                who.label()
            )
        }
    }
}

pub(super) fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}
