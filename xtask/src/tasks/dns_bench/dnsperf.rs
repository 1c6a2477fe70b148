//! One dnsperf run from the pod, and what it printed.
//!
//! Debian 12's dnsperf (2.10) has no latency histogram (`-O latency-histogram` came
//! later): its summary gives the average, minimum and maximum only. Percentiles come
//! from `-v`, which prints every response as `> RCODE NAME TYPE SECONDS` (microsecond
//! resolution); a query that timed out is reported with `T` instead of a code. Printing
//! a line per query costs dnsperf CPU on a machine it shares with the servers, so only
//! the rate-limited latency runs use `-v`, never the throughput runs.

use std::net::IpAddr;
use std::path::Path;

use anyhow::{Context, Result, bail};
use xtask::netlab::{Cgroup, Topology, in_cgroup_in_netns};

/// How one run loads the server.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub seconds: u64,
    /// `-Q`: a fixed rate; `None` for as fast as the outstanding limit allows.
    pub rate: Option<u64>,
    /// `-q`: queries in flight at most.
    pub outstanding: u32,
    /// `-v`: a line per response (for percentiles).
    pub verbose: bool,
}

/// dnsperf's summary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub sent: u64,
    pub completed: u64,
    pub lost: u64,
    pub qps: f64,
    pub run_seconds: f64,
    pub avg_latency_ms: f64,
    /// `NOERROR 258911 (100.00%)` as printed.
    pub rcodes: String,
}

/// Per-query latencies from `-v`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Latencies {
    /// Every response's latency, microseconds, sorted.
    pub us: Vec<u64>,
    /// `> T` lines: queries that timed out.
    pub timeouts: u64,
    /// Responses whose code was not NOERROR.
    pub errors: u64,
}

impl Latencies {
    /// The nearest-rank percentile `p` (0 < p <= 100): the smallest latency at least
    /// `p`% of the responses did not exceed. `None` without responses.
    pub fn percentile_ms(&self, p: f64) -> Option<f64> {
        let n = self.us.len();
        if n == 0 {
            return None;
        }
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        let i = rank.clamp(1, n) - 1;
        Some(self.us[i] as f64 / 1000.0)
    }

    pub fn max_ms(&self) -> Option<f64> {
        self.us.last().map(|&us| us as f64 / 1000.0)
    }
}

/// What a run printed, parsed.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub summary: Summary,
    pub latencies: Latencies,
}

/// Runs `bin` in the pod's network namespace and `cgroup` against `server` port 53 with
/// the query list `queries`. `timeout(1)` bounds it should dnsperf ever hang.
pub fn run(
    bin: &Path,
    topology: &Topology,
    cgroup: &Cgroup,
    server: IpAddr,
    queries: &Path,
    load: Load,
) -> Result<Outcome> {
    let mut args: Vec<String> = vec![
        "-k".into(),
        "5".into(),
        (load.seconds + 30).to_string(),
        bin.display().to_string(),
    ];
    args.extend(["-s".into(), server.to_string(), "-p".into(), "53".into()]);
    args.extend(["-d".into(), queries.display().to_string()]);
    args.extend(["-l".into(), load.seconds.to_string()]);
    args.extend(["-q".into(), load.outstanding.to_string()]);
    if let Some(rate) = load.rate {
        args.extend(["-Q".into(), rate.to_string()]);
    }
    if load.verbose {
        args.push("-v".into());
    }
    let mut command = in_cgroup_in_netns(cgroup, &topology.pod, "timeout", &args);
    let out = command
        .output()
        .with_context(|| format!("cannot run {command:?}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "dnsperf failed ({}): {} {}",
            out.status,
            tail(&stdout),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let summary = parse_summary(&stdout)
        .with_context(|| format!("no dnsperf summary in its output: {}", tail(&stdout)))?;
    Ok(Outcome {
        summary,
        latencies: parse_verbose(&stdout),
    })
}

/// The `Statistics:` block.
pub fn parse_summary(text: &str) -> Option<Summary> {
    let field = |label: &str| {
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(label))
            .map(str::trim)
    };
    let first_number =
        |label: &str| -> Option<f64> { field(label)?.split_whitespace().next()?.parse().ok() };
    Some(Summary {
        sent: first_number("Queries sent:")? as u64,
        completed: first_number("Queries completed:")? as u64,
        lost: first_number("Queries lost:")? as u64,
        qps: first_number("Queries per second:")?,
        run_seconds: first_number("Run time (s):")?,
        avg_latency_ms: first_number("Average Latency (s):").unwrap_or(f64::NAN) * 1000.0,
        rcodes: field("Response codes:").unwrap_or("").to_owned(),
    })
}

/// The `> RCODE NAME TYPE SECONDS` lines of `-v`.
pub fn parse_verbose(text: &str) -> Latencies {
    let mut latencies = Latencies::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("> ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        match fields.as_slice() {
            ["T", ..] => latencies.timeouts += 1,
            [rcode, _name, _type, seconds] => {
                let Ok(seconds) = seconds.parse::<f64>() else {
                    continue;
                };
                if *rcode != "NOERROR" {
                    latencies.errors += 1;
                }
                latencies.us.push((seconds * 1e6).round() as u64);
            }
            _ => {}
        }
    }
    latencies.us.sort_unstable();
    latencies
}

/// The last lines of dnsperf's output, for errors.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(12)..].join(" / ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = "\
[Status] Testing complete (time limit)

Statistics:

  Queries sent:         258911
  Queries completed:    258900 (100.00%)
  Queries lost:         11 (0.00%)

  Response codes:       NOERROR 258900 (100.00%)
  Average packet size:  request 33, response 82
  Run time (s):         3.000518
  Queries per second:   86288.767473

  Average Latency (s):  0.000931 (min 0.000027, max 0.006365)
  Latency StdDev (s):   0.000612
";

    #[test]
    fn summary() {
        let s = parse_summary(SUMMARY).unwrap();
        assert_eq!((s.sent, s.completed, s.lost), (258911, 258900, 11));
        assert!((s.qps - 86288.767473).abs() < 1e-6);
        assert!((s.avg_latency_ms - 0.931).abs() < 1e-9);
        assert!((s.run_seconds - 3.000518).abs() < 1e-9);
        assert_eq!(s.rcodes, "NOERROR 258900 (100.00%)");
        assert_eq!(parse_summary("[Status] nothing"), None);
    }

    #[test]
    fn verbose_lines_and_percentiles() {
        let text = "> NOERROR a.test A 0.000300\n> NOERROR a.test AAAA 0.000100\n\
                    > T a.test A\n> SERVFAIL b.test A 0.000200\n[Timeout] Query timed out: msg id 9\n\
                    > NOERROR c.test A 0.001000\n";
        let l = parse_verbose(text);
        assert_eq!(l.us, [100, 200, 300, 1000]);
        assert_eq!((l.timeouts, l.errors), (1, 1));
        assert_eq!(l.percentile_ms(50.0), Some(0.2));
        assert_eq!(l.percentile_ms(99.0), Some(1.0));
        assert_eq!(l.percentile_ms(25.0), Some(0.1));
        assert_eq!(l.max_ms(), Some(1.0));
        assert_eq!(Latencies::default().percentile_ms(50.0), None);
    }

    #[test]
    fn nearest_rank_of_a_hundred() {
        let l = Latencies {
            us: (1..=100).collect(),
            ..Latencies::default()
        };
        assert_eq!(l.percentile_ms(99.0), Some(0.099));
        assert_eq!(l.percentile_ms(50.0), Some(0.05));
        assert_eq!(l.percentile_ms(100.0), Some(0.1));
    }
}
