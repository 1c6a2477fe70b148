//! Facts about the machine and the workspace that the benchmark reports print in their
//! Machine tables: CPUs, kernel, memory, load average, date and git commit.
//!
//! Each fact is `None` when it cannot be read; every report words the gap its own way.

use std::path::Path;
use std::process::Command;

use super::workspace_root;

/// The rows `bench-scale` and `bench-hooks` open their Machine table with: date (to the
/// second), `machine`, kernel, workspace commit and agent binary, `?` for what is unknown.
pub fn agent_rows(machine: String, bin: &Path) -> Vec<(String, String)> {
    let known = |fact: Option<String>| fact.unwrap_or_else(|| "?".into());
    vec![
        ("date".into(), known(utc_date("%Y-%m-%d %H:%M:%S UTC"))),
        ("machine".into(), machine),
        ("kernel".into(), known(kernel_release())),
        ("workspace commit".into(), known(workspace_commit())),
        ("agent binary".into(), bin.display().to_string()),
    ]
}

/// `<n> CPUs (<model>)`, `?` for an unknown model.
pub fn cpus() -> String {
    let model = cpu_model().unwrap_or_else(|| "?".into());
    format!("{} CPUs ({model})", cpu_count())
}

/// The number of CPUs this process may run on (0 if unknown).
pub fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// The first `model name` of /proc/cpuinfo.
pub fn cpu_model() -> Option<String> {
    std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
    })
}

/// The kernel release (`uname -r`).
pub fn kernel_release() -> Option<String> {
    read_trimmed("/proc/sys/kernel/osrelease")
}

/// The first line of /proc/meminfo (MemTotal), in GiB with one decimal.
pub fn memory_total() -> Option<String> {
    read_trimmed("/proc/meminfo")?
        .lines()
        .next()
        .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_owned())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map(|kib| format!("{:.1} GiB", kib as f64 / 1048576.0))
}

/// The 1, 5 and 15 minute load averages: the first three fields of /proc/loadavg.
pub fn load_average() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// The current UTC time in `date(1)` `format` (without the `+`).
pub fn utc_date(format: &str) -> Option<String> {
    stdout(Command::new("date").arg("-u").arg(format!("+{format}")))
}

/// What a git command prints in the workspace root (trimmed), if it succeeds.
pub fn git(args: &[&str]) -> Option<String> {
    stdout(Command::new("git").args(args).current_dir(workspace_root()))
}

/// Whether the agent's sources (the crates built into it) differ from HEAD.
pub fn agent_sources_changed() -> bool {
    git(&[
        "status",
        "--porcelain",
        "--",
        "redirector",
        "redirector-common",
        "redirector-ebpf",
    ])
    .is_some_and(|out| !out.is_empty())
}

/// The workspace's commit as `git describe --always --dirty` words it.
pub fn workspace_commit() -> Option<String> {
    git(&["describe", "--always", "--dirty"])
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The trimmed stdout of a command that ran and succeeded.
fn stdout(cmd: &mut Command) -> Option<String> {
    cmd.output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}
