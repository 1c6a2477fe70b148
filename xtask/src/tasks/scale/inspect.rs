//! Looking at the running agent from outside: its pid, memory and CPU time (`/proc`),
//! and the Backend map it filled (`bpftool`).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Fails unless `pid` runs the agent binary `bin` (the agent is started as
/// `unshare .. sh -c '.. exec nsenter .. redirector run ..'`, and all three exec, so the
/// pid of the child we spawned must be the agent's by the time it is ready).
pub fn check_is_agent(pid: u32, bin: &Path) -> Result<()> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .with_context(|| format!("no process {pid}"))?;
    // The kernel keeps the first 15 bytes of the executable's name.
    let name = bin
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let expected: String = name.chars().take(15).collect();
    if comm.trim() != expected {
        bail!(
            "process {pid} is {:?}, not the agent ({expected})",
            comm.trim()
        );
    }
    Ok(())
}

/// Resident memory of a process, KiB.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss_kib: u64,
    /// `VmHWM`: the peak resident size so far.
    pub hwm_kib: u64,
}

pub fn memory(pid: u32) -> Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let kib = |key: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no {key} in {path}"))
    };
    Ok(Memory {
        rss_kib: kib("VmRSS:")?,
        hwm_kib: kib("VmHWM:")?,
    })
}

/// User + system CPU time of a process, seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    // The command name (field 2) may contain spaces; fields after its ')' are plain.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5); `after` starts at field 3.
    let ticks = |i: usize| -> Result<u64> {
        fields
            .get(i - 3)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no field {i} in {path}"))
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Ok((ticks(14)? + ticks(15)?) as f64 / hz)
}

/// The number of entries in the pinned map at `pinned` and its capacity.
pub fn map_entries(pinned: &Path) -> Result<(usize, u64)> {
    let show = bpftool(&["map", "show", "pinned"], pinned)?;
    let max = show
        .get("max_entries")
        .and_then(serde_json::Value::as_u64)
        .context("bpftool map show: no max_entries")?;
    let dump = bpftool(&["map", "dump", "pinned"], pinned)?;
    let entries = dump
        .as_array()
        .context("bpftool map dump: not a JSON array")?
        .len();
    Ok((entries, max))
}

fn bpftool(args: &[&str], pinned: &Path) -> Result<serde_json::Value> {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .arg(pinned)
        .output()
        .context("cannot run bpftool (Debian: apt-get install bpftool)")?;
    if !out.status.success() {
        bail!(
            "bpftool {} {} failed: {}",
            args.join(" "),
            pinned.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("bpftool printed no JSON")
}

/// `MiB` with one decimal from KiB.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}
