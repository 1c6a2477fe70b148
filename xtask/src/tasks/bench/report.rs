//! Results of the benchmark runs and the Markdown report made of them.
//!
//! The report is made of the results table (`summary`), the machine's ceilings measured
//! in the same run (`ceilings`), where the machine's CPU goes and what that bounds
//! (`budget`), the ratios against the references (`ratios`), the issue
//! 14 targets (`targets`), the TCP Backend against the last committed run before HTTP
//! forwarding (`before`) and every run (`runs`); this module puts them together. Only
//! the planned cases and workloads appear (`--cases`, `--workloads`), so a partial run
//! has no empty rows. `history` makes the short entry every run appends to
//! bench/history.md.

mod before;
mod budget;
mod cases;
mod ceilings;
mod format;
mod history;
mod ratios;
mod results;
mod runs;
mod summary;
mod targets;

pub use cases::{Case, PLAIN_PORT};
pub use ceilings::{Ceilings, CopyCeiling, OpensslSpeed, TlsSpeed};
pub use format::one_line;
pub use history::{HistoryHead, entry as history_entry};
pub use results::{Results, Sample};

use super::wrk;
#[cfg(test)]
use super::wrk::Workload;
use before::before;
use ratios::ratios;
use results::workload_index;
use runs::run_row;
use std::fmt::Write as _;
use summary::row;

/// What the report says about the run besides the numbers.
pub struct Context {
    pub title_note: String,
    pub machine: Vec<(String, String)>,
    pub duration_s: u64,
    pub reps: u32,
    /// Lines describing the setup, each a Markdown list item's text.
    pub setup: Vec<String>,
    /// The wrk command of every (case, workload), as run in the pod.
    pub commands: Vec<String>,
}

/// The Markdown report.
pub fn render(results: &Results, ceilings: Option<&Ceilings>, ctx: &Context) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# redirector benchmark{}\n", ctx.title_note);
    for (key, value) in &ctx.machine {
        let _ = writeln!(md, "- {key}: {value}");
    }
    let _ = writeln!(
        md,
        "\n## Results: median of {} interleaved repetition{}, {} s per run\n",
        ctx.reps,
        if ctx.reps == 1 { "" } else { "s" },
        ctx.duration_s
    );
    md.push_str(
        "| case | req/s | p50 | p99 | conn/s | bulk MiB/s | proxy CPU s/10k req | proxy CPU s/10k conn | proxy CPU s/GiB | nginx CPU s/10k req | upstream conns per 1k conn |\n",
    );
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut footnotes: Vec<String> = Vec::new();
    for &case in &results.cases {
        md.push_str(&row(results, case, &mut footnotes));
    }
    md.push('\n');
    md.push_str(
        "req/s, p50, p99, CPU per 10k req: keep-alive GETs of /1k (`-t2 -c32`). conn/s: the same with \
         `Connection: close`, so every request is a new client connection (CPU per 10k conn from \
         this run); for direct TLS and the TCP Backends every one is also a new TLS handshake with \
         nginx, while the HTTP proxies reuse pooled upstream connections. bulk: GETs of /1m over 4 \
         connections (`-t1 -c4`), wrk's Transfer/sec; proxy CPU s/GiB: proxy CPU of the bulk run \
         per GiB wrk read. Proxy CPU: utime + stime of the proxy \
         process from /proc/<pid>/stat across the run. Upstream conns per 1k conn: TCP \
         connections nginx accepted (`PassiveOpens` of its namespace) per 1,000 requests of the \
         `Connection: close` run.\n",
    );
    for (i, note) in footnotes.iter().enumerate() {
        let _ = writeln!(md, "\n[{}] {note}", i + 1);
    }
    if let Some(ceilings) = ceilings {
        md.push_str(&ceilings::section(ceilings, results));
    }
    if let Some(section) = budget::section(results) {
        md.push_str(&section);
    }

    md.push_str("\n## Ratios and targets\n");
    if let Some(section) = targets::section(results) {
        md.push_str(&section);
    }
    md.push_str(&ratios(results));
    if let Some(section) = before(results) {
        md.push_str(&section);
    }

    md.push_str("\n## Every run\n\n| rep | case | workload | requests | req/s | p50 | p99 | MiB/s | proxy CPU s | nginx CPU s | upstream conns | outcome |\n");
    md.push_str("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for &case in &results.cases {
        for &workload in &results.workloads {
            for run in &results.runs[case.index()][workload_index(workload)] {
                md.push_str(&run_row(case, workload, run));
            }
        }
    }
    for &case in &results.cases {
        if let Some(reason) = &results.dead[case.index()] {
            let _ = writeln!(md, "\n{} was given up: {reason}", case.label());
        }
    }

    md.push_str("\n## Setup\n\n");
    for line in &ctx.setup {
        let _ = writeln!(md, "- {line}");
    }
    md.push_str("\nwrk commands, each run in the pod's network namespace and cgroup (`Topology::spawn_in_pod`), \
                 repetitions interleaved case by case:\n\n```sh\n");
    for command in &ctx.commands {
        let _ = writeln!(md, "{command}");
    }
    md.push_str("```\n");
    md
}

#[cfg(test)]
mod tests {
    use super::super::servers::MachineCpu;
    use super::*;

    fn sample(rep: u32, rps: f64, p99: f64, cpu: Option<f64>) -> Sample {
        Sample {
            rep,
            wrk: wrk::Report {
                requests_per_s: rps,
                p50_us: p99 / 2.0,
                p99_us: p99,
                mib_per_s: rps / 1000.0,
                requests: (rps * 10.0) as u64,
                read_bytes: rps * 10.0 * 1024.0,
                non_2xx: 0,
                socket_errors: 0,
                socket_errors_line: None,
            },
            proxy_cpu_s: cpu,
            proxy_user_s: cpu.map(|c| c / 4.0),
            machine: Some(MachineCpu {
                busy_s: 19.0,
                total_s: 20.0,
                cpus: 2,
            }),
            nginx_cpu_s: 1.0,
            upstream_conns: Some(7),
        }
    }

    fn context() -> Context {
        Context {
            title_note: String::new(),
            machine: vec![("nproc".into(), "2".into())],
            duration_s: 10,
            reps: 3,
            setup: vec![],
            commands: vec!["wrk ...".into()],
        }
    }

    #[test]
    fn a_failed_case_keeps_the_others_in_the_report() {
        let mut results = Results::new(&Case::ALL, &Workload::ALL);
        for rep in 1..=3 {
            for w in Workload::ALL {
                results.record(
                    Case::Direct,
                    w,
                    Ok(sample(rep, 1000.0 * f64::from(rep), 900.0, None)),
                );
                for case in [Case::HaproxyTcp, Case::RedirectorTcp, Case::HaproxyHttp] {
                    results.record(case, w, Ok(sample(rep, 500.0, 1500.0, Some(2.0))));
                }
            }
        }
        results.give_up(
            Case::RedirectorHttp,
            "the agent refused\nthe Backend | tls".into(),
        );
        let md = render(&results, None, &context());
        assert!(md.contains("| direct TLS (wrk → nginx) | 2,000 |"), "{md}");
        assert!(
            md.contains(
                "| redirector, protocol HTTP | failed: the agent refused the Backend \\| tls |"
            ),
            "{md}"
        );
        assert!(
            md.contains("n/a (redirector, protocol HTTP has no result)"),
            "{md}"
        );
        assert!(
            md.contains(
                "| redirector TCP / HAProxy mode tcp, req/s (keepalive) | 1.000 | ≥ 1.0 | yes |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| req/s (keepalive) | 35,214 | 500 | 0.014 | ≥ 1.0 | **no** | 0.042 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| TLS Backend (redirector TCP) / direct TLS, bulk 1 MiB MiB/s | 0.250 | ≥ 0.95 | **no** |"
            ),
            "{md}"
        );
        // The CPU section leaves the failed case out of its tables and its bound n/a.
        let cpu = &md[md.find("## Where the CPU goes").expect("the CPU section")..];
        assert!(
            !cpu[..cpu.find("## Ratios").unwrap()].contains("| redirector, protocol HTTP |"),
            "{md}"
        );
        assert!(
            cpu.contains("HAProxy mode http, keep-alive req/s | n/a | ≥ 1.2 |"),
            "{md}"
        );
        assert!(results.complete(Case::HaproxyHttp));
        assert!(!results.complete(Case::RedirectorHttp));
    }

    #[test]
    fn a_partial_run_shows_only_what_it_planned() {
        let cases = [Case::HaproxyHttp, Case::RedirectorHttp];
        let mut results = Results::new(&cases, &[Workload::Keepalive]);
        for case in cases {
            results.record(
                case,
                Workload::Keepalive,
                Ok(sample(1, 600.0, 1000.0, Some(1.0))),
            );
        }
        let md = render(&results, None, &context());
        assert!(!md.contains("direct TLS (wrk"), "{md}");
        assert!(!md.contains("### TCP Backends"), "{md}");
        assert!(!md.contains("failed"), "{md}");
        assert!(
            md.contains("| HAProxy mode http (nbthread 1) | 600 | 500 µs | 1.00 ms | — | — | 1.667 | — | — | 1.667 | — |"),
            "{md}"
        );
        assert!(
            md.contains("| redirector HTTP / HAProxy mode http, req/s (keepalive) | 1.000 | ≥ 1.2 | **no** |"),
            "{md}"
        );
        assert!(!md.contains("direct TLS, bulk"), "{md}");
        assert!(
            md.contains(
                "| TLS Backend (redirector HTTP) / HAProxy mode http, keep-alive req/s | 1.000 | ≥ 1.2 | **no** |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| Proxy CPU per 10k requests (keep-alive): redirector HTTP / HAProxy mode http | 1.000 | < 1.0 | **no** |"),
            "{md}"
        );
        assert!(!md.contains("Plaintext Backend"), "{md}");
        assert!(!md.contains("## Ceilings"), "{md}");
        assert!(results.complete(Case::RedirectorHttp));
    }

    #[test]
    fn plaintext_cases_ceilings_and_history() {
        let cases = [Case::DirectPlain, Case::HaproxyPlain, Case::RedirectorPlain];
        let mut results = Results::new(&cases, &[Workload::Bulk]);
        for (case, rps, cpu) in [
            (Case::DirectPlain, 2000.0, None),
            (Case::HaproxyPlain, 1600.0, Some(2.0)),
            (Case::RedirectorPlain, 1900.0, Some(1.0)),
        ] {
            results.record(case, Workload::Bulk, Ok(sample(1, rps, 1000.0, cpu)));
        }
        let ceilings = Ceilings {
            copy: Ok(CopyCeiling {
                seconds: 3,
                mib_per_s: 4.0,
                retransmits: Some(0),
                receiver_cpu_pct: Some(50.0),
                sender_cpu_pct: Some(60.0),
            }),
            openssl: Err("no openssl".into()),
            rustls: Ok(TlsSpeed {
                provider: "ring".into(),
                suite: "TLS13_AES_128_GCM_SHA256".into(),
                record_bytes: 16384,
                bytes: 1 << 30,
                seal_mib_s: 6000.0,
                open_mib_s: 2000.0,
                handshakes_per_s: None,
                client_handshakes_per_s: Some(5000.0),
            }),
        };
        let md = render(&results, Some(&ceilings), &context());
        // 1 CPU second for 19,456,000 bytes read: 55.188 s per GiB.
        assert!(
            md.contains("| redirector, plaintext Backend | — | — | — | — | 1.9 | — | — | 55.188 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| Plaintext Backend / direct plaintext, bulk 1 MiB MiB/s | 0.950 | ≥ 0.9 | yes |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| HAProxy plaintext / direct plaintext, bulk 1 MiB MiB/s (reference, not a target) | 0.800 | no target | — |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| redirector plaintext / HAProxy plaintext, bulk MiB/s | 1.187 | no target | — |"
            ),
            "{md}"
        );
        // CPU per GiB: 1 s for 1.9 MB against 2 s for 1.6 MB.
        assert!(
            md.contains("| redirector plaintext / HAProxy plaintext, CPU per GiB (bulk) | 0.421 | lower is better (no target) | — |"),
            "{md}"
        );
        assert!(!md.contains("HAProxy plaintext, req/s"), "{md}");
        assert!(
            md.contains("| copy: TCP, 1 stream, ext → node → pod, 3 s | 4.0 MiB/s |"),
            "{md}"
        );
        assert!(
            md.contains("| crypto: OpenSSL AES-128-GCM | failed |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| handshakes: rustls (ring) full TLS 1.3, client side, 1 core | 5,000/s |"
            ),
            "{md}"
        );
        assert!(
            md.contains("direct plaintext 50%, HAProxy plaintext 40%, redirector plaintext 48%"),
            "{md}"
        );
        let head = HistoryHead {
            date: "2026-11-24 12:00 UTC".into(),
            commit: "abc1234".into(),
            redirector: "--redirector-bin /tmp/r".into(),
            label: "splice(2)".into(),
            run: "quick".into(),
            report: "/tmp/x.md".into(),
        };
        let entry = history_entry(&results, Some(&ceilings), &head);
        assert!(
            entry.starts_with("\n## 2026-11-24 12:00 UTC · abc1234 · label: splice(2)\n"),
            "{entry}"
        );
        assert!(entry.contains("- crypto provider: ring\n"), "{entry}");
        assert!(
            entry.contains("| redirector-plain | — | — | — | — | 1.9 | 1.00 ms |"),
            "{entry}"
        );
        assert!(
            entry.contains("| haproxy-plain | — | — | — | — | 1.6 | 1.00 ms |"),
            "{entry}"
        );
        assert!(
            entry.contains("| HAProxy plaintext / direct plaintext, bulk 1 MiB MiB/s (reference, not a target) | 0.800 | no target | — |"),
            "{entry}"
        );
        assert!(
            entry.contains(
                "| Plaintext Backend / direct plaintext, bulk 1 MiB MiB/s | 0.950 | ≥ 0.9 | yes |"
            ),
            "{entry}"
        );
        // The bounds follow the targets; each run was 95% busy: 0.950 * 20 / 19.
        assert!(
            entry.contains("| bound (where the CPU goes) | value | target |\n|---|---:|---|\n| redirector plaintext at a fully busy machine / direct plaintext, bulk MiB/s | 1.000 | ≥ 0.9 |"),
            "{entry}"
        );
    }
}
