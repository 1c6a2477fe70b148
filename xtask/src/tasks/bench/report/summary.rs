//! The report's results table: one row of medians per case, a failed workload as a
//! footnote.

use super::format::{escape, fmt_latency, fmt_num, fmt_rate};
use super::results::{Case, Results, per_10k};
use super::wrk::Workload;

pub(super) fn row(results: &Results, case: Case, footnotes: &mut Vec<String>) -> String {
    if let Some(reason) = &results.dead[case.index()] {
        return format!(
            "| {} | failed: {} | — | — | — | — | — | — | — |\n",
            case.label(),
            escape(reason)
        );
    }
    let mut cells = vec![case.label().to_owned()];
    let mut failed = |workload: Workload, n: usize, cells: &mut Vec<String>| {
        let reason = results.cell(case, workload).err().unwrap_or_default();
        footnotes.push(format!(
            "{} {}: {}",
            case.label(),
            workload.label(),
            escape(&reason)
        ));
        let mark = format!("failed [{}]", footnotes.len());
        cells.extend(std::iter::repeat_n(mark, n));
    };
    let ka = Workload::Keepalive;
    if results.cell(case, ka).is_ok() {
        cells.push(fmt_rate(
            results.median(case, ka, |s| Some(s.wrk.requests_per_s)),
        ));
        cells.push(fmt_latency(
            results.median(case, ka, |s| Some(s.wrk.p50_us)),
        ));
        cells.push(fmt_latency(
            results.median(case, ka, |s| Some(s.wrk.p99_us)),
        ));
    } else {
        failed(ka, 3, &mut cells);
    }
    let close = Workload::Close;
    if results.cell(case, close).is_ok() {
        cells.push(fmt_rate(
            results.median(case, close, |s| Some(s.wrk.requests_per_s)),
        ));
    } else {
        failed(close, 1, &mut cells);
    }
    let bulk = Workload::Bulk;
    if results.cell(case, bulk).is_ok() {
        cells.push(fmt_num(
            results.median(case, bulk, |s| Some(s.wrk.mib_per_s)),
            1,
        ));
    } else {
        failed(bulk, 1, &mut cells);
    }
    let cpu = |w: Workload| {
        if case == Case::Direct {
            return "—".to_owned();
        }
        if results.cell(case, w).is_err() {
            return "failed".to_owned();
        }
        fmt_num(
            results.median(case, w, |s| per_10k(s.proxy_cpu_s, s.wrk.requests)),
            3,
        )
    };
    cells.push(cpu(ka));
    cells.push(cpu(close));
    cells.push(if results.cell(case, ka).is_ok() {
        fmt_num(
            results.median(case, ka, |s| per_10k(Some(s.nginx_cpu_s), s.wrk.requests)),
            3,
        )
    } else {
        "failed".to_owned()
    });
    format!("| {} |\n", cells.join(" | "))
}
