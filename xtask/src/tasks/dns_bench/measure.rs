//! The four cases and their interleaved runs.
//!
//! Each run of a case is a throughput run (dnsperf as fast as `--outstanding` queries in
//! flight allow, no per-query output) followed by a latency run (a fixed, moderate rate
//! with `-v`, so the percentiles are the path's latency rather than queueing behind a
//! saturated CPU). Around both, CPU time and the agent's DNS counters are read; the
//! counters prove that a captured case was captured, and answered by whom the case says,
//! and that an uncaptured one never reached the agent.

use anyhow::Result;

use super::bed::{Bins, DnsBed};
use super::dnsperf::{self, Load, Outcome, Summary};
use super::names::Kind;
use super::usage::Usage;
use xtask::netlab::EXT_V4;

/// One case of the report.
#[derive(Debug)]
pub struct Case {
    pub number: u8,
    pub label: &'static str,
    pub kind: Kind,
    pub captured: bool,
}

pub const CASES: [Case; 4] = [
    Case {
        number: 1,
        label: "forwarded names, not captured (baseline)",
        kind: Kind::Forwarded,
        captured: false,
    },
    Case {
        number: 2,
        label: "forwarded names, captured (agent forwards to NSD)",
        kind: Kind::Forwarded,
        captured: true,
    },
    Case {
        number: 3,
        label: "Backend names, captured (agent answers)",
        kind: Kind::Backend,
        captured: true,
    },
    Case {
        number: 4,
        label: "Backend names, not captured (NSD answers; reference)",
        kind: Kind::Backend,
        captured: false,
    },
];

/// How the runs load the server.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub reps: usize,
    pub seconds: u64,
    pub latency_seconds: u64,
    pub latency_qps: u64,
    pub outstanding: u32,
    pub warmup_seconds: u64,
    /// A run during which other processes (not niced) used more than this share of one
    /// CPU is discarded and done again, at most `retries` times.
    pub max_foreign: f64,
    pub retries: usize,
}

/// One run of one case.
pub struct Run {
    /// 1-based repetition.
    pub rep: usize,
    /// 1-based position within its repetition.
    pub position: usize,
    pub case: &'static Case,
    pub outcome: Result<Measured, String>,
    /// Why this run was done again and is left out of the medians.
    pub discarded: Option<String>,
}

/// What a run measured.
pub struct Measured {
    pub throughput: Summary,
    /// Around the throughput run.
    pub usage: Usage,
    pub latency: Outcome,
    /// Around the latency run.
    pub latency_usage: Usage,
    /// Why the run's capture looked wrong, if it did (the figures are then suspect).
    pub problem: Option<String>,
}

/// Warm-up runs, then `plan.reps` repetitions of every case. Repetition `r` starts at
/// case `r` (rotated), so no case always runs first or right after another.
pub fn run_all(bed: &DnsBed, bins: &Bins, plan: &Plan) -> Vec<Run> {
    if plan.warmup_seconds > 0 {
        println!("bench-dns: warm-up, {} s per case", plan.warmup_seconds);
        for case in &CASES {
            let load = Load {
                seconds: plan.warmup_seconds,
                rate: None,
                outstanding: plan.outstanding,
                verbose: false,
            };
            if let Err(e) = dnsperf_run(bed, bins, case, load) {
                eprintln!("bench-dns: warm-up of case {} failed: {e:#}", case.number);
            }
        }
    }
    let mut runs = Vec::new();
    for rep in 0..plan.reps {
        for position in 0..CASES.len() {
            let case = &CASES[(rep + position) % CASES.len()];
            println!(
                "bench-dns: repetition {}/{}, case {}: {}",
                rep + 1,
                plan.reps,
                case.number,
                case.label
            );
            for attempt in 0..=plan.retries {
                let mut outcome = measure(bed, bins, case, plan).map_err(|e| format!("{e:#}"));
                report_progress(&outcome, case, plan);
                let foreign = outcome.as_ref().map_or(0.0, foreign_share);
                let crowded = foreign > plan.max_foreign;
                let again = crowded && attempt < plan.retries;
                if crowded
                    && !again
                    && let Ok(m) = &mut outcome
                {
                    let note = format!(
                        "other processes used {:.0}% of a CPU (kept: retries exhausted)",
                        foreign * 100.0
                    );
                    m.problem = Some(
                        m.problem
                            .take()
                            .map_or(note.clone(), |p| format!("{p}; {note}")),
                    );
                }
                let discarded =
                    again.then(|| format!("other processes used {:.0}% of a CPU", foreign * 100.0));
                if let Some(why) = &discarded {
                    println!("    discarded ({why}); again");
                }
                runs.push(Run {
                    rep: rep + 1,
                    position: position + 1,
                    case,
                    outcome,
                    discarded,
                });
                if !again {
                    break;
                }
            }
        }
    }
    runs
}

fn report_progress(outcome: &Result<Measured, String>, case: &Case, plan: &Plan) {
    match outcome {
        Ok(m) => println!(
            "    {:.0} queries/s ({} lost); at {}/s p50 {} ms, p99 {} ms; agent CPU {:.2} s{}",
            m.throughput.qps,
            m.throughput.lost,
            plan.latency_qps,
            ms(m.latency.latencies.percentile_ms(50.0)),
            ms(m.latency.latencies.percentile_ms(99.0)),
            m.usage.agent_cpu_s,
            m.problem
                .as_deref()
                .map(|p| format!("; PROBLEM: {p}"))
                .unwrap_or_default()
        ),
        Err(e) => eprintln!("bench-dns: case {} failed: {e}", case.number),
    }
}

/// The larger, over the throughput and the latency run, of the share of one CPU that
/// processes the bench did not start used without being niced: work that competed with
/// the bench on equal terms (niced work mostly took time the bench left idle).
pub fn foreign_share(m: &Measured) -> f64 {
    [&m.usage, &m.latency_usage]
        .iter()
        .map(|u| {
            if u.wall_s > 0.0 {
                (u.other_cpu_s - u.niced_cpu_s).max(0.0) / u.wall_s
            } else {
                0.0
            }
        })
        .fold(0.0, f64::max)
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "?".into(), |v| format!("{v:.3}"))
}

fn measure(bed: &DnsBed, bins: &Bins, case: &Case, plan: &Plan) -> Result<Measured> {
    let sources = bed.sources();
    let client = bed.client(case.captured);
    let before = sources.snapshot(client)?;
    let throughput = dnsperf_run(
        bed,
        bins,
        case,
        Load {
            seconds: plan.seconds,
            rate: None,
            outstanding: plan.outstanding,
            verbose: false,
        },
    )?;
    let middle = sources.snapshot(client)?;
    let latency = dnsperf_run(
        bed,
        bins,
        case,
        Load {
            seconds: plan.latency_seconds,
            rate: Some(plan.latency_qps),
            outstanding: plan.outstanding,
            verbose: true,
        },
    )?;
    let after = sources.snapshot(client)?;
    let usage = middle.usage_since(&before);
    let latency_usage = after.usage_since(&middle);
    let problem = problem(case, &throughput.summary, &latency, &usage, &latency_usage);
    Ok(Measured {
        throughput: throughput.summary,
        usage,
        latency,
        latency_usage,
        problem,
    })
}

fn dnsperf_run(bed: &DnsBed, bins: &Bins, case: &Case, load: Load) -> Result<Outcome> {
    dnsperf::run(
        &bins.dnsperf,
        &bed.topology,
        bed.client(case.captured),
        EXT_V4.into(),
        &bed.queries(case.kind),
        load,
    )
}

/// What contradicts the case: answers other than NOERROR, a captured query the agent
/// did not count under the case's outcome, or an uncaptured one that reached it.
fn problem(
    case: &Case,
    throughput: &Summary,
    latency: &Outcome,
    usage: &Usage,
    latency_usage: &Usage,
) -> Option<String> {
    let mut problems = Vec::new();
    let codes = &throughput.rcodes;
    if !codes.starts_with("NOERROR") || codes.split_whitespace().count() > 3 {
        problems.push(format!("response codes {codes}"));
    }
    if latency.latencies.errors > 0 || latency.latencies.timeouts > 0 {
        problems.push(format!(
            "latency run: {} errors, {} timeouts",
            latency.latencies.errors, latency.latencies.timeouts
        ));
    }
    let answered = usage.dns.answered + latency_usage.dns.answered;
    let forwarded = usage.dns.forwarded + latency_usage.dns.forwarded;
    let failed = usage.dns.failed + latency_usage.dns.failed;
    let completed = (throughput.completed + latency.summary.completed) as f64;
    let (expected, other) = match case.kind {
        Kind::Backend => (answered, forwarded),
        Kind::Forwarded => (forwarded, answered),
    };
    if case.captured && (expected < completed || other > 0.0) {
        problems.push(format!(
            "agent counted answered {answered}, forwarded {forwarded} for {completed} completed queries"
        ));
    }
    if case.captured && failed > 0.0 {
        problems.push(format!("agent counted {failed} failed queries"));
    }
    if !case.captured && answered + forwarded + failed > 0.0 {
        problems.push(format!(
            "not captured, yet the agent counted {} queries",
            answered + forwarded + failed
        ));
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_share_leaves_niced_work_out_and_takes_the_worse_run() {
        let usage = |other_cpu_s, niced_cpu_s, wall_s| Usage {
            wall_s,
            other_cpu_s,
            niced_cpu_s,
            ..Usage::default()
        };
        let m = Measured {
            throughput: Summary::default(),
            usage: usage(9.0, 8.5, 10.0),
            latency: Outcome::default(),
            latency_usage: usage(2.0, 0.5, 5.0),
            problem: None,
        };
        assert!((foreign_share(&m) - 0.3).abs() < 1e-9);
    }
}
