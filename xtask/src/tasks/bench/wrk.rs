//! What the benchmark asks of wrk, and what it reads back from wrk's report.
//!
//! wrk prints a human report, no machine format; [`parse`] reads the handful of lines the
//! benchmark needs and refuses a report that lacks one, so a changed wrk output format
//! fails loudly instead of producing zeros.

use anyhow::{Context, Result, bail};

/// The three workloads, run with the same wrk settings for every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Keep-alive requests for a 1 KiB body: request rate and latency.
    Keepalive,
    /// `Connection: close`: one TLS handshake per request, so requests/s is connections/s.
    Close,
    /// A 1 MiB body over few connections: throughput.
    Bulk,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::Keepalive, Workload::Close, Workload::Bulk];

    pub fn label(self) -> &'static str {
        match self {
            Workload::Keepalive => "keepalive /1k",
            Workload::Close => "Connection: close /1k",
            Workload::Bulk => "bulk /1m",
        }
    }

    /// The name `--workloads` knows it by.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Keepalive => "keepalive",
            Workload::Close => "close",
            Workload::Bulk => "bulk",
        }
    }

    /// Parses `--workloads`: comma-separated names (or `all`), returned in run order.
    pub fn select(text: &str) -> Result<Vec<Workload>> {
        let mut chosen = Vec::new();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            if word == "all" {
                chosen.extend(Workload::ALL);
                continue;
            }
            match Workload::ALL.iter().find(|w| w.name() == word) {
                Some(&workload) => chosen.push(workload),
                None => bail!(
                    "--workloads: unknown workload {word:?} (known: {}, all)",
                    Workload::ALL.map(Workload::name).join(", ")
                ),
            }
        }
        if chosen.is_empty() {
            bail!("--workloads: no workload named");
        }
        Ok(Workload::ALL
            .into_iter()
            .filter(|w| chosen.contains(w))
            .collect())
    }

    /// wrk's arguments for this workload against `base` (`https://host` or `http://host:443`).
    pub fn args(self, duration_s: u64, base: &str) -> Vec<String> {
        let duration = format!("-d{duration_s}s");
        let mut args: Vec<String> = match self {
            Workload::Keepalive | Workload::Close => vec!["-t2".into(), "-c32".into()],
            Workload::Bulk => vec!["-t1".into(), "-c4".into()],
        };
        args.push(duration);
        args.push("--latency".into());
        if self == Workload::Close {
            args.extend(["-H".into(), "Connection: close".into()]);
        }
        let path = match self {
            Workload::Keepalive | Workload::Close => "/1k",
            Workload::Bulk => "/1m",
        };
        args.push(format!("{base}{path}"));
        args
    }
}

/// The numbers of one wrk report.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub requests_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Transfer/sec in MiB/s (wrk's "MB" is 2^20 bytes).
    pub mib_per_s: f64,
    /// Completed requests (responses read), whatever their status.
    pub requests: u64,
    /// Bytes read in the run ("N requests in 10.01s, 7.45GB read"; wrk's units are powers
    /// of 1024, printed with two decimals).
    pub read_bytes: f64,
    /// Responses with a status >= 400.
    pub non_2xx: u64,
    /// connect + read + write + timeout errors.
    pub socket_errors: u64,
    /// The "Socket errors: ..." line as printed, if any.
    pub socket_errors_line: Option<String>,
}

impl Report {
    /// Why this run cannot be counted, if it cannot: every request must succeed (a
    /// benchmark of a proxy that drops or mangles requests measures nothing).
    pub fn problem(&self) -> Option<String> {
        if self.requests == 0 {
            return Some(match &self.socket_errors_line {
                Some(line) => format!("no request completed ({line})"),
                None => "no request completed".into(),
            });
        }
        if self.non_2xx > 0 {
            return Some(format!(
                "{} of {} responses were HTTP errors (status >= 400)",
                self.non_2xx, self.requests
            ));
        }
        if self.socket_errors > 0 {
            return Some(format!(
                "{} socket errors in {} requests ({})",
                self.socket_errors,
                self.requests,
                self.socket_errors_line.as_deref().unwrap_or("")
            ));
        }
        None
    }

    /// Whether not a single request got a good answer (the case does not work at all).
    pub fn nothing_worked(&self) -> bool {
        self.requests == self.non_2xx
    }
}

/// Parses wrk's report (stdout).
pub fn parse(output: &str) -> Result<Report> {
    let mut requests_per_s = None;
    let mut transfer = None;
    let mut requests = None;
    let mut read_bytes = None;
    let mut p50 = None;
    let mut p99 = None;
    let mut non_2xx = 0;
    let mut socket_errors = 0;
    let mut socket_errors_line = None;
    for line in output.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("Requests/sec:") {
            requests_per_s = Some(number(v)?);
        } else if let Some(v) = line.strip_prefix("Transfer/sec:") {
            transfer = Some(bytes(v.trim())?);
        } else if let Some(v) = line.strip_prefix("50%") {
            p50 = Some(micros(v.trim())?);
        } else if let Some(v) = line.strip_prefix("99%") {
            p99 = Some(micros(v.trim())?);
        } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
            non_2xx = integer(v)?;
        } else if let Some(v) = line.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            for part in v.split(',') {
                let count = part.split_whitespace().last().unwrap_or("");
                socket_errors += integer(count)?;
            }
            socket_errors_line = Some(line.to_owned());
        } else if line.contains(" requests in ") {
            // "561241 requests in 10.01s, 445.62MB read"
            let count = line.split_whitespace().next().unwrap_or("");
            requests = Some(integer(count)?);
            if let Some(read) = line
                .rsplit(", ")
                .next()
                .and_then(|tail| tail.strip_suffix(" read"))
            {
                read_bytes = Some(bytes(read.trim())?);
            }
        }
    }
    let missing = |what: &str| format!("wrk's report has no {what} line:\n{output}");
    Ok(Report {
        requests_per_s: requests_per_s.with_context(|| missing("Requests/sec"))?,
        p50_us: p50.with_context(|| missing("50% latency"))?,
        p99_us: p99.with_context(|| missing("99% latency"))?,
        mib_per_s: transfer.with_context(|| missing("Transfer/sec"))? / (1024.0 * 1024.0),
        requests: requests.with_context(|| missing("\"N requests in\""))?,
        read_bytes: read_bytes.with_context(|| missing("\"N requests in ..., X read\""))?,
        non_2xx,
        socket_errors,
        socket_errors_line,
    })
}

fn number(text: &str) -> Result<f64> {
    let text = text.trim();
    text.parse()
        .with_context(|| format!("{text:?} is not a number"))
}

fn integer(text: &str) -> Result<u64> {
    let text = text.trim();
    text.parse()
        .with_context(|| format!("{text:?} is not an integer"))
}

/// Splits `12.5ms` into (12.5, "ms").
fn split_unit(text: &str) -> Result<(f64, &str)> {
    let at = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    Ok((number(&text[..at])?, text[at..].trim()))
}

/// A wrk duration (`us`, `ms`, `s`, `m`, `h`) in microseconds.
fn micros(text: &str) -> Result<f64> {
    let (value, unit) = split_unit(text)?;
    let scale = match unit {
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "m" => 60e6,
        "h" => 3600e6,
        _ => bail!("unknown time unit in {text:?}"),
    };
    Ok(value * scale)
}

/// A wrk byte amount (`B`, `KB`, `MB`, ...: powers of 1024) in bytes.
fn bytes(text: &str) -> Result<f64> {
    let (value, unit) = split_unit(text)?;
    let power = match unit {
        "" | "B" => 0,
        "KB" => 1,
        "MB" => 2,
        "GB" => 3,
        "TB" => 4,
        _ => bail!("unknown byte unit in {text:?}"),
    };
    Ok(value * 1024f64.powi(power))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEEPALIVE: &str = "Running 10s test @ http://api.redirector.test:443/1k
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   635.91us    0.89ms  12.92ms   93.69%
    Req/Sec    28.19k     2.08k   32.39k    71.50%
  Latency Distribution
     50%  440.00us
     75%  617.00us
     90%    1.03ms
     99%    4.19ms
  561241 requests in 10.01s, 445.62MB read
Requests/sec:  56072.79
Transfer/sec:     44.52MB
";

    #[test]
    fn parses_a_clean_report() {
        let r = parse(KEEPALIVE).unwrap();
        assert_eq!(r.requests, 561_241);
        assert!((r.requests_per_s - 56_072.79).abs() < 1e-6);
        assert!((r.p50_us - 440.0).abs() < 1e-9);
        assert!((r.p99_us - 4190.0).abs() < 1e-9);
        assert!((r.mib_per_s - 44.52).abs() < 1e-9);
        assert!((r.read_bytes - 445.62 * 1024.0 * 1024.0).abs() < 1e-3);
        assert_eq!(r.problem(), None);
    }

    #[test]
    fn counts_errors_and_http_failures() {
        let text = KEEPALIVE.replace(
            "Requests/sec",
            "  Socket errors: connect 3, read 2, write 0, timeout 1\n  Non-2xx or 3xx responses: 7\nRequests/sec",
        );
        let r = parse(&text).unwrap();
        assert_eq!(r.socket_errors, 6);
        assert_eq!(r.non_2xx, 7);
        assert!(r.problem().unwrap().contains("HTTP errors"));
        assert!(!r.nothing_worked());
    }

    #[test]
    fn a_run_where_nothing_answered() {
        let text = "Running 3s test @ http://x:443/1k
  Latency Distribution
     50%    0.00us
     99%    0.00us
  0 requests in 3.00s, 0.00B read
  Socket errors: connect 32, read 0, write 0, timeout 0
Requests/sec:      0.00
Transfer/sec:       0.00B
";
        let r = parse(text).unwrap();
        assert!(r.nothing_worked());
        assert!(r.problem().unwrap().starts_with("no request completed"));
    }

    #[test]
    fn units() {
        assert_eq!(micros("1.50s").unwrap(), 1.5e6);
        assert_eq!(micros("2.00m").unwrap(), 120e6);
        assert_eq!(bytes("1.00KB").unwrap(), 1024.0);
        assert_eq!(bytes("512.00B").unwrap(), 512.0);
        assert!(micros("3xs").is_err());
        assert!(parse("garbage").is_err());
    }

    #[test]
    fn workload_selection() {
        assert_eq!(
            Workload::select("bulk,keepalive").unwrap(),
            [Workload::Keepalive, Workload::Bulk]
        );
        assert_eq!(Workload::select("all").unwrap(), Workload::ALL);
        assert!(Workload::select("slow").is_err());
    }

    #[test]
    fn workload_arguments() {
        assert_eq!(
            Workload::Close.args(10, "http://api.redirector.test:443"),
            [
                "-t2",
                "-c32",
                "-d10s",
                "--latency",
                "-H",
                "Connection: close",
                "http://api.redirector.test:443/1k"
            ]
        );
        assert_eq!(
            Workload::Bulk.args(3, "https://api.redirector.test"),
            [
                "-t1",
                "-c4",
                "-d3s",
                "--latency",
                "https://api.redirector.test/1m"
            ]
        );
    }
}
