//! The report's ratios: each redirector Backend kind against the HAProxy mode doing the
//! same work, and against direct TLS for bulk, with their targets; the plaintext Backend
//! against plaintext straight to nginx, and (no target) against HAProxy `mode tcp` in
//! plaintext, the reference proxy on the same path.
//!
//! The HTTP targets are stricter than the TCP ones on purpose: an HTTP proxy that pools
//! upstream connections skips the upstream TLS handshake of every new client connection
//! and parses requests anyway, so it should beat HAProxy `mode http` clearly on requests
//! and at least match it on new connections.

use std::fmt::Write as _;

use super::cases::{Case, Layer};
use super::results::{Results, Sample, per_10k, per_gib};
use super::wrk::Workload;

/// A number read from one sample.
pub(super) type Metric = fn(&Sample) -> Option<f64>;

/// A ratio's goal.
#[derive(Clone, Copy)]
pub(super) enum Target {
    AtLeast(f64),
    AtMost(f64),
    /// Strictly below the bound ("lower than").
    Below(f64),
    /// Shown for information: lower is better, no bound.
    None,
    /// Shown for information, no bound and no direction.
    Info,
}

impl Target {
    pub(super) fn text(self) -> String {
        match self {
            Target::AtLeast(bound) => format!("≥ {}", bound_text(bound)),
            Target::AtMost(bound) => format!("≤ {}", bound_text(bound)),
            Target::Below(bound) => format!("< {}", bound_text(bound)),
            Target::None => "lower is better (no target)".to_owned(),
            Target::Info => "no target".to_owned(),
        }
    }

    /// "yes", "**no**", or "—" when there is no target.
    pub(super) fn met(self, ratio: f64) -> &'static str {
        match self {
            Target::AtLeast(bound) => yes_no(ratio >= bound),
            Target::AtMost(bound) => yes_no(ratio <= bound),
            Target::Below(bound) => yes_no(ratio < bound),
            Target::None | Target::Info => "—",
        }
    }
}

/// A bound with one decimal, or two when it has them (0.95).
fn bound_text(bound: f64) -> String {
    if ((bound * 10.0).round() - bound * 10.0).abs() < 1e-9 {
        format!("{bound:.1}")
    } else {
        format!("{bound:.2}")
    }
}

pub(super) fn rps(s: &Sample) -> Option<f64> {
    Some(s.wrk.requests_per_s)
}

pub(super) fn mib(s: &Sample) -> Option<f64> {
    Some(s.wrk.mib_per_s)
}

pub(super) fn p99(s: &Sample) -> Option<f64> {
    Some(s.wrk.p99_us)
}

/// Proxy CPU seconds per 10k requests.
pub(super) fn cpu(s: &Sample) -> Option<f64> {
    per_10k(s.proxy_cpu_s, s.wrk.requests)
}

/// Proxy CPU seconds per GiB read by the client.
pub(super) fn cpu_gib(s: &Sample) -> Option<f64> {
    per_gib(s.proxy_cpu_s, s.wrk.read_bytes)
}

/// One ratio row: `ours` over `base` for `workload`.
pub(super) struct Row {
    pub(super) name: String,
    pub(super) ours: Case,
    pub(super) base: Case,
    pub(super) workload: Workload,
    pub(super) metric: Metric,
    pub(super) target: Target,
}

impl Row {
    /// Whether both cases ran this workload.
    pub(super) fn planned(&self, results: &Results) -> bool {
        results.planned(self.ours, self.workload) && results.planned(self.base, self.workload)
    }

    /// The ratio of the medians, or why there is none.
    pub(super) fn ratio(&self, results: &Results) -> Result<f64, String> {
        let ours = results.median(self.ours, self.workload, self.metric);
        let theirs = results.median(self.base, self.workload, self.metric);
        match (ours, theirs) {
            (Some(a), Some(b)) if b > 0.0 => Ok(a / b),
            _ => {
                let who = if ours.is_none() { self.ours } else { self.base };
                Err(format!("{} has no result", who.label()))
            }
        }
    }

    /// The value cell and the "met" cell.
    pub(super) fn cells(&self, results: &Results) -> (String, &'static str) {
        match self.ratio(results) {
            Ok(ratio) => (format!("{ratio:.3}"), self.target.met(ratio)),
            Err(why) => (
                format!("n/a ({why})"),
                match self.target {
                    Target::None | Target::Info => "—",
                    _ => "no",
                },
            ),
        }
    }
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
        row("CPU per GiB (bulk)", haproxy, Bulk, cpu_gib, Target::None),
        row("bulk MiB/s", Case::Direct, Bulk, mib, Target::AtLeast(0.9)),
    ]
}

/// The plaintext Backend against plaintext straight to nginx, then against HAProxy
/// `mode tcp` in plaintext (for information: what a proxy costs on this path).
fn plain_rows() -> Vec<Row> {
    use Workload::{Bulk, Close, Keepalive};
    let row = |what: &str, base, workload, metric, target| Row {
        name: format!(
            "redirector plaintext / {}, {what}",
            if base == Case::DirectPlain {
                "direct plaintext"
            } else {
                "HAProxy plaintext"
            }
        ),
        ours: Case::RedirectorPlain,
        base,
        workload,
        metric,
        target,
    };
    let (direct, haproxy) = (Case::DirectPlain, Case::HaproxyPlain);
    vec![
        row("req/s (keepalive)", direct, Keepalive, rps, Target::Info),
        row("p99 (keepalive)", direct, Keepalive, p99, Target::Info),
        row("conn/s", direct, Close, rps, Target::Info),
        row("bulk MiB/s", direct, Bulk, mib, Target::AtLeast(0.9)),
        row("req/s (keepalive)", haproxy, Keepalive, rps, Target::Info),
        row("p99 (keepalive)", haproxy, Keepalive, p99, Target::Info),
        row("bulk MiB/s", haproxy, Bulk, mib, Target::Info),
        row("CPU per GiB (bulk)", haproxy, Bulk, cpu_gib, Target::None),
    ]
}

/// The TCP Backend under `--egress-policy deny` against itself under `allow`: the
/// policy's cost on the bytes path (issue 34: bulk within 3%).
fn egress_rows() -> Vec<Row> {
    use Workload::{Bulk, Keepalive};
    let row = |what: &str, workload, metric, target| Row {
        name: format!("redirector TCP, deny / allow, {what}"),
        ours: Case::RedirectorTcpDeny,
        base: Case::RedirectorTcp,
        workload,
        metric,
        target,
    };
    vec![
        row("bulk MiB/s", Bulk, mib, Target::AtLeast(0.97)),
        row("CPU per GiB (bulk)", Bulk, cpu_gib, Target::Info),
        row("req/s (keepalive)", Keepalive, rps, Target::Info),
    ]
}

/// The HTTP Backend with a BackendPolicy (one credential, two rules) against itself
/// without: the policy's cost per request (issue 35: at most 5% more proxy CPU).
fn policy_rows() -> Vec<Row> {
    use Workload::Keepalive;
    let row = |what: &str, metric, target| Row {
        name: format!("redirector HTTP, policy / none, {what}"),
        ours: Case::RedirectorHttpPolicy,
        base: Case::RedirectorHttp,
        workload: Keepalive,
        metric,
        target,
    };
    vec![
        row(
            "proxy CPU per request (keepalive)",
            cpu,
            Target::AtMost(1.05),
        ),
        row("req/s (keepalive)", rps, Target::Info),
        row("p99 (keepalive)", p99, Target::Info),
    ]
}

/// The ratio tables, one per Backend kind whose redirector case was planned; a row whose
/// base case or workload was not planned is left out.
pub(super) fn ratios(results: &Results) -> String {
    let mut md = String::new();
    for (rows, title) in [
        (rows(Layer::Tcp), "TCP Backends"),
        (rows(Layer::Http), "HTTP Backends"),
        (plain_rows(), "Plaintext Backends"),
        (egress_rows(), "Egress policy"),
        (policy_rows(), "Backend policy"),
    ] {
        let rows: Vec<Row> = rows.into_iter().filter(|r| r.planned(results)).collect();
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

pub(super) fn ratio_row(results: &Results, r: &Row) -> String {
    let (value, met) = r.cells(results);
    format!("| {} | {value} | {} | {met} |\n", r.name, r.target.text())
}

pub(super) fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}
