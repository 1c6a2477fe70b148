//! What the benchmark reads about processes from /proc (CPU time, parent, name, command
//! line, threads), and the signal it sends them.

use anyhow::{Context, Result};

/// utime + stime of a process (all its threads), in seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let times = cpu_times(pid)?;
    Ok(times.user_s + times.system_s)
}

/// CPU time of a process (all its threads), user and system apart.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    pub user_s: f64,
    pub system_s: f64,
}

impl CpuTimes {
    /// What was spent from `self` to `later`.
    pub fn until(self, later: CpuTimes) -> CpuTimes {
        CpuTimes {
            user_s: later.user_s - self.user_s,
            system_s: later.system_s - self.system_s,
        }
    }
}

/// utime and stime of a process, in seconds.
pub fn cpu_times(pid: u32) -> Result<CpuTimes> {
    let fields = stat_fields(pid)?;
    let seconds = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .map_or(0.0, ticks_to_seconds)
    };
    Ok(CpuTimes {
        user_s: seconds(11),
        system_s: seconds(12),
    })
}

/// Clock ticks (`USER_HZ`, the unit of /proc/<pid>/stat and /proc/stat) in seconds.
fn ticks_to_seconds(ticks: u64) -> f64 {
    // SAFETY: sysconf(3) has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    ticks as f64 / hz
}

/// The whole machine's CPU time so far, all CPUs together (the `cpu` line of /proc/stat).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MachineCpu {
    /// Every state but idle and iowait: processes, interrupts, softirqs, steal.
    pub busy_s: f64,
    /// Every state, idle included: wall time times the number of CPUs.
    pub total_s: f64,
    /// The number of CPUs (the `cpuN` lines).
    pub cpus: u32,
}

impl MachineCpu {
    /// What passed from `self` to `later`.
    pub fn until(self, later: MachineCpu) -> MachineCpu {
        MachineCpu {
            busy_s: later.busy_s - self.busy_s,
            total_s: later.total_s - self.total_s,
            cpus: later.cpus,
        }
    }
}

/// The machine's CPU time from /proc/stat.
pub fn machine_cpu() -> Result<MachineCpu> {
    let text = std::fs::read_to_string("/proc/stat").context("cannot read /proc/stat")?;
    parse_machine_cpu(&text).with_context(|| {
        let first = text.lines().next().unwrap_or_default();
        format!("unexpected first line of /proc/stat: {first}")
    })
}

/// The `cpu` line: user nice system idle iowait irq softirq steal (guest time is counted
/// in user already).
fn parse_machine_cpu(text: &str) -> Option<MachineCpu> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let &[user, nice, system, idle, iowait, irq, softirq, steal] = ticks.as_slice() else {
        return None;
    };
    let busy = user + nice + system + irq + softirq + steal;
    let cpus = text
        .lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count();
    Some(MachineCpu {
        busy_s: ticks_to_seconds(busy),
        total_s: ticks_to_seconds(busy + idle + iowait),
        cpus: u32::try_from(cpus).ok().filter(|&n| n > 0)?,
    })
}

/// The fields of /proc/<pid>/stat after the command name: [0] is the state (field 3 of
/// proc(5)), [1] the parent pid, [11] utime, [12] stime.
fn stat_fields(pid: u32) -> Result<Vec<String>> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    // The command name is in parentheses and may itself contain spaces or parentheses.
    let rest = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .with_context(|| format!("unexpected {path}: {text}"))?;
    Ok(rest.split_whitespace().map(str::to_owned).collect())
}

/// The pids whose parent is `parent`.
pub(super) fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            stat_fields(pid)
                .ok()
                .and_then(|f| f.get(1)?.parse::<u32>().ok())
                == Some(parent)
        })
        .collect()
}

/// `/proc/<pid>/comm`.
pub fn proc_comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The pids of `redirector` processes whose command line contains `needle` (what
/// `pgrep -f` does, without depending on procps).
pub fn find_redirector(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| proc_comm(pid).as_deref() == Some("redirector"))
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                String::from_utf8_lossy(&cmdline)
                    .split('\0')
                    .any(|arg| arg.contains(needle))
            })
        })
        .collect()
}

/// Number of threads of a process (for the report).
pub fn threads(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()
}

pub(super) fn kill(pid: u32, signal: i32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(pid, signal) };
    }
}

/// `Tcp: PassiveOpens` of the network namespace `pid` lives in: how many TCP connections
/// were accepted there so far (`/proc/<pid>/net/snmp` shows the namespace of `pid`, so no
/// setns is needed).
pub fn passive_opens(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/net/snmp");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    snmp_value(&text, "Tcp:", "PassiveOpens")
        .with_context(|| format!("no Tcp: PassiveOpens in {path}"))
}

/// A value of /proc/net/snmp: each protocol has a line of names, then a line of values.
fn snmp_value(text: &str, protocol: &str, name: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(protocol));
    let names = lines.next()?;
    let values = lines.next()?;
    let at = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(at)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snmp_counters() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Tcp: RtoAlgorithm RtoMin ActiveOpens PassiveOpens AttemptFails\n\
                    Tcp: 1 200 17 4242 0\nUdp: InDatagrams\nUdp: 3\n";
        assert_eq!(snmp_value(text, "Tcp:", "PassiveOpens"), Some(4242));
        assert_eq!(snmp_value(text, "Tcp:", "Nope"), None);
        assert!(passive_opens(std::process::id()).is_ok());
    }

    #[test]
    fn machine_cpu_from_proc_stat() {
        let text = "cpu  100 5 50 800 10 3 7 25 0 0\ncpu0 50 2 25 400 5 1 3 12 0 0\nintr 1\n";
        let cpu = parse_machine_cpu(text).unwrap();
        let tick = ticks_to_seconds(1);
        assert!((cpu.busy_s - 190.0 * tick).abs() < 1e-9, "{cpu:?}");
        assert!((cpu.total_s - 1000.0 * tick).abs() < 1e-9, "{cpu:?}");
        assert_eq!(cpu.cpus, 1);
        assert_eq!(parse_machine_cpu("cpu  1 2 3\n"), None);
        let now = machine_cpu().unwrap();
        assert!(now.total_s >= now.busy_s && now.busy_s > 0.0, "{now:?}");
        assert!(now.cpus >= 1, "{now:?}");
    }
}
