//! The targets of issue 14 ("Performance"), each a ratio of medians of this run: the TLS
//! Backends against the HAProxy mode doing the same work and against direct TLS, the
//! plaintext Backend against direct plaintext (with HAProxy in plaintext against direct
//! plaintext beside it, for reference, not a target), and the proxy's CPU per unit of
//! work against HAProxy's. A row whose cases or workload were not planned is left out.

use std::fmt::Write as _;

use super::cases::Case;
use super::ratios::{Row, Target, cpu, cpu_gib, mib, p99, rps};
use super::results::Results;
use super::wrk::Workload;

/// The rows, in the order.
pub(super) fn rows() -> Vec<Row> {
    use Case::{
        DirectPlain, HaproxyHttp, HaproxyPlain, HaproxyTcp, RedirectorHttp, RedirectorPlain,
        RedirectorTcp,
    };
    use Workload::{Bulk, Close, Keepalive};
    let row = |name: &str, ours, base, workload, metric, target| Row {
        name: name.to_owned(),
        ours,
        base,
        workload,
        metric,
        target,
    };
    vec![
        row(
            "TLS Backend (redirector TCP) / HAProxy mode tcp, keep-alive req/s",
            RedirectorTcp,
            HaproxyTcp,
            Keepalive,
            rps,
            Target::AtLeast(1.2),
        ),
        row(
            "TLS Backend (redirector TCP) / HAProxy mode tcp, keep-alive p99",
            RedirectorTcp,
            HaproxyTcp,
            Keepalive,
            p99,
            Target::AtMost(1.0),
        ),
        row(
            "TLS Backend (redirector HTTP) / HAProxy mode http, keep-alive req/s",
            RedirectorHttp,
            HaproxyHttp,
            Keepalive,
            rps,
            Target::AtLeast(1.2),
        ),
        row(
            "TLS Backend (redirector HTTP) / HAProxy mode http, keep-alive p99",
            RedirectorHttp,
            HaproxyHttp,
            Keepalive,
            p99,
            Target::AtMost(1.0),
        ),
        row(
            "TLS Backend (redirector TCP) / direct TLS, bulk 1 MiB MiB/s",
            RedirectorTcp,
            Case::Direct,
            Bulk,
            mib,
            Target::AtLeast(0.95),
        ),
        row(
            "TLS Backend (redirector HTTP) / direct TLS, bulk 1 MiB MiB/s",
            RedirectorHttp,
            Case::Direct,
            Bulk,
            mib,
            Target::AtLeast(0.95),
        ),
        row(
            "Plaintext Backend / direct plaintext, bulk 1 MiB MiB/s",
            RedirectorPlain,
            DirectPlain,
            Bulk,
            mib,
            Target::AtLeast(0.9),
        ),
        // Not a target: what the reference proxy gets on the same path and bed.
        row(
            "HAProxy plaintext / direct plaintext, bulk 1 MiB MiB/s (reference, not a target)",
            HaproxyPlain,
            DirectPlain,
            Bulk,
            mib,
            Target::Info,
        ),
        row(
            "New connections: redirector TCP / HAProxy mode tcp, conn/s",
            RedirectorTcp,
            HaproxyTcp,
            Close,
            rps,
            Target::AtLeast(1.5),
        ),
        row(
            "Proxy CPU per 10k requests (keep-alive): redirector TCP / HAProxy mode tcp",
            RedirectorTcp,
            HaproxyTcp,
            Keepalive,
            cpu,
            Target::Below(1.0),
        ),
        row(
            "Proxy CPU per 10k requests (keep-alive): redirector HTTP / HAProxy mode http",
            RedirectorHttp,
            HaproxyHttp,
            Keepalive,
            cpu,
            Target::Below(1.0),
        ),
        row(
            "Proxy CPU per GiB (bulk): redirector TCP / HAProxy mode tcp",
            RedirectorTcp,
            HaproxyTcp,
            Bulk,
            cpu_gib,
            Target::Below(1.0),
        ),
        row(
            "Proxy CPU per GiB (bulk): redirector HTTP / HAProxy mode http",
            RedirectorHttp,
            HaproxyHttp,
            Bulk,
            cpu_gib,
            Target::Below(1.0),
        ),
    ]
}

/// The planned rows as Markdown table rows (`| name | value | target | met |`), none if no
/// row was planned.
pub(super) fn table_rows(results: &Results) -> Vec<String> {
    rows()
        .into_iter()
        .filter(|r| r.planned(results))
        .map(|r| {
            let (value, met) = r.cells(results);
            format!("| {} | {value} | {} | {met} |", r.name, r.target.text())
        })
        .collect()
}

/// The "Issue 14 targets" section, if any of its rows was planned.
pub(super) fn section(results: &Results) -> Option<String> {
    let rows = table_rows(results);
    if rows.is_empty() {
        return None;
    }
    let mut md = String::from(
        "\n### Issue 14 targets\n\nRatios of this run's medians (CPU: proxy CPU seconds per \
         10k requests or per GiB read, lower is better).\n\n\
         | target | value | bound | met |\n|---|---:|---|---|\n",
    );
    for row in rows {
        let _ = writeln!(md, "{row}");
    }
    Some(md)
}
