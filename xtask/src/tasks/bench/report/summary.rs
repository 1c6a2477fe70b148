//! The report's results table: one row of medians per case, a failed workload as a
//! footnote, a workload that was not planned (`--workloads`) as "—".

use super::cases::Case;
use super::format::{escape, fmt_latency, fmt_num, fmt_rate};
use super::results::{Results, Sample, per_10k, per_gib};
use super::wrk::Workload;

/// Columns after the case label: 3 keep-alive, conn/s, bulk, 3 proxy CPU, nginx CPU,
/// upstream conns.
const COLUMNS: usize = 10;

pub(super) fn row(results: &Results, case: Case, footnotes: &mut Vec<String>) -> String {
    if let Some(reason) = &results.dead[case.index()] {
        let mut cells = vec![
            case.label().to_owned(),
            format!("failed: {}", escape(reason)),
        ];
        cells.extend(std::iter::repeat_n("—".to_owned(), COLUMNS - 1));
        return format!("| {} |\n", cells.join(" | "));
    }
    // The footnote mark of a failed workload, made once however many cells show it.
    let mut marks: Vec<(Workload, String)> = Vec::new();
    let mut mark = |workload: Workload| -> String {
        if let Some((_, m)) = marks.iter().find(|(w, _)| *w == workload) {
            return m.clone();
        }
        let reason = results.cell(case, workload).err().unwrap_or_default();
        footnotes.push(format!(
            "{} {}: {}",
            case.label(),
            workload.label(),
            escape(&reason)
        ));
        let m = format!("failed [{}]", footnotes.len());
        marks.push((workload, m.clone()));
        m
    };
    // One cell: "—" if the workload was not planned or the value does not apply, the
    // footnote mark if it failed, else the median formatted.
    let mut cell = |workload: Workload,
                    applies: bool,
                    value: &dyn Fn(&Sample) -> Option<f64>,
                    show: &dyn Fn(Option<f64>) -> String| {
        if !applies || !results.planned(case, workload) {
            return "—".to_owned();
        }
        if results.cell(case, workload).is_err() {
            return mark(workload);
        }
        show(results.median(case, workload, value))
    };
    use Workload::{Bulk, Close, Keepalive};
    let proxy = !case.is_direct();
    let rate = |v: Option<f64>| fmt_rate(v);
    let latency = |v: Option<f64>| fmt_latency(v);
    let decimals = |n: usize| move |v: Option<f64>| fmt_num(v, n);
    let proxy_cpu = |s: &Sample| per_10k(s.proxy_cpu_s, s.wrk.requests);
    let cells = [
        case.label().to_owned(),
        cell(Keepalive, true, &|s| Some(s.wrk.requests_per_s), &rate),
        cell(Keepalive, true, &|s| Some(s.wrk.p50_us), &latency),
        cell(Keepalive, true, &|s| Some(s.wrk.p99_us), &latency),
        cell(Close, true, &|s| Some(s.wrk.requests_per_s), &rate),
        cell(Bulk, true, &|s| Some(s.wrk.mib_per_s), &decimals(1)),
        cell(Keepalive, proxy, &proxy_cpu, &decimals(3)),
        cell(Close, proxy, &proxy_cpu, &decimals(3)),
        cell(
            Bulk,
            proxy,
            &|s| per_gib(s.proxy_cpu_s, s.wrk.read_bytes),
            &decimals(3),
        ),
        cell(
            Keepalive,
            true,
            &|s| per_10k(Some(s.nginx_cpu_s), s.wrk.requests),
            &decimals(3),
        ),
        cell(Close, true, &upstream_per_1k, &decimals(1)),
    ];
    format!("| {} |\n", cells.join(" | "))
}

/// Upstream connections nginx accepted per 1,000 requests.
fn upstream_per_1k(s: &Sample) -> Option<f64> {
    let conns = s.upstream_conns?;
    (s.wrk.requests > 0).then(|| conns as f64 / s.wrk.requests as f64 * 1000.0)
}
