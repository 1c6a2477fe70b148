//! Results of the benchmark runs and the Markdown report made of them.

use super::wrk::{self, Workload};
use std::fmt::Write as _;

/// The three ways from the pod to the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// wrk speaks TLS to nginx itself: the floor no proxy can beat.
    Direct,
    /// Plaintext to HAProxy (via DNAT), which originates TLS.
    Haproxy,
    /// Plaintext, redirected by the agent's eBPF hooks to its proxy, which originates TLS.
    Redirector,
}

impl Case {
    pub const ALL: [Case; 3] = [Case::Direct, Case::Haproxy, Case::Redirector];

    pub fn label(self) -> &'static str {
        match self {
            Case::Direct => "direct TLS (wrk → nginx)",
            Case::Haproxy => "HAProxy (nbthread 1)",
            Case::Redirector => "redirector",
        }
    }

    /// The URL prefix the client uses: the same host and port for all three, plaintext
    /// for the two proxies.
    pub fn base_url(self) -> &'static str {
        match self {
            Case::Direct => "https://api.redirector.test",
            Case::Haproxy | Case::Redirector => "http://api.redirector.test:443",
        }
    }

    fn index(self) -> usize {
        match self {
            Case::Direct => 0,
            Case::Haproxy => 1,
            Case::Redirector => 2,
        }
    }
}

fn workload_index(w: Workload) -> usize {
    match w {
        Workload::Keepalive => 0,
        Workload::Close => 1,
        Workload::Bulk => 2,
    }
}

/// One wrk run that could be counted.
#[derive(Debug, Clone)]
pub struct Sample {
    pub rep: u32,
    pub wrk: wrk::Report,
    /// CPU seconds the proxy process spent during the run (none for the direct case).
    pub proxy_cpu_s: Option<f64>,
    /// CPU seconds nginx (master + worker) spent during the run.
    pub nginx_cpu_s: f64,
}

/// Everything measured, by case and workload.
#[derive(Debug, Default)]
pub struct Results {
    /// [case][workload]: the samples, a failed run as its reason.
    runs: [[Vec<Result<Sample, String>>; 3]; 3],
    /// Why a case was given up (it cannot run at all).
    dead: [Option<String>; 3],
}

impl Results {
    pub fn record(&mut self, case: Case, workload: Workload, run: Result<Sample, String>) {
        self.runs[case.index()][workload_index(workload)].push(run);
    }

    pub fn give_up(&mut self, case: Case, reason: String) {
        let slot = &mut self.dead[case.index()];
        if slot.is_none() {
            *slot = Some(one_line(&reason));
        }
    }

    pub fn is_dead(&self, case: Case) -> bool {
        self.dead[case.index()].is_some()
    }

    /// Whether the case produced a usable number for every workload.
    pub fn complete(&self, case: Case) -> bool {
        !self.is_dead(case) && Workload::ALL.iter().all(|&w| self.cell(case, w).is_ok())
    }

    /// The successful samples, or the first failure (a workload with any failed run is
    /// reported failed: a proxy that drops requests has no throughput to speak of).
    fn cell(&self, case: Case, workload: Workload) -> Result<Vec<&Sample>, String> {
        if let Some(reason) = &self.dead[case.index()] {
            return Err(reason.clone());
        }
        let runs = &self.runs[case.index()][workload_index(workload)];
        if let Some(Err(reason)) = runs.iter().find(|r| r.is_err()) {
            return Err(reason.clone());
        }
        let samples: Vec<&Sample> = runs.iter().filter_map(|r| r.as_ref().ok()).collect();
        if samples.is_empty() {
            return Err("not run".into());
        }
        Ok(samples)
    }

    /// Median of `f` over the case's samples of `workload`.
    fn median(
        &self,
        case: Case,
        workload: Workload,
        f: impl Fn(&Sample) -> Option<f64>,
    ) -> Option<f64> {
        let samples = self.cell(case, workload).ok()?;
        median(samples.iter().filter_map(|s| f(s)).collect())
    }
}

/// The middle value (mean of the two middle ones for an even count).
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

/// CPU seconds per 10,000 requests.
fn per_10k(cpu_s: Option<f64>, requests: u64) -> Option<f64> {
    let cpu = cpu_s?;
    (requests > 0).then(|| cpu / requests as f64 * 10_000.0)
}

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

fn row(results: &Results, case: Case, footnotes: &mut Vec<String>) -> String {
    if let Some(reason) = &results.dead[case.index()] {
        return format!(
            "| {} | failed: {} | — | — | — | — | — | — | — |\n",
            case.label(),
            escape(reason)
        );
    }
    let mut cells = vec![case.label().to_owned()];
    let mut failed = |workload: Workload, n: usize, cells: &mut Vec<String>| {
        let reason = results.cell(case, workload).err().unwrap_or_default();
        footnotes.push(format!(
            "{} {}: {}",
            case.label(),
            workload.label(),
            escape(&reason)
        ));
        let mark = format!("failed [{}]", footnotes.len());
        cells.extend(std::iter::repeat_n(mark, n));
    };
    let ka = Workload::Keepalive;
    if results.cell(case, ka).is_ok() {
        cells.push(fmt_rate(
            results.median(case, ka, |s| Some(s.wrk.requests_per_s)),
        ));
        cells.push(fmt_latency(
            results.median(case, ka, |s| Some(s.wrk.p50_us)),
        ));
        cells.push(fmt_latency(
            results.median(case, ka, |s| Some(s.wrk.p99_us)),
        ));
    } else {
        failed(ka, 3, &mut cells);
    }
    let close = Workload::Close;
    if results.cell(case, close).is_ok() {
        cells.push(fmt_rate(
            results.median(case, close, |s| Some(s.wrk.requests_per_s)),
        ));
    } else {
        failed(close, 1, &mut cells);
    }
    let bulk = Workload::Bulk;
    if results.cell(case, bulk).is_ok() {
        cells.push(fmt_num(
            results.median(case, bulk, |s| Some(s.wrk.mib_per_s)),
            1,
        ));
    } else {
        failed(bulk, 1, &mut cells);
    }
    let cpu = |w: Workload| {
        if case == Case::Direct {
            return "—".to_owned();
        }
        if results.cell(case, w).is_err() {
            return "failed".to_owned();
        }
        fmt_num(
            results.median(case, w, |s| per_10k(s.proxy_cpu_s, s.wrk.requests)),
            3,
        )
    };
    cells.push(cpu(ka));
    cells.push(cpu(close));
    cells.push(if results.cell(case, ka).is_ok() {
        fmt_num(
            results.median(case, ka, |s| per_10k(Some(s.nginx_cpu_s), s.wrk.requests)),
            3,
        )
    } else {
        "failed".to_owned()
    });
    format!("| {} |\n", cells.join(" | "))
}

/// A number read from one sample.
type Metric = fn(&Sample) -> Option<f64>;

/// A ratio's goal.
#[derive(Clone, Copy)]
struct Target {
    bound: f64,
    higher_is_better: bool,
}

/// The ratio rows: redirector against HAProxy, and against direct TLS for bulk.
fn ratios(results: &Results) -> Vec<String> {
    use Case::{Direct, Haproxy, Redirector};
    use Workload::{Bulk, Close, Keepalive};
    let rps: Metric = |s| Some(s.wrk.requests_per_s);
    let p99: Metric = |s| Some(s.wrk.p99_us);
    let mib: Metric = |s| Some(s.wrk.mib_per_s);
    let cpu: Metric = |s| per_10k(s.proxy_cpu_s, s.wrk.requests);
    let higher = |bound| {
        Some(Target {
            bound,
            higher_is_better: true,
        })
    };
    let lower = |bound| {
        Some(Target {
            bound,
            higher_is_better: false,
        })
    };
    let rows = [
        (
            "redirector / HAProxy, req/s (keepalive)",
            Haproxy,
            Keepalive,
            rps,
            higher(1.0),
        ),
        (
            "redirector / HAProxy, p99 (keepalive)",
            Haproxy,
            Keepalive,
            p99,
            lower(1.0),
        ),
        (
            "redirector / HAProxy, conn/s",
            Haproxy,
            Close,
            rps,
            higher(0.9),
        ),
        (
            "redirector / HAProxy, CPU per 10k req (keepalive)",
            Haproxy,
            Keepalive,
            cpu,
            None,
        ),
        (
            "redirector / HAProxy, CPU per 10k conn",
            Haproxy,
            Close,
            cpu,
            None,
        ),
        (
            "redirector / direct TLS, bulk MiB/s",
            Direct,
            Bulk,
            mib,
            higher(0.9),
        ),
    ];
    rows.iter()
        .map(|&(name, base, workload, metric, target)| {
            let ours = results.median(Redirector, workload, metric);
            let theirs = results.median(base, workload, metric);
            let target_text = match target {
                Some(t) if t.higher_is_better => format!("≥ {:.1}", t.bound),
                Some(t) => format!("≤ {:.1}", t.bound),
                None => "lower is better (no target)".to_owned(),
            };
            match (ours, theirs) {
                (Some(a), Some(b)) if b > 0.0 => {
                    let r = a / b;
                    let met = match target {
                        Some(t) if t.higher_is_better => yes_no(r >= t.bound),
                        Some(t) => yes_no(r <= t.bound),
                        None => "—",
                    };
                    format!("| {name} | {r:.3} | {target_text} | {met} |\n")
                }
                _ => {
                    let who = if ours.is_none() { Redirector } else { base };
                    format!(
                        "| {name} | n/a ({} has no result) | {target_text} | no |\n",
                        who.label()
                    )
                }
            }
        })
        .collect()
}

fn run_row(case: Case, workload: Workload, run: &Result<Sample, String>) -> String {
    match run {
        Ok(s) => format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | ok |\n",
            s.rep,
            case.label(),
            workload.label(),
            s.wrk.requests,
            fmt_rate(Some(s.wrk.requests_per_s)),
            fmt_latency(Some(s.wrk.p50_us)),
            fmt_latency(Some(s.wrk.p99_us)),
            fmt_num(Some(s.wrk.mib_per_s), 1),
            fmt_num(s.proxy_cpu_s, 2),
            fmt_num(Some(s.nginx_cpu_s), 2),
        ),
        Err(reason) => format!(
            "| | {} | {} | | | | | | | | failed: {} |\n",
            case.label(),
            workload.label(),
            escape(reason)
        ),
    }
}

fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

fn fmt_rate(v: Option<f64>) -> String {
    match v {
        Some(v) => {
            let n = v.round() as u64;
            let digits = n.to_string();
            let mut out = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i).is_multiple_of(3) {
                    out.push(',');
                }
                out.push(c);
            }
            out
        }
        None => "—".into(),
    }
}

fn fmt_latency(us: Option<f64>) -> String {
    match us {
        Some(us) if us < 1000.0 => format!("{us:.0} µs"),
        Some(us) if us < 1e6 => format!("{:.2} ms", us / 1000.0),
        Some(us) => format!("{:.2} s", us / 1e6),
        None => "—".into(),
    }
}

fn fmt_num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{v:.decimals$}"))
}

/// A reason fit for one table cell.
fn escape(text: &str) -> String {
    one_line(text).replace('|', "\\|")
}

/// Whitespace runs (newlines included) collapsed, cut to 300 characters.
pub fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() > 300 {
        let cut: String = joined.chars().take(300).collect();
        format!("{cut}…")
    } else {
        joined
    }
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
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_rate(Some(56072.79)), "56,073");
        assert_eq!(fmt_rate(Some(999.0)), "999");
        assert_eq!(fmt_latency(Some(440.0)), "440 µs");
        assert_eq!(fmt_latency(Some(4190.0)), "4.19 ms");
        assert_eq!(escape("a |b\nc"), "a \\|b c");
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
