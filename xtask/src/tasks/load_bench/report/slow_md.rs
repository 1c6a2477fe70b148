//! Section 2 of the report: slow peers.

use std::fmt::Write as _;

use anyhow::Result;

use super::parts::slow_verdict;
use super::{Context, Verdict, count, dur, kinds, mib, num, one_line};
use crate::tasks::load_bench::buffers;
use crate::tasks::load_bench::slow::{Kind, LINGER_SECS, Lingering, Slow};
use crate::tasks::numbers::thousands;

pub fn write(
    md: &mut String,
    ctx: &Context,
    runs: &[Result<Slow>],
    verdicts: &mut Vec<Verdict>,
) -> std::fmt::Result {
    let (n, idle) = (thousands(ctx.slow_conns as u64), ctx.idle_timeout_secs);
    writeln!(md, "## 2. Slow peers, `--idle-timeout {idle}s`\n")?;
    writeln!(
        md,
        "{n} connections per case from the pod, each case with a fresh agent started with \
         `--idle-timeout {idle}s` (a spliced connection with no byte read from either side \
         for that long is closed and counted in \
         `redirector_connections_idle_closed_total{{backend}}`, read from `/metrics` in \
         the node netns after the case). Clients that never read tell the proxy closed \
         them by their socket leaving ESTABLISHED (TCP_INFO, polled every 100 ms, for {} s \
         after every client's path stalled: a write making no progress for 1 s). The \
         trickling TCP clients read each echoed byte, so a close shows at once. During this \
         part the pod, node and ext namespaces get small TCP buffers (tcp_rmem `{}`, \
         tcp_wmem `{}`; restored after) so that a thousand stalled paths do not put the \
         whole machine's TCP memory under pressure; the agent's own buffers fill the same.\n",
        idle + 10,
        buffers::RMEM,
        buffers::WMEM
    )?;
    writeln!(
        md,
        "| case | agent VmRSS before / all stalled / VmHWM / 3 s after | what the clients did | closes the clients saw | when | `idle_closed_total` | still open in the agent once the clients exited |\n|---|---|---|---|---|---:|---|"
    )?;
    for run in runs {
        let s = match run {
            Ok(s) => s,
            Err(e) => {
                writeln!(md, "| failed | {} | | | | | |", one_line(&format!("{e:#}")))?;
                verdicts.push(Verdict::failed("slow peers case", e));
                continue;
            }
        };
        let r = &s.result;
        let m = &s.memory;
        let stalled = s.held.as_ref().map_or("—".into(), |(_, rss)| mib(*rss));
        let memory = format!(
            "{} / {stalled} / {} / {}",
            mib(m.before),
            mib(m.hwm.max(m.peak_sampled)),
            mib(m.after)
        );
        let opened = count(r, &["opened", "ok"]);
        let (did, closed, when) = match s.case.kind {
            Kind::NoreadTcp | Kind::Sink | Kind::NoreadHttp | Kind::NoreadTls => {
                let written = num(r, &["bytes_written"]);
                let did = if matches!(s.case.kind, Kind::NoreadHttp | Kind::NoreadTls) {
                    format!("{opened} opened; sent the request, read nothing")
                } else {
                    format!(
                        "{opened} opened; wrote {:.0} MiB in all ({:.0} KiB each) until stalled ({})",
                        written / 1_048_576.0,
                        written / 1024.0 / (opened.max(1) as f64),
                        kinds(&r["pushes"])
                    )
                };
                let closed = format!(
                    "{} closed, {} still open after {} s",
                    count(r, &["closed"]),
                    count(r, &["open_at_end"]),
                    idle + 10
                );
                let dist = &r["closed_after_last_write"];
                (did, closed, span(dist, "after the client's last write"))
            }
            Kind::TrickleTcp => (
                format!(
                    "{opened} opened; 1 byte/s for {} s, each echoed; then silent",
                    count(r, &["trickle_secs"])
                ),
                format!(
                    "while trickling: {}; once silent: {}",
                    kinds(&r["while_trickling"]),
                    kinds(&r["after_silence"])
                ),
                span(&r["closed_after_silence"], "after the last echoed byte"),
            ),
            Kind::TrickleHttp => (
                format!(
                    "{opened} opened; a request head 1 byte/s for up to {} s (never complete)",
                    count(r, &["trickle_secs"])
                ),
                format!("{} ", kinds(&r["while_trickling"])),
                span(&r["closed_while_trickling_after"], "after the first byte"),
            ),
        };
        writeln!(
            md,
            "| {} | {memory} | {did} | {closed} | {when} | {} | {} |",
            s.case.label,
            thousands(s.idle_closed.round() as u64),
            lingering(&s.lingering)
        )?;
        verdicts.extend(slow_verdict(ctx, s));
    }
    writeln!(md)?;
    writeln!(
        md,
        "The HTTP cases: for an HTTP Backend the proxy applies `--idle-timeout` only to \
         connections it splices (upgrades such as WebSocket, and clients doing their own \
         TLS); a request head that does not complete is cut by hyper's 30 s head timeout \
         (`HEAD_TIMEOUT` in the agent), and a response the client does not read has no \
         timer in the proxy (nginx's `send_timeout`, 60 s, would end it upstream). Neither \
         is counted in `idle_closed_total`.\n"
    )
}

/// `0`, or `N, none after X s`, or `N, M still after 20 s`.
fn lingering(l: &Lingering) -> String {
    let n = thousands(l.at_exit.round() as u64);
    match l.gone_after {
        _ if l.at_exit == 0.0 => n,
        Some(secs) => format!("{n}, none after {secs:.1} s"),
        None => format!(
            "{n}, {} still after {} s",
            thousands(l.at_end.round() as u64),
            LINGER_SECS
        ),
    }
}

/// `p50 X, max Y <what>` of a distribution of milliseconds.
fn span(dist: &serde_json::Value, what: &str) -> String {
    if num(dist, &["n"]) == 0.0 {
        return "—".into();
    }
    format!(
        "p50 {}, min {}, max {} {what}",
        dur(num(dist, &["p50"])),
        dur(num(dist, &["min"])),
        dur(num(dist, &["max"]))
    )
}
