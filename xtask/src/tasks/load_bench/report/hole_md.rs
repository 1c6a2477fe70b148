//! Section 3 of the report: a black-holed upstream under load.

use std::fmt::Write as _;

use anyhow::Result;
use serde_json::Value;

use super::{Context, Verdict, count, dur, mib, num, one_line};
use crate::tasks::load_bench::hole::{Hole, Rates};
use crate::tasks::numbers::thousands;

/// A healthy Backend counts as unaffected if its rate under the black-hole load is at
/// least this share of its rate alone...
const MIN_RATE_SHARE: f64 = 0.9;
/// ...and its p99 at most this many times its p99 alone, plus [`P99_SLACK_MS`] (a p99
/// of a few hundred microseconds moves by that much from scheduling alone).
const MAX_P99_FACTOR: f64 = 1.5;
const P99_SLACK_MS: f64 = 1.0;

pub fn write(
    md: &mut String,
    ctx: &Context,
    run: &Result<Hole>,
    verdicts: &mut Vec<Verdict>,
) -> std::fmt::Result {
    let t = ctx.connect_timeout_secs;
    writeln!(
        md,
        "## 3. A black-holed upstream under load, `--connect-timeout {t}s`\n"
    )?;
    writeln!(
        md,
        "Two Backends resolve to 10.200.3.2, which the node routes into ext, where a \
         `blackhole` route drops the SYNs without an ICMP error (checked before the run: \
         a connect from the node times out). One agent with `--connect-timeout {t}s` \
         serves the whole part. `loadgen churn` runs {} workers per black-holed Backend, \
         each connecting, sending one request (`ping\\n` or `GET /`) and timing, from its \
         connect call, how the connection ends; meanwhile `loadgen rate` measures each \
         healthy Backend ({} keep-alive connections, closed loop, {} s): alone, during \
         the black-hole load, and alone again.\n",
        ctx.hole_workers, ctx.rate_conns, ctx.rate_secs
    )?;
    let h = match run {
        Ok(h) => h,
        Err(e) => {
            writeln!(md, "The part failed: {}\n", one_line(&format!("{e:#}")))?;
            verdicts.push(Verdict::failed("black-holed upstream", e));
            return Ok(());
        }
    };
    writeln!(
        md,
        "| black-holed Backend | attempts | how they ended: count, min / p50 / p90 / p99 / max from the connect call |\n|---|---:|---|"
    )?;
    for (label, churn) in &h.churn {
        let ends = churn["ends"].as_object().cloned().unwrap_or_default();
        let text: Vec<String> = ends
            .iter()
            .map(|(end, d)| {
                let q = ["min", "p50", "p90", "p99", "max"].map(|k| dur(num(d, &[k])));
                format!("{end}: {}, {}", thousands(count(d, &["n"])), q.join(" / "))
            })
            .collect();
        writeln!(
            md,
            "| {label} | {} | {} |",
            thousands(count(churn, &["attempts"])),
            text.join("; ")
        )?;
        verdicts.push(failure_verdict(label, &ends, t as f64 * 1000.0));
    }
    writeln!(
        md,
        "\n`redirector_connections_refused_total{{backend=\"load/hole\",reason=\"upstream_connect\"}}` \
         after the part: {}. Agent memory over the part: VmRSS before {}, VmHWM {}, after {}.\n",
        thousands(h.refused.round() as u64),
        mib(h.memory.before),
        mib(h.memory.hwm.max(h.memory.peak_sampled)),
        mib(h.memory.after)
    )?;
    writeln!(
        md,
        "| healthy Backend | alone: req/s, p50, p99 | during the black-hole load | alone again | req/s during / alone | p99 during / alone |\n|---|---|---|---|---:|---:|"
    )?;
    for rates in &h.rates {
        let (share, p99_factor, met) = compare(rates);
        writeln!(
            md,
            "| {} | {} | {} | {} | {share:.3} | {p99_factor:.2} |",
            rates.label,
            rate_cell(&rates.alone),
            rate_cell(&rates.during),
            rate_cell(&rates.after)
        )?;
        verdicts.push(Verdict::new(
            format!("{}: rate and latency unaffected by the black-hole load", rates.label),
            format!(
                "req/s during / alone {share:.3} (≥ {MIN_RATE_SHARE}), p99 during / alone {p99_factor:.2} (≤ {MAX_P99_FACTOR} + {P99_SLACK_MS} ms)"
            ),
            met,
        ));
    }
    writeln!(
        md,
        "\n\"Alone\" in the ratios is the mean of the two runs alone (req/s) and the larger \
         of their two p99s. Client, agent and servers share the machine's CPUs, so the \
         black-hole load's own cost (accepting, dialing and closing its connections) is \
         part of what the healthy Backends see.\n"
    )
}

/// Every attempt must have failed (no reply), about `timeout_ms` after its connect.
fn failure_verdict(label: &str, ends: &serde_json::Map<String, Value>, timeout_ms: f64) -> Verdict {
    let total: u64 = ends.values().map(|d| count(d, &["n"])).sum();
    let replied: u64 = (ends.iter())
        .filter(|(end, _)| end.as_str() == "reply" || end.as_str() == "status-200")
        .map(|(_, d)| count(d, &["n"]))
        .sum();
    let lo = ends
        .values()
        .map(|d| num(d, &["min"]))
        .fold(f64::INFINITY, f64::min);
    let hi = ends.values().map(|d| num(d, &["max"])).fold(0.0, f64::max);
    let p50s: Vec<f64> = ends.values().map(|d| num(d, &["p50"])).collect();
    // The proxy gives up at the timeout; what the client sees may add a few ms of
    // scheduling, and a SYN retransmission never lengthens it.
    let in_window = |ms: f64| ms >= timeout_ms * 0.95 && ms <= timeout_ms * 1.25;
    Verdict::new(
        format!("{label}: connects fail after ~{} s", timeout_ms / 1000.0),
        format!(
            "{} attempts, {replied} answered; ended between {} and {}",
            thousands(total),
            dur(if lo.is_finite() { lo } else { 0.0 }),
            dur(hi)
        ),
        total > 0 && replied == 0 && p50s.iter().all(|&p| in_window(p)) && in_window(hi),
    )
}

fn rate_cell(v: &Value) -> String {
    let errors = v["errors"].as_object().map_or(0, |m| m.len());
    let mut cell = format!(
        "{} req/s, {}, {}",
        thousands(num(v, &["rps"]).round() as u64),
        dur(num(v, &["latency", "p50"])),
        dur(num(v, &["latency", "p99"]))
    );
    if errors > 0 {
        cell.push_str(&format!(" (errors: {})", super::kinds(&v["errors"])));
    }
    cell
}

/// (req/s during / alone, p99 during / alone, unaffected?)
fn compare(r: &Rates) -> (f64, f64, bool) {
    let rps = |v: &Value| num(v, &["rps"]);
    let p99 = |v: &Value| num(v, &["latency", "p99"]);
    let alone_rps = (rps(&r.alone) + rps(&r.after)) / 2.0;
    let alone_p99 = p99(&r.alone).max(p99(&r.after));
    let share = rps(&r.during) / alone_rps.max(1e-9);
    let factor = p99(&r.during) / alone_p99.max(1e-9);
    let met = share >= MIN_RATE_SHARE
        && p99(&r.during) <= alone_p99 * MAX_P99_FACTOR + P99_SLACK_MS
        && r.during["errors"].as_object().is_none_or(|m| m.is_empty());
    (share, factor, met)
}
