//! bench/dns.md's raw tables: every run, discarded ones included, as measured.

use std::fmt::Write as _;

use super::measure::{Measured, Run};
use super::report::{f3, in_agent_us, us};
use crate::tasks::numbers::thousands;

pub fn write_raw(md: &mut String, runs: &[Run]) -> std::fmt::Result {
    writeln!(md, "\n## Every run: throughput\n")?;
    writeln!(
        md,
        "| rep | order | case | queries/s | sent | completed | lost | avg latency ms | agent CPU s | agent answered / forwarded / failed | in agent, mean | NSD CPU s | dnsperf CPU s | ksoftirqd CPU s | other processes' CPU s (niced) | machine busy | problem |"
    )?;
    writeln!(
        md,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"
    )?;
    for r in runs {
        let m = match &r.outcome {
            Ok(m) => m,
            Err(e) => {
                let e = e.replace('\n', " ").replace('|', "\\|");
                writeln!(
                    md,
                    "| {} | {} | {} | failed: {e} | | | | | | | | | | | | | |",
                    r.rep, r.position, r.case.number
                )?;
                continue;
            }
        };
        let (t, u) = (&m.throughput, &m.usage);
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {:.3} | {:.2} | {} / {} / {} | {} | {:.2} | {:.2} | {:.2} | {:.2} ({:.2}) | {:.0}% | {} |",
            r.rep,
            r.position,
            r.case.number,
            thousands(t.qps.round() as u64),
            thousands(t.sent),
            thousands(t.completed),
            thousands(t.lost),
            t.avg_latency_ms,
            u.agent_cpu_s,
            u.dns.answered,
            u.dns.forwarded,
            u.dns.failed,
            us(in_agent_us(&u.dns)),
            u.nsd_cpu_s,
            u.client_cpu_s,
            u.ksoftirqd_cpu_s,
            u.other_cpu_s,
            u.niced_cpu_s,
            u.machine_busy * 100.0,
            problem(r, m)
        )?;
    }
    writeln!(md, "\n## Every run: latency\n")?;
    writeln!(
        md,
        "| rep | order | case | responses | timeouts | p50 ms | p99 ms | max ms | dnsperf avg ms | agent CPU s | in agent, mean | problem |"
    )?;
    writeln!(
        md,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    )?;
    for r in runs {
        let Ok(m) = &r.outcome else { continue };
        let l = &m.latency.latencies;
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.3} | {:.2} | {} | {} |",
            r.rep,
            r.position,
            r.case.number,
            thousands(l.us.len() as u64),
            l.timeouts,
            f3(l.percentile_ms(50.0).unwrap_or(f64::NAN)),
            f3(l.percentile_ms(99.0).unwrap_or(f64::NAN)),
            f3(l.max_ms().unwrap_or(f64::NAN)),
            m.latency.summary.avg_latency_ms,
            m.latency_usage.agent_cpu_s,
            us(in_agent_us(&m.latency_usage.dns)),
            problem(r, m)
        )?;
    }
    Ok(())
}

/// The raw tables' last column: why the run was discarded, and what looked wrong.
fn problem(r: &Run, m: &Measured) -> String {
    let parts: Vec<String> = (r.discarded.iter())
        .map(|why| format!("discarded, done again: {why}"))
        .chain(m.problem.iter().cloned())
        .collect();
    parts.join("; ").replace('|', "\\|")
}
