//! What the benchmark reads about processes from /proc (CPU time, parent, name, command
//! line, threads), and the signal it sends them.

use anyhow::{Context, Result};

/// utime + stime of a process (all its threads), in seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let fields = stat_fields(pid)?;
    let ticks: u64 = [11, 12]
        .iter()
        .map(|&i| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum();
    // SAFETY: sysconf(3) has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Ok(ticks as f64 / hz)
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
}
