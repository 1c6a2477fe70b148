//! The TCP Backend against the last run before HTTP forwarding existed: adding an HTTP
//! path to the proxy must not slow down the byte splice.
//!
//! The "before" numbers are the medians of the committed bench/results.md of commit
//! 101070a (agent at fd0ab32, 2026-11-23), when the redirector case was a TCP splice. The
//! machine is shared and drifts (direct TLS varied 43.9k-52.3k req/s across runs of that
//! day), so direct TLS is compared the same way: if it moved as much as the redirector
//! did, the machine moved, not the agent.

use std::fmt::Write as _;

use super::cases::Case;
use super::format::{fmt_num, fmt_rate};
use super::ratios::{Metric, Target, mib, rps};
use super::results::Results;
use super::wrk::Workload;

/// Where the before numbers come from.
const SOURCE: &str = "bench/results.md of commit 101070a, agent at fd0ab32";

/// One number of the earlier run: the redirector's and direct TLS's median.
struct Before {
    what: &'static str,
    workload: Workload,
    metric: Metric,
    redirector: f64,
    direct: f64,
    /// Whether to print it as a rate (thousands separators) or with one decimal.
    rate: bool,
}

const BEFORE: [Before; 3] = [
    Before {
        what: "req/s (keepalive)",
        workload: Workload::Keepalive,
        metric: rps,
        redirector: 35_214.0,
        direct: 47_169.0,
        rate: true,
    },
    Before {
        what: "conn/s",
        workload: Workload::Close,
        metric: rps,
        redirector: 2_252.0,
        direct: 1_640.0,
        rate: true,
    },
    Before {
        what: "bulk MiB/s",
        workload: Workload::Bulk,
        metric: mib,
        redirector: 569.4,
        direct: 781.5,
        rate: false,
    },
];

/// The before/now table, if the TCP redirector case ran.
pub(super) fn before(results: &Results) -> Option<String> {
    let rows: Vec<&Before> = BEFORE
        .iter()
        .filter(|b| results.planned(Case::RedirectorTcp, b.workload))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let mut md = format!(
        "\n### TCP Backends against before ({SOURCE})\n\n\
         | redirector, protocol TCP | before | now | now / before | target | met | direct TLS now / before |\n\
         |---|---:|---:|---:|---|---|---:|\n"
    );
    let target = Target::AtLeast(1.0);
    for b in rows {
        let show = |v: Option<f64>| {
            if b.rate { fmt_rate(v) } else { fmt_num(v, 1) }
        };
        let now = results.median(Case::RedirectorTcp, b.workload, b.metric);
        let direct = results.median(Case::Direct, b.workload, b.metric);
        let (ratio, met) = match now {
            Some(now) => {
                let r = now / b.redirector;
                (format!("{r:.3}"), target.met(r))
            }
            None => ("n/a".to_owned(), "no"),
        };
        let direct_ratio =
            direct.map_or_else(|| "—".to_owned(), |d| format!("{:.3}", d / b.direct));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {ratio} | {} | {met} | {direct_ratio} |",
            b.what,
            show(Some(b.redirector)),
            show(now),
            target.text(),
        );
    }
    Some(md)
}
