//! One entry of bench/history.md: every run of the benchmark is recorded there, not only
//! the best, so a variant (a crypto provider, a copy path) is judged by all its runs.

use std::fmt::Write as _;

use super::budget;
use super::ceilings::Ceilings;
use super::format::{fmt_latency, fmt_num, fmt_rate};
use super::ratios::{Metric, mib, p99, rps};
use super::results::Results;
use super::targets;
use super::wrk::Workload;

/// What the entry says about the run besides the numbers.
pub struct HistoryHead {
    /// `2026-11-24 12:00 UTC`.
    pub date: String,
    /// The workspace's commit, `+ uncommitted changes` when the agent's sources differ.
    pub commit: String,
    /// The `--redirector-bin` path, or how the agent was built.
    pub redirector: String,
    /// `--label`, empty if none.
    pub label: String,
    /// Repetitions, duration, cases and workloads (`quick`, `partial`).
    pub run: String,
    /// Where the full report was written.
    pub report: String,
}

/// The Markdown of one history entry: a heading, a few facts, the medians per case and
/// workload, the issue 14 target rows and the bounds beside them.
pub fn entry(results: &Results, ceilings: Option<&Ceilings>, head: &HistoryHead) -> String {
    let label = if head.label.is_empty() {
        "no label".to_owned()
    } else {
        format!("label: {}", head.label)
    };
    let mut md = format!("\n## {} · {} · {label}\n\n", head.date, head.commit);
    let _ = writeln!(md, "- redirector: {}", head.redirector);
    let provider = ceilings.map_or_else(
        || "not measured (--no-ceilings)".to_owned(),
        Ceilings::provider,
    );
    let _ = writeln!(md, "- crypto provider: {provider}");
    if let Some(c) = ceilings {
        let _ = writeln!(md, "- ceilings: {}", c.summary());
    }
    let _ = writeln!(md, "- run: {}; report: {}\n", head.run, head.report);

    md.push_str("| case | keep-alive req/s | p99 | conn/s | p99 | bulk MiB/s | p99 |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    for &case in &results.cases {
        let cell = |workload: Workload, metric: Metric, show: &dyn Fn(Option<f64>) -> String| {
            if !results.planned(case, workload) {
                "—".to_owned()
            } else if results.cell(case, workload).is_err() {
                "failed".to_owned()
            } else {
                show(results.median(case, workload, metric))
            }
        };
        let rate = |v| fmt_rate(v);
        let latency = |v| fmt_latency(v);
        let one = |v| fmt_num(v, 1);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            case.name(),
            cell(Workload::Keepalive, rps, &rate),
            cell(Workload::Keepalive, p99, &latency),
            cell(Workload::Close, rps, &rate),
            cell(Workload::Close, p99, &latency),
            cell(Workload::Bulk, mib, &one),
            cell(Workload::Bulk, p99, &latency),
        );
    }
    let rows = targets::table_rows(results);
    if !rows.is_empty() {
        md.push_str("\n| issue 14 target | value | bound | met |\n|---|---:|---|---|\n");
        for row in rows {
            let _ = writeln!(md, "{row}");
        }
    }
    let bounds = budget::bound_rows(results);
    if !bounds.is_empty() {
        md.push_str("\n| bound (where the CPU goes) | value | target |\n|---|---:|---|\n");
        for row in bounds {
            let _ = writeln!(md, "{row}");
        }
    }
    md
}
