//! The report's every-run table: one row per wrk run, failed runs with their reason.

use super::cases::Case;
use super::format::{escape, fmt_latency, fmt_num, fmt_rate};
use super::results::Sample;
use super::wrk::Workload;

pub(super) fn run_row(case: Case, workload: Workload, run: &Result<Sample, String>) -> String {
    match run {
        Ok(s) => format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | ok |\n",
            s.rep,
            case.label(),
            workload.label(),
            s.wrk.requests,
            fmt_rate(Some(s.wrk.requests_per_s)),
            fmt_latency(Some(s.wrk.p50_us)),
            fmt_latency(Some(s.wrk.p99_us)),
            fmt_num(Some(s.wrk.mib_per_s), 1),
            fmt_num(s.proxy_cpu_s, 2),
            fmt_num(Some(s.nginx_cpu_s), 2),
            s.upstream_conns
                .map_or_else(|| "—".to_owned(), |n| n.to_string()),
        ),
        Err(reason) => format!(
            "| | {} | {} | | | | | | | | | failed: {} |\n",
            case.label(),
            workload.label(),
            escape(reason)
        ),
    }
}
