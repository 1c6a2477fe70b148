//! Results of the benchmark runs and the Markdown report made of them.
//!
//! The report is made of the results table (`summary`), the ratios against the
//! references (`ratios`) and every run (`runs`); this module puts them together.

mod format;
mod ratios;
mod results;
mod runs;
mod summary;

pub use format::one_line;
pub use results::{Case, Results, Sample};

use super::wrk::{self, Workload};
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
        "| case | req/s | p50 | p99 | conn/s | bulk MiB/s | proxy CPU s/10k req | proxy CPU s/10k conn | nginx CPU s/10k req |\n",
    );
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut footnotes: Vec<String> = Vec::new();
    for case in Case::ALL {
        md.push_str(&row(results, case, &mut footnotes));
    }
    md.push('\n');
    md.push_str(
        "req/s, p50, p99, CPU per 10k req: keep-alive GETs of /1k (`-t2 -c32`). conn/s: the same with \
         `Connection: close`, so every request is a new connection and a new TLS handshake (CPU per \
         10k conn from this run). bulk: GETs of /1m over 4 connections (`-t1 -c4`), wrk's \
         Transfer/sec. Proxy CPU: utime + stime of the proxy process from /proc/<pid>/stat \
         across the run.\n",
    );
    for (i, note) in footnotes.iter().enumerate() {
        let _ = writeln!(md, "\n[{}] {note}", i + 1);
    }

    md.push_str(
        "\n## Ratios and targets\n\n| ratio | value | target | met |\n|---|---:|---|---|\n",
    );
    for ratio in ratios(results) {
        md.push_str(&ratio);
    }

    md.push_str("\n## Every run\n\n| rep | case | workload | requests | req/s | p50 | p99 | MiB/s | proxy CPU s | nginx CPU s | outcome |\n");
    md.push_str("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for case in Case::ALL {
        for workload in Workload::ALL {
            for run in &results.runs[case.index()][workload_index(workload)] {
                md.push_str(&run_row(case, workload, run));
            }
        }
    }
    if let Some(reason) = Case::ALL
        .iter()
        .find_map(|&c| results.dead[c.index()].as_ref().map(|r| (c, r)))
    {
        let _ = writeln!(md, "\n{} was given up: {}", reason.0.label(), reason.1);
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
        }
    }

    #[test]
    fn a_failed_case_keeps_the_others_in_the_report() {
        let mut results = Results::default();
        for rep in 1..=3 {
            for w in Workload::ALL {
                results.record(
                    Case::Direct,
                    w,
                    Ok(sample(rep, 1000.0 * f64::from(rep), 900.0, None)),
                );
                results.record(Case::Haproxy, w, Ok(sample(rep, 500.0, 1500.0, Some(2.0))));
            }
        }
        results.give_up(
            Case::Redirector,
            "the agent refused\nthe Backend | tls".into(),
        );
        let ctx = Context {
            title_note: String::new(),
            machine: vec![("nproc".into(), "2".into())],
            duration_s: 10,
            reps: 3,
            setup: vec![],
            commands: vec!["wrk ...".into()],
        };
        let md = render(&results, &ctx);
        assert!(md.contains("| direct TLS (wrk → nginx) | 2,000 |"), "{md}");
        assert!(
            md.contains("| redirector | failed: the agent refused the Backend \\| tls |"),
            "{md}"
        );
        assert!(md.contains("n/a (redirector has no result)"), "{md}");
        assert!(results.complete(Case::Haproxy));
        assert!(!results.complete(Case::Redirector));
    }
}
