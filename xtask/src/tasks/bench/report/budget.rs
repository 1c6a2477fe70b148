//! Where the machine's CPU goes in each case, and what that bounds.
//!
//! wrk, nginx and the proxy share the machine's CPUs, so a proxy's throughput is bounded
//! by what the whole chain costs per request (or per GiB), not by the proxy's CPU alone.
//! From the machine's CPU time (/proc/stat) and the proxy's user and system time
//! (/proc/<pid>/stat) across each run, this section gives per unit of work what the
//! machine spent and who spent it, and two upper bounds on the rate:
//!
//! - at a fully busy machine: the rate if the idle time (hand-offs between processes
//!   that each wait on another) were used at the same cost per unit;
//! - with no proxy user time as well: what any proxy that makes the same system calls
//!   (and so leaves the kernel the same work) could reach, however fast its own code.
//!
//! The bounds sit beside the targets they limit: when even the second is below a
//! target, no user-space change reaches it on this machine.

use std::fmt::Write as _;

use super::cases::Case;
use super::format::{fmt_num, fmt_rate};
use super::results::{Results, Sample};
use super::wrk::Workload;

/// How a workload's work is counted and shown.
struct Unit {
    workload: Workload,
    heading: &'static str,
    /// Units of work in a sample.
    amount: fn(&Sample) -> Option<f64>,
    /// CPU seconds per unit to the number shown.
    scale: f64,
    decimals: usize,
    /// The rate column: req/s or MiB/s.
    rate: fn(&Sample) -> f64,
    rate_name: &'static str,
}

const KEEPALIVE: Unit = Unit {
    workload: Workload::Keepalive,
    heading: "keep-alive, CPU µs per request",
    amount: |s| (s.wrk.requests > 0).then_some(s.wrk.requests as f64),
    scale: 1e6,
    decimals: 1,
    rate: |s| s.wrk.requests_per_s,
    rate_name: "req/s",
};

const BULK: Unit = Unit {
    workload: Workload::Bulk,
    heading: "bulk, CPU seconds per GiB read",
    amount: |s| (s.wrk.read_bytes > 0.0).then(|| s.wrk.read_bytes / f64::from(1u32 << 30)),
    scale: 1.0,
    decimals: 3,
    rate: |s| s.wrk.mib_per_s,
    rate_name: "MiB/s",
};

/// The machine's CPU per unit of one sample, split by who spent it, and the bounds.
#[derive(Debug, Clone, Copy)]
struct Split {
    busy_share: f64,
    /// The proxy's CPU time over the run's wall time: near 1.0, its one thread is what
    /// the others wait on.
    proxy_core: Option<f64>,
    all: f64,
    proxy_user: Option<f64>,
    proxy_system: Option<f64>,
    nginx: f64,
    rest: f64,
    at_full: f64,
    no_user: Option<f64>,
}

fn split(sample: &Sample, unit: &Unit) -> Option<Split> {
    let machine = sample.machine?;
    let amount = (unit.amount)(sample)?;
    if machine.busy_s <= 0.0 || machine.total_s <= 0.0 {
        return None;
    }
    let per = |seconds: f64| seconds / amount * unit.scale;
    let proxy = sample.proxy_cpu_s.unwrap_or(0.0);
    let rate = (unit.rate)(sample);
    let at_full = rate * machine.total_s / machine.busy_s;
    let no_user = sample
        .proxy_user_s
        .filter(|&user| user < machine.busy_s)
        .map(|user| rate * machine.total_s / (machine.busy_s - user));
    let wall_s = machine.total_s / f64::from(machine.cpus);
    Some(Split {
        busy_share: machine.busy_s / machine.total_s,
        proxy_core: sample.proxy_cpu_s.map(|p| p / wall_s),
        all: per(machine.busy_s),
        proxy_user: sample.proxy_user_s.map(per),
        proxy_system: sample.proxy_user_s.map(|user| per(proxy - user)),
        nginx: per(sample.nginx_cpu_s),
        rest: per(machine.busy_s - proxy - sample.nginx_cpu_s),
        at_full,
        no_user,
    })
}

/// The median of one field over the samples of (case, workload).
fn median(
    results: &Results,
    case: Case,
    unit: &Unit,
    field: fn(&Split) -> Option<f64>,
) -> Option<f64> {
    results.median(case, unit.workload, |s| {
        split(s, unit).as_ref().and_then(field)
    })
}

fn table(results: &Results, unit: &Unit) -> Option<String> {
    let cases: Vec<Case> = results
        .cases
        .iter()
        .copied()
        .filter(|&c| median(results, c, unit, |s| Some(s.all)).is_some())
        .collect();
    if cases.is_empty() {
        return None;
    }
    let mut md = format!(
        "\n{} (medians):\n\n| case | machine busy | proxy, of one core | all | proxy user | proxy system | nginx | the rest | {r} at a fully busy machine | {r} with no proxy user time too |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        unit.heading,
        r = unit.rate_name
    );
    for case in cases {
        let num = |field: fn(&Split) -> Option<f64>| {
            fmt_num(median(results, case, unit, field), unit.decimals)
        };
        let rate = |field: fn(&Split) -> Option<f64>| fmt_rate(median(results, case, unit, field));
        let percent = |field: fn(&Split) -> Option<f64>| {
            median(results, case, unit, field)
                .map_or_else(|| "—".to_owned(), |v| format!("{:.0}%", v * 100.0))
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            case.label(),
            percent(|s| Some(s.busy_share)),
            percent(|s| s.proxy_core),
            num(|s| Some(s.all)),
            num(|s| s.proxy_user),
            num(|s| s.proxy_system),
            num(|s| Some(s.nginx)),
            num(|s| Some(s.rest)),
            rate(|s| Some(s.at_full)),
            rate(|s| s.no_user),
        );
    }
    Some(md)
}

/// A bound of one of ours over a measured rate of the reference, beside a target.
struct Beside {
    name: &'static str,
    ours: Case,
    bound: fn(&Split) -> Option<f64>,
    base: Case,
    target: &'static str,
}

fn beside_rows() -> [(Beside, &'static Unit); 5] {
    use Case::{
        Direct, DirectPlain, HaproxyHttp, HaproxyTcp, RedirectorHttp, RedirectorPlain,
        RedirectorTcp,
    };
    let at_full: fn(&Split) -> Option<f64> = |s| Some(s.at_full);
    let no_user: fn(&Split) -> Option<f64> = |s| s.no_user;
    [
        (
            Beside {
                name: "redirector TCP with no proxy user time, at a fully busy machine / HAProxy mode tcp, keep-alive req/s",
                ours: RedirectorTcp,
                bound: no_user,
                base: HaproxyTcp,
                target: "≥ 1.2",
            },
            &KEEPALIVE,
        ),
        (
            Beside {
                name: "redirector HTTP with no proxy user time, at a fully busy machine / HAProxy mode http, keep-alive req/s",
                ours: RedirectorHttp,
                bound: no_user,
                base: HaproxyHttp,
                target: "≥ 1.2",
            },
            &KEEPALIVE,
        ),
        (
            Beside {
                name: "redirector TCP at a fully busy machine / direct TLS, bulk MiB/s",
                ours: RedirectorTcp,
                bound: at_full,
                base: Direct,
                target: "≥ 0.95",
            },
            &BULK,
        ),
        (
            Beside {
                name: "redirector plaintext at a fully busy machine / direct plaintext, bulk MiB/s",
                ours: RedirectorPlain,
                bound: at_full,
                base: DirectPlain,
                target: "≥ 0.9",
            },
            &BULK,
        ),
        (
            Beside {
                name: "redirector plaintext with no proxy user time, at a fully busy machine / direct plaintext, bulk MiB/s",
                ours: RedirectorPlain,
                bound: no_user,
                base: DirectPlain,
                target: "≥ 0.9",
            },
            &BULK,
        ),
    ]
}

/// The planned bounds beside the targets as Markdown table rows
/// (`| bound | value | target |`).
pub(super) fn bound_rows(results: &Results) -> Vec<String> {
    let mut rows = Vec::new();
    for (row, unit) in beside_rows() {
        if !(results.planned(row.ours, unit.workload) && results.planned(row.base, unit.workload)) {
            continue;
        }
        let bound = median(results, row.ours, unit, row.bound);
        let base = results.median(row.base, unit.workload, |s| Some((unit.rate)(s)));
        let value = match (bound, base) {
            (Some(bound), Some(base)) if base > 0.0 => format!("{:.3}", bound / base),
            _ => "n/a".to_owned(),
        };
        rows.push(format!("| {} | {value} | {} |", row.name, row.target));
    }
    rows
}

/// The "Where the CPU goes" section, if any keep-alive or bulk run has the machine's
/// CPU time.
pub(super) fn section(results: &Results) -> Option<String> {
    let tables: Vec<String> = [&KEEPALIVE, &BULK]
        .into_iter()
        .filter_map(|unit| table(results, unit))
        .collect();
    if tables.is_empty() {
        return None;
    }
    let mut md = String::from(
        "\n## Where the CPU goes (same run)\n\nThe whole machine's CPU time across each run \
         (/proc/stat: every CPU state but idle and iowait) per unit of work, and who spent \
         it: the proxy in user space and in the kernel on its behalf (/proc/<pid>/stat), \
         nginx, and the rest (wrk, softirqs and kernel threads not charged to a process, \
         anything else on the machine). The last two columns are upper bounds on the rate: \
         the same cost per unit with no idle time left, and then without the proxy's user \
         time as well (any proxy making the same system calls).\n",
    );
    for table in tables {
        md.push_str(&table);
    }
    let rows = bound_rows(results);
    if !rows.is_empty() {
        md.push_str(
            "\nThe bounds beside the targets they limit (a bound of ours over the reference's \
             measured rate; the target is for the measured ratio):\n\n\
             | bound | value | target |\n|---|---:|---|\n",
        );
        for row in rows {
            let _ = writeln!(md, "{row}");
        }
    }
    Some(md)
}

#[cfg(test)]
mod tests {
    use super::super::super::servers::MachineCpu;
    use super::super::wrk;
    use super::*;

    fn sample(requests: u64, busy_s: f64, proxy: Option<(f64, f64)>) -> Sample {
        Sample {
            rep: 1,
            wrk: wrk::Report {
                requests_per_s: requests as f64 / 10.0,
                p50_us: 500.0,
                p99_us: 1000.0,
                mib_per_s: 100.0,
                requests,
                read_bytes: 1024.0 * 1024.0 * 1024.0,
                non_2xx: 0,
                socket_errors: 0,
                socket_errors_line: None,
            },
            proxy_cpu_s: proxy.map(|(user, system)| user + system),
            proxy_user_s: proxy.map(|(user, _)| user),
            nginx_cpu_s: 4.0,
            machine: Some(MachineCpu {
                busy_s,
                total_s: 20.0,
                cpus: 2,
            }),
            upstream_conns: None,
        }
    }

    #[test]
    fn splits_the_machine_and_bounds_the_rate() {
        // 10 s on 2 CPUs, 16 s busy: 4 s the proxy's (1 in user space), 4 s nginx's.
        let s = split(&sample(400_000, 16.0, Some((1.0, 3.0))), &KEEPALIVE).unwrap();
        assert!((s.busy_share - 0.8).abs() < 1e-9);
        assert_eq!(s.proxy_core, Some(0.4));
        assert!((s.all - 40.0).abs() < 1e-9, "µs per request: {s:?}");
        assert_eq!(s.proxy_user, Some(2.5));
        assert_eq!(s.proxy_system, Some(7.5));
        assert!((s.nginx - 10.0).abs() < 1e-9);
        assert!((s.rest - 20.0).abs() < 1e-9);
        // 40k req/s at 80% busy: 50k at 100%; 15 s without the proxy's user second.
        assert!((s.at_full - 50_000.0).abs() < 1e-6);
        let no_user = s.no_user.unwrap();
        assert!((no_user - 40_000.0 * 20.0 / 15.0).abs() < 1e-6, "{no_user}");
        // No proxy: no split of its time, no bound without it.
        let direct = split(&sample(400_000, 16.0, None), &KEEPALIVE).unwrap();
        assert_eq!((direct.proxy_user, direct.no_user), (None, None));
    }

    #[test]
    fn the_section_puts_bounds_beside_the_targets() {
        let mut results = Results::new(
            &[Case::HaproxyTcp, Case::RedirectorTcp],
            &[Workload::Keepalive],
        );
        results.record(
            Case::HaproxyTcp,
            Workload::Keepalive,
            Ok(sample(400_000, 19.0, Some((2.0, 4.0)))),
        );
        results.record(
            Case::RedirectorTcp,
            Workload::Keepalive,
            Ok(sample(440_000, 19.0, Some((1.0, 4.0)))),
        );
        let md = section(&results).unwrap();
        assert!(
            md.contains("| redirector, protocol TCP | 95% | 50% | 43.2 | 2.3 | 9.1 | 9.1 | 22.7 |"),
            "{md}"
        );
        // 44k req/s * 20 / 18 = 48,889 over HAProxy's 40k.
        assert!(
            md.contains("HAProxy mode tcp, keep-alive req/s | 1.222 | ≥ 1.2 |"),
            "{md}"
        );
        assert!(!md.contains("bulk"), "only planned rows: {md}");
    }
}
