//! The three sections of the report, each adding its targets to the verdicts.

use std::fmt::Write as _;

use anyhow::Result;

use super::{Context, TARGET_RSS_KIB, Verdict, count, dur, mib, num};
use crate::tasks::load_bench::bed::MemoryUse;
use crate::tasks::load_bench::held::Held;
use crate::tasks::load_bench::hole::Hole;
use crate::tasks::load_bench::slow::{Kind, Slow};

/// Part 1; empty if it did not run.
pub fn held(ctx: &Context, runs: &[Result<Held>], verdicts: &mut Vec<Verdict>) -> String {
    if runs.is_empty() {
        return String::new();
    }
    let mut md = String::new();
    let _ = super::held_md::write(&mut md, ctx, runs, verdicts);
    let _ = warnings(
        &mut md,
        (runs.iter().filter_map(|r| r.as_ref().ok())).map(|h| (h.label.as_str(), &h.warnings)),
    );
    md
}

pub fn memory_verdict(target: String, m: &MemoryUse) -> Verdict {
    let peak = m.hwm.max(m.peak_sampled);
    Verdict::new(
        target,
        format!(
            "VmHWM {} (before {}, after {})",
            mib(peak),
            mib(m.before),
            mib(m.after)
        ),
        peak < TARGET_RSS_KIB,
    )
}

/// The agent's WARN/ERROR lines, a few per case.
fn warnings<'a>(
    md: &mut String,
    cases: impl Iterator<Item = (&'a str, &'a Vec<String>)>,
) -> std::fmt::Result {
    for (label, lines) in cases.filter(|(_, l)| !l.is_empty()) {
        writeln!(
            md,
            "Agent WARN/ERROR lines, {label} ({} in all; first 3):\n",
            lines.len()
        )?;
        for line in lines.iter().take(3) {
            writeln!(md, "    {}", line.chars().take(400).collect::<String>())?;
        }
        writeln!(md)?;
    }
    Ok(())
}

/// Part 2; empty if it did not run.
pub fn slow(ctx: &Context, runs: &[Result<Slow>], verdicts: &mut Vec<Verdict>) -> String {
    if runs.is_empty() {
        return String::new();
    }
    let mut md = String::new();
    let _ = super::slow_md::write(&mut md, ctx, runs, verdicts);
    let peaks: Vec<(u64, &str)> = (runs.iter().filter_map(|r| r.as_ref().ok()))
        .map(|s| (s.memory.hwm.max(s.memory.peak_sampled), s.case.label))
        .collect();
    if let Some((peak, label)) = peaks.iter().max() {
        verdicts.push(Verdict::new(
            "slow peers: agent memory stays bounded (< 300 MiB) in every case",
            format!("highest VmHWM {} ({label})", mib(*peak)),
            *peak < TARGET_RSS_KIB && peaks.len() == runs.len(),
        ));
    }
    let _ = warnings(
        &mut md,
        (runs.iter().filter_map(|r| r.as_ref().ok())).map(|s| (s.case.label, &s.warnings)),
    );
    md
}

/// Whether a slow case met its own target, and how the report words it.
pub fn slow_verdict(ctx: &Context, s: &Slow) -> Option<Verdict> {
    let r = &s.result;
    let n = s.conns as u64;
    let idle_ms = ctx.idle_timeout_secs as f64 * 1000.0;
    let counted = s.idle_closed.round() as u64;
    match s.case.kind {
        Kind::NoreadTcp | Kind::Sink => {
            let closed = count(r, &["closed"]);
            let dist = &r["closed_after_last_write"];
            // The agent's own counts decide; what the clients saw is the timing. A client
            // whose unread data fills its window never sees the proxy's FIN (it queues
            // behind that data), so it may see no close at all.
            let when = if num(dist, &["n"]) > 0.0 {
                format!(
                    ", the clients saw {closed} of them close, p50 {} after their last write",
                    dur(num(dist, &["p50"]))
                )
            } else {
                format!(", the clients saw {closed} close")
            };
            // Each client's last write is when its path filled; the proxy's last read
            // was about then, so closing comes one idle timeout later (+ the 100 ms poll
            // and the 1 s stall detection).
            let timely = num(dist, &["n"]) == 0.0 || num(dist, &["p50"]) <= idle_ms + 3000.0;
            Some(Verdict::new(
                format!("{}: all idle ones closed and counted", s.case.label),
                format!(
                    "idle_closed_total {counted} of {n}, {} still held by the agent after the case{when}",
                    s.lingering.at_exit
                ),
                counted == n && s.lingering.at_exit == 0.0 && timely,
            ))
        }
        Kind::TrickleTcp => {
            let survived = count(r, &["while_trickling", "survived"]);
            let closed: u64 = (r["after_silence"].as_object().into_iter().flatten())
                .filter(|(k, _)| k.starts_with("closed"))
                .map(|(_, v)| v.as_u64().unwrap_or(0))
                .sum();
            Some(Verdict::new(
                format!(
                    "{}: none closed while trickling, all closed once silent",
                    s.case.label
                ),
                format!(
                    "{survived} of {n} kept open while trickling; {closed} closed after going silent (p50 {}); idle_closed_total {counted}",
                    dur(num(r, &["closed_after_silence", "p50"]))
                ),
                survived == n && closed == n && counted == n && s.lingering.at_exit == 0.0,
            ))
        }
        // As for TCP: the agent's side is what counts. A client that never reads sees
        // the close only once it reads what its socket still holds.
        Kind::NoreadHttp | Kind::NoreadTls => Some(Verdict::new(
            format!("{}: idle ones closed and counted", s.case.label),
            format!(
                "idle_closed_total {counted} of {n}, {} still held by the agent after the case, the clients saw {} close within {} s",
                s.lingering.at_exit,
                count(r, &["closed"]),
                ctx.idle_timeout_secs + 10
            ),
            counted == n && s.lingering.at_exit == 0.0,
        )),
        Kind::TrickleHttp => None,
    }
}

/// Part 3.
pub fn hole(ctx: &Context, run: &Result<Hole>, verdicts: &mut Vec<Verdict>) -> String {
    let mut md = String::new();
    let _ = super::hole_md::write(&mut md, ctx, run, verdicts);
    if let Ok(h) = run {
        verdicts.push(memory_verdict(
            "black-holed upstream: agent memory < 300 MiB".into(),
            &h.memory,
        ));
        let _ = warnings(&mut md, std::iter::once(("part 3", &h.warnings)));
    }
    md
}
