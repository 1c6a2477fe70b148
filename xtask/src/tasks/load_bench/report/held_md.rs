//! Section 1 of the report: connections held at once.

use std::fmt::Write as _;

use anyhow::Result;
use serde_json::Value;

use super::parts::memory_verdict;
use super::{Context, Verdict, count, dur, kinds, mib, num, one_line, p50_p99};
use crate::tasks::load_bench::bed::SETTLE;
use crate::tasks::load_bench::held::{Held, LATER};
use crate::tasks::numbers::thousands;

type Cell = fn(&Held) -> String;

/// The table's rows: a name and how to fill a case's cell.
const ROWS: [(&str, Cell); 17] = [
    ("connections opened", |h| {
        let o = &h.result["opened"];
        let n = thousands(h.conns as u64);
        format!(
            "{} of {n} (failed: {})",
            thousands(count(o, &["ok"])),
            kinds(&o["failed"])
        )
    }),
    ("time to open all; connect p50 / p99", |h| {
        let o = &h.result["opened"];
        format!("{}; {}", dur(num(o, &["wall_ms"])), p50_p99(&o["connect"]))
    }),
    ("exchanges in flight at once", |h| {
        h.exchange_parallel.map_or("all".into(), |n| n.to_string())
    }),
    ("served while all open (first exchange)", |h| {
        served(&h.result["exchange"])
    }),
    ("served after the hold (second exchange)", |h| {
        served(&h.result["after_hold"])
    }),
    ("agent: open descriptors when idle / all held", |h| {
        format!("{} / {}", maybe(h.base_fds), maybe(h.snapshot.fds))
    }),
    (
        "agent: `redirector_connections_active`, all held",
        |h| match &h.snapshot.active {
            Ok(n) => thousands(*n as u64),
            Err(e) => format!("`/metrics` failed: {}", one_line(e)),
        },
    ),
    (
        "upstream connections ESTABLISHED at the server, all held",
        |h| maybe(h.snapshot.upstream),
    ),
    ("conntrack entries in the node netns, all held", |h| {
        h.snapshot.conntrack.clone()
    }),
    ("agent VmRSS before", |h| mib(h.memory.before)),
    ("agent VmRSS, all held", |h| mib(h.snapshot.rss_kib)),
    ("agent VmRSS peak (sampled) / VmHWM", |h| {
        format!("{} / {}", mib(h.memory.peak_sampled), mib(h.memory.hwm))
    }),
    ("agent VmRSS 3 s after closing", |h| mib(h.memory.after)),
    ("agent VmRSS later after closing", |h| {
        h.memory.later.map_or("—".into(), |(secs, kib)| {
            format!("{} ({secs} s)", mib(kib))
        })
    }),
    ("agent VmHWM above idle, per connection", |h| {
        let grown = h.memory.hwm.saturating_sub(h.memory.before) as f64;
        format!("{:.1} KiB", grown / (h.conns.max(1) as f64))
    }),
    ("agent open file limit (its log line)", |h| {
        h.open_files.map_or("?".into(), thousands)
    }),
    ("agent WARN/ERROR lines", |h| h.warnings.len().to_string()),
];

pub fn write(
    md: &mut String,
    ctx: &Context,
    runs: &[Result<Held>],
    verdicts: &mut Vec<Verdict>,
) -> std::fmt::Result {
    let n = thousands(ctx.conns as u64);
    writeln!(md, "## 1. {n} connections held at once\n")?;
    writeln!(
        md,
        "`loadgen hold` in the pod opens the connections to the Backend's address (256 \
         connects in flight at a time), then on every one sends `ping\\n` (TCP Backend: \
         echoed by `loadgen serve`) or `GET / HTTP/1.1` (HTTP Backend, `protocol: HTTP`, \
         plaintext: nginx answers 200) while all are open, holds them all {} s, does \
         it again on every one, and closes them all. Agent flags: the defaults, unless the column names one. The TCP \
         exchanges all start at once; the HTTP ones at most 256 at a time, since the \
         proxy dials a new upstream connection for every request that finds no idle \
         pooled one, and 10,000 requests at one instant would cost 10,000 more \
         descriptors. A spliced (TCP) connection costs the agent two descriptors, client \
         and upstream: when the hard RLIMIT_NOFILE it can get ({}) is below twice the \
         connections plus its own, the TCP case also runs at the most connections that \
         fit. Memory is read once more {} s after closing, to see whether freed memory \
         goes back to the system.\n",
        ctx.hold_secs,
        thousands(ctx.nofile),
        (SETTLE + LATER).as_secs()
    )?;
    let labels: Vec<&str> = (runs.iter())
        .map(|r| r.as_ref().map_or("failed case", |h| h.label.as_str()))
        .collect();
    writeln!(md, "| | {} |", labels.join(" | "))?;
    writeln!(md, "|---|{}", "---:|".repeat(runs.len()))?;
    for (name, cell) in ROWS {
        let cells: Vec<String> = (runs.iter())
            .map(|r| match r {
                Ok(h) => cell(h),
                Err(e) => one_line(&format!("{e:#}")),
            })
            .collect();
        writeln!(md, "| {name} | {} |", cells.join(" | "))?;
    }
    writeln!(md)?;
    for run in runs {
        match run {
            Ok(h) => verdicts.extend(held_verdicts(ctx, h)),
            Err(e) => verdicts.push(Verdict::failed(format!("{n} connections held"), e)),
        }
    }
    Ok(())
}

fn held_verdicts(ctx: &Context, h: &Held) -> [Verdict; 2] {
    let ok = [
        &h.result["opened"],
        &h.result["exchange"],
        &h.result["after_hold"],
    ]
    .map(|v| count(v, &["ok"]));
    let met = ok.iter().all(|&k| k == h.conns as u64);
    let mut result = format!(
        "opened {}, served {} while all open and {} after the hold",
        thousands(ok[0]),
        thousands(ok[1]),
        thousands(ok[2])
    );
    // A spliced connection costs the agent two descriptors (client and upstream).
    let needed = 2 * h.conns as u64 + h.base_fds.unwrap_or(0) as u64;
    if !met && h.exchange_parallel.is_none() && needed > ctx.nofile {
        result.push_str(&format!(
            " (a spliced connection costs the agent 2 descriptors: {} in all, over the \
             hard RLIMIT_NOFILE of {} it can get here)",
            thousands(needed),
            thousands(ctx.nofile)
        ));
    }
    [
        Verdict::new(
            format!("{}: connections open together, every one served", h.label),
            result,
            met,
        ),
        memory_verdict(
            format!("{}: agent memory while held < 300 MiB", h.label),
            &h.memory,
        ),
    ]
}

fn served(v: &Value) -> String {
    format!(
        "{} (failed: {}), reply p50 / p99 {}",
        thousands(count(v, &["ok"])),
        kinds(&v["failed"]),
        p50_p99(&v["latency"])
    )
}

fn maybe(n: Option<usize>) -> String {
    n.map_or("?".into(), |n| thousands(n as u64))
}
