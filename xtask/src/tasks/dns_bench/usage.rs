//! What a run cost, read before and after it: CPU time of the agent (`/proc/<pid>/stat`),
//! of NSD and of dnsperf (each alone in a cgroup: `cpu.stat`), of the whole machine
//! (`/proc/stat`), and the agent's own DNS counters (`/metrics` on its admin socket).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use xtask::netlab::Cgroup;

/// The agent's `redirector_dns_queries_total` and `redirector_dns_query_seconds` sums.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DnsCounters {
    pub answered: f64,
    pub forwarded: f64,
    pub failed: f64,
    /// Sum of `redirector_dns_query_seconds` over every outcome.
    pub seconds: f64,
}

/// Everything read at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    at: Instant,
    agent_s: f64,
    nsd_s: f64,
    client_s: f64,
    machine: Ticks,
    ksoftirqd_s: f64,
    dns: DnsCounters,
}

/// All CPUs' jiffies from `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Ticks {
    /// Neither idle nor iowait.
    busy: u64,
    /// User time of processes with a positive nice value (part of `busy`).
    nice: u64,
    total: u64,
}

/// The difference of two snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub wall_s: f64,
    pub agent_cpu_s: f64,
    pub nsd_cpu_s: f64,
    pub client_cpu_s: f64,
    /// Busy share of all CPUs, 0..=1.
    pub machine_busy: f64,
    /// The `ksoftirqd` threads: packet processing the kernel deferred. The rest of the
    /// softirq work is charged to the task it interrupted (without
    /// `CONFIG_IRQ_TIME_ACCOUNTING`, also in `/proc/stat`'s own softirq column, which
    /// is therefore not a separate share).
    pub ksoftirqd_cpu_s: f64,
    /// Busy time of all CPUs less the agent, NSD, dnsperf and ksoftirqd: other
    /// processes on the machine (anything else running there competes for its CPUs).
    pub other_cpu_s: f64,
    /// The part of `other_cpu_s` that ran niced (the bench's processes run at nice 0,
    /// so this work mostly took CPU time the bench left idle).
    pub niced_cpu_s: f64,
    pub dns: DnsCounters,
}

/// Where to read from.
pub struct Sources<'a> {
    pub agent_pid: u32,
    pub admin_socket: &'a Path,
    pub nsd: &'a Cgroup,
}

impl Sources<'_> {
    /// Reads everything, with dnsperf's cgroup `client`.
    pub fn snapshot(&self, client: &Cgroup) -> Result<Snapshot> {
        let machine = machine_ticks()?;
        Ok(Snapshot {
            at: Instant::now(),
            agent_s: process_cpu_s(self.agent_pid)?,
            nsd_s: cgroup_cpu_s(self.nsd.path())?,
            client_s: cgroup_cpu_s(client.path())?,
            machine,
            ksoftirqd_s: ksoftirqd_cpu_s(),
            dns: dns_counters(self.admin_socket)?,
        })
    }
}

impl Snapshot {
    pub fn usage_since(&self, before: &Snapshot) -> Usage {
        let total = self.machine.total.saturating_sub(before.machine.total);
        let busy = self.machine.busy.saturating_sub(before.machine.busy);
        let ksoftirqd_cpu_s = (self.ksoftirqd_s - before.ksoftirqd_s).max(0.0);
        let nice = self.machine.nice.saturating_sub(before.machine.nice);
        let agent_cpu_s = self.agent_s - before.agent_s;
        let nsd_cpu_s = self.nsd_s - before.nsd_s;
        let client_cpu_s = self.client_s - before.client_s;
        Usage {
            wall_s: self.at.duration_since(before.at).as_secs_f64(),
            agent_cpu_s,
            nsd_cpu_s,
            client_cpu_s,
            machine_busy: if total == 0 {
                0.0
            } else {
                busy as f64 / total as f64
            },
            ksoftirqd_cpu_s,
            other_cpu_s: (busy as f64 / clock_ticks()
                - agent_cpu_s
                - nsd_cpu_s
                - client_cpu_s
                - ksoftirqd_cpu_s)
                .max(0.0),
            niced_cpu_s: nice as f64 / clock_ticks(),
            dns: DnsCounters {
                answered: self.dns.answered - before.dns.answered,
                forwarded: self.dns.forwarded - before.dns.forwarded,
                failed: self.dns.failed - before.dns.failed,
                seconds: self.dns.seconds - before.dns.seconds,
            },
        }
    }
}

/// user + system time of process `pid` (all its threads), seconds.
fn process_cpu_s(pid: u32) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    parse_stat_ticks(&text)
        .map(|ticks| ticks as f64 / clock_ticks())
        .with_context(|| format!("unexpected {path}: {text}"))
}

/// utime + stime of a `/proc/<pid>/stat` line. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted after its last `)`.
fn parse_stat_ticks(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0]; utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf(3) has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// CPU time of the `ksoftirqd/N` kernel threads, seconds (a thread that cannot be read
/// counts as 0: they never exit, so this only happens when /proc is unusual).
fn ksoftirqd_cpu_s() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut ticks = 0;
    for entry in entries.flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if stat.contains(" (ksoftirqd/") {
            ticks += parse_stat_ticks(&stat).unwrap_or(0);
        }
    }
    ticks as f64 / clock_ticks()
}

/// `usage_usec` of the cgroup's `cpu.stat` (present in every cgroup v2), seconds.
fn cgroup_cpu_s(cgroup: &Path) -> Result<f64> {
    let path = cgroup.join("cpu.stat");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|us| us as f64 / 1e6)
        .with_context(|| format!("no usage_usec in {}", path.display()))
}

/// Jiffies of all CPUs from `/proc/stat`.
fn machine_ticks() -> Result<Ticks> {
    let text = std::fs::read_to_string("/proc/stat").context("cannot read /proc/stat")?;
    parse_proc_stat(&text).context("unexpected /proc/stat")
}

fn parse_proc_stat(text: &str) -> Option<Ticks> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3)? + values.get(4)?;
    Some(Ticks {
        busy: total - idle,
        nice: *values.get(1)?,
        total,
    })
}

/// The agent's DNS counters from `/metrics` on its admin socket.
pub fn dns_counters(socket: &Path) -> Result<DnsCounters> {
    let mut stream = UnixStream::connect(socket)
        .with_context(|| format!("cannot connect to {}", socket.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: agent\r\n\r\n")?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .context("reading /metrics")?;
    if !response.starts_with("HTTP/1.") || !response.contains(" 200 ") {
        bail!(
            "GET /metrics: {}",
            response.lines().next().unwrap_or_default()
        );
    }
    Ok(parse_metrics(&response))
}

fn parse_metrics(text: &str) -> DnsCounters {
    let mut counters = DnsCounters::default();
    for line in text.lines() {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let outcome = |name: &str| {
            key.strip_prefix(name)
                .and_then(|k| k.strip_prefix("{outcome=\""))
                .and_then(|k| k.strip_suffix("\"}"))
        };
        match outcome("redirector_dns_queries_total") {
            Some("answered") => counters.answered += value,
            Some("forwarded") => counters.forwarded += value,
            Some("failed") => counters.failed += value,
            _ => {}
        }
        if outcome("redirector_dns_query_seconds_sum").is_some() {
            counters.seconds += value;
        }
    }
    counters
}

/// The pid of the `redirector run` whose arguments include `--admin-socket socket`:
/// the process the agent guard started (through `unshare`, `sh` and `nsenter`, which
/// all exec), found without relying on the guard's internals.
pub fn agent_pid(socket: &Path) -> Result<u32> {
    let wanted = socket.as_os_str().as_encoded_bytes();
    for entry in std::fs::read_dir("/proc").context("cannot list /proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let is_agent = args.get(1) == Some(&b"run".as_slice())
            && args
                .windows(2)
                .any(|w| w[0] == b"--admin-socket" && w[1] == wanted)
            && PathBuf::from(String::from_utf8_lossy(args[0]).as_ref())
                .file_name()
                .is_some_and(|n| n == "redirector");
        if is_agent {
            return Ok(pid);
        }
    }
    bail!(
        "no `redirector run --admin-socket {}` process found",
        socket.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_after_the_command_name() {
        let line = "123 (redir (x) y) S 1 2 3 4 5 6 7 8 9 10 250 40 0 0 20 0 4 0";
        assert_eq!(parse_stat_ticks(line), Some(290));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn proc_stat_busy_and_total() {
        let text = "cpu  100 5 50 800 20 3 2 0 0 0\ncpu0 1 2 3 4 5 6 7 8\n";
        assert_eq!(
            parse_proc_stat(text),
            Some(Ticks {
                busy: 160,
                nice: 5,
                total: 980
            })
        );
    }

    #[test]
    fn metrics() {
        let text = "HTTP/1.0 200 OK\r\n\r\n# TYPE redirector_dns_queries counter\n\
                    redirector_dns_queries_total{outcome=\"forwarded\"} 12\n\
                    redirector_dns_queries_total{outcome=\"answered\"} 3\n\
                    redirector_dns_query_seconds_sum{outcome=\"forwarded\"} 0.5\n\
                    redirector_dns_query_seconds_sum{outcome=\"answered\"} 0.25\n\
                    redirector_dns_query_seconds_count{outcome=\"answered\"} 3\n";
        let c = parse_metrics(text);
        assert_eq!(
            c,
            DnsCounters {
                answered: 3.0,
                forwarded: 12.0,
                failed: 0.0,
                seconds: 0.75
            }
        );
    }
}
