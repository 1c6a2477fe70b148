//! The kernel's BPF run-time statistics: `kernel.bpf_stats_enabled` (turned on for the
//! bench, restored by a guard) and `bpftool`'s `run_time_ns` / `run_cnt` per program.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// `kernel.bpf_stats_enabled=1` while alive; the previous value is written back on drop
/// (so also when the bench fails or panics).
pub struct StatsEnabled {
    previous: String,
}

impl StatsEnabled {
    pub fn enable() -> Result<StatsEnabled> {
        let previous = std::fs::read_to_string(SYSCTL)
            .with_context(|| format!("cannot read {SYSCTL}"))?
            .trim()
            .to_owned();
        std::fs::write(SYSCTL, "1").with_context(|| format!("cannot write 1 to {SYSCTL}"))?;
        Ok(StatsEnabled { previous })
    }

    /// The value it had before.
    pub fn previous(&self) -> &str {
        &self.previous
    }
}

impl Drop for StatsEnabled {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(SYSCTL, &self.previous) {
            eprintln!(
                "bench-hooks: cannot restore {SYSCTL} to {}: {e}",
                self.previous
            );
        }
    }
}

/// Cumulative figures of one program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgStats {
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// The id of the program attached through the link pinned at `pin`.
pub fn prog_id_of_link(pin: &Path) -> Result<u64> {
    let json = bpftool(&["link", "show", "pinned", &pin.display().to_string()])?;
    json["prog_id"]
        .as_u64()
        .with_context(|| format!("no prog_id in `bpftool link show pinned {}`", pin.display()))
}

/// The statistics of program `id` (zero until it first runs with stats enabled:
/// bpftool leaves the fields out then).
pub fn prog_stats(id: u64) -> Result<ProgStats> {
    let json = bpftool(&["prog", "show", "id", &id.to_string()])?;
    Ok(parse_stats(&json))
}

/// The program's name as the kernel knows it.
pub fn prog_name(id: u64) -> Result<String> {
    let json = bpftool(&["prog", "show", "id", &id.to_string()])?;
    Ok(json["name"].as_str().unwrap_or("?").to_owned())
}

fn parse_stats(json: &Value) -> ProgStats {
    ProgStats {
        run_time_ns: json["run_time_ns"].as_u64().unwrap_or(0),
        run_cnt: json["run_cnt"].as_u64().unwrap_or(0),
    }
}

/// `bpftool version`'s first line.
pub fn bpftool_version() -> String {
    Command::new("bpftool")
        .arg("version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "?".into())
}

fn bpftool(args: &[&str]) -> Result<Value> {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .with_context(|| format!("cannot run bpftool {} (is it installed?)", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "bpftool {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("bpftool {}: output is not JSON", args.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_default_to_zero_when_absent() {
        let json: Value = serde_json::from_str(r#"{"id":7,"name":"connect4"}"#).unwrap();
        assert_eq!(parse_stats(&json), ProgStats::default());
        let json: Value =
            serde_json::from_str(r#"{"id":7,"run_time_ns":1200,"run_cnt":10}"#).unwrap();
        assert_eq!(
            parse_stats(&json),
            ProgStats {
                run_time_ns: 1200,
                run_cnt: 10
            }
        );
    }
}
