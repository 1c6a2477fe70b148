//! Results of the benchmark runs and the Markdown report made of them.
//!
//! The report is made of the results table (`summary`), the ratios against the
//! references (`ratios`), the TCP Backend against the last committed run before HTTP
//! forwarding (`before`) and every run (`runs`); this module puts them together. Only
//! the planned cases and workloads appear (`--cases`, `--workloads`), so a partial run
//! has no empty rows.

mod before;
mod cases;
mod format;
mod ratios;
mod results;
mod runs;
mod summary;

pub use cases::{Case, Layer};
pub use format::one_line;
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
pub fn render(results: &Results, ctx: &Context) -> String {
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
        "| case | req/s | p50 | p99 | conn/s | bulk MiB/s | proxy CPU s/10k req | proxy CPU s/10k conn | nginx CPU s/10k req | upstream conns per 1k conn |\n",
    );
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
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
         connections (`-t1 -c4`), wrk's Transfer/sec. Proxy CPU: utime + stime of the proxy \
         process from /proc/<pid>/stat across the run. Upstream conns per 1k conn: TCP \
         connections nginx accepted (`PassiveOpens` of its namespace) per 1,000 requests of the \
         `Connection: close` run.\n",
    );
    for (i, note) in footnotes.iter().enumerate() {
        let _ = writeln!(md, "\n[{}] {note}", i + 1);
    }

    md.push_str("\n## Ratios and targets\n");
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
                non_2xx: 0,
                socket_errors: 0,
                socket_errors_line: None,
            },
            proxy_cpu_s: cpu,
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
        let md = render(&results, &context());
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
        let md = render(&results, &context());
        assert!(!md.contains("direct TLS (wrk"), "{md}");
        assert!(!md.contains("### TCP Backends"), "{md}");
        assert!(!md.contains("failed"), "{md}");
        assert!(
            md.contains("| HAProxy mode http (nbthread 1) | 600 | 500 µs | 1.00 ms | — | — | 1.667 | — | 1.667 | — |"),
            "{md}"
        );
        assert!(
            md.contains("| redirector HTTP / HAProxy mode http, req/s (keepalive) | 1.000 | ≥ 1.2 | **no** |"),
            "{md}"
        );
        assert!(!md.contains("direct TLS, bulk"), "{md}");
        assert!(results.complete(Case::RedirectorHttp));
    }
}
