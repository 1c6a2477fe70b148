//! The report's ratios: the redirector against HAProxy and direct TLS, with their targets.

use super::results::{Case, Results, Sample, per_10k};
use super::wrk::Workload;

/// A number read from one sample.
type Metric = fn(&Sample) -> Option<f64>;

/// A ratio's goal.
#[derive(Clone, Copy)]
struct Target {
    bound: f64,
    higher_is_better: bool,
}

/// The ratio rows: redirector against HAProxy, and against direct TLS for bulk.
pub(super) fn ratios(results: &Results) -> Vec<String> {
    use Case::{Direct, Haproxy, Redirector};
    use Workload::{Bulk, Close, Keepalive};
    let rps: Metric = |s| Some(s.wrk.requests_per_s);
    let p99: Metric = |s| Some(s.wrk.p99_us);
    let mib: Metric = |s| Some(s.wrk.mib_per_s);
    let cpu: Metric = |s| per_10k(s.proxy_cpu_s, s.wrk.requests);
    let higher = |bound| {
        Some(Target {
            bound,
            higher_is_better: true,
        })
    };
    let lower = |bound| {
        Some(Target {
            bound,
            higher_is_better: false,
        })
    };
    let rows = [
        (
            "redirector / HAProxy, req/s (keepalive)",
            Haproxy,
            Keepalive,
            rps,
            higher(1.0),
        ),
        (
            "redirector / HAProxy, p99 (keepalive)",
            Haproxy,
            Keepalive,
            p99,
            lower(1.0),
        ),
        (
            "redirector / HAProxy, conn/s",
            Haproxy,
            Close,
            rps,
            higher(0.9),
        ),
        (
            "redirector / HAProxy, CPU per 10k req (keepalive)",
            Haproxy,
            Keepalive,
            cpu,
            None,
        ),
        (
            "redirector / HAProxy, CPU per 10k conn",
            Haproxy,
            Close,
            cpu,
            None,
        ),
        (
            "redirector / direct TLS, bulk MiB/s",
            Direct,
            Bulk,
            mib,
            higher(0.9),
        ),
    ];
    rows.iter()
        .map(|&(name, base, workload, metric, target)| {
            let ours = results.median(Redirector, workload, metric);
            let theirs = results.median(base, workload, metric);
            let target_text = match target {
                Some(t) if t.higher_is_better => format!("≥ {:.1}", t.bound),
                Some(t) => format!("≤ {:.1}", t.bound),
                None => "lower is better (no target)".to_owned(),
            };
            match (ours, theirs) {
                (Some(a), Some(b)) if b > 0.0 => {
                    let r = a / b;
                    let met = match target {
                        Some(t) if t.higher_is_better => yes_no(r >= t.bound),
                        Some(t) => yes_no(r <= t.bound),
                        None => "—",
                    };
                    format!("| {name} | {r:.3} | {target_text} | {met} |\n")
                }
                _ => {
                    let who = if ours.is_none() { Redirector } else { base };
                    format!(
                        "| {name} | n/a ({} has no result) | {target_text} | no |\n",
                        who.label()
                    )
                }
            }
        })
        .collect()
}

fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}
