//! One agent run: its own namespaces, hosts file, bpffs and agent; the start-up figures
//! (ready, memory, CPU, timeline, map entries), then for the main run the idle window and
//! the changes ([`after_start`]), then the agent is stopped and its pins removed.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Result, bail};
use xtask::netlab::{Bpffs, Topology, agent};

use super::after_start::after_start;
use super::launch::ScaleAgent;
use super::logs::{field_u64, ms_between, timestamp};
use super::results::Run;
use super::timeline::timeline;
use super::{inspect, ms, workload};

/// One agent run.
pub struct Plan<'a> {
    pub label: &'static str,
    pub backends_dir: &'a Path,
    pub backends: usize,
    pub per_name: usize,
    /// Backends added one by one after start-up (0: start-up figures only).
    pub changes: usize,
    /// Where change files are written before they are renamed into `backends_dir`.
    pub staging: Option<&'a Path>,
    pub idle: Duration,
    pub agent_args: &'a [String],
    /// Where the agent's log goes.
    pub log_file: &'a Path,
}

impl<'a> Plan<'a> {
    pub fn start_only(
        label: &'static str,
        backends_dir: &'a Path,
        backends: usize,
        per_name: usize,
        agent_args: &'a [String],
        log_file: &'a Path,
    ) -> Self {
        Plan {
            label,
            backends_dir,
            backends,
            per_name,
            changes: 0,
            staging: None,
            idle: Duration::ZERO,
            agent_args,
            log_file,
        }
    }
}

pub fn run_case(plan: &Plan) -> Result<Run> {
    let entries = workload::hosts_entries(plan.backends, plan.per_name, plan.changes)?;
    let hosts: Vec<(IpAddr, &str)> = entries.iter().map(|(a, n)| (*a, n.as_str())).collect();
    // Drop order is the reverse: agent, bpffs, namespaces and cgroup.
    let topology = Topology::new()?;
    topology.node.set_hosts(&hosts)?;
    drop(hosts);
    drop(entries);
    let bpffs = Bpffs::new()?;
    let pin_dir = bpffs.path().join("redirector");

    let spawned_at = SystemTime::now();
    let spawned = Instant::now();
    let (mut agent, ready_line) = ScaleAgent::start(
        &topology,
        plan.backends_dir,
        &pin_dir,
        plan.agent_args,
        plan.log_file,
    )?;
    let pid = agent.pid();
    let mem_ready = inspect::memory(pid)?;
    let cpu_ready_s = inspect::cpu_seconds(pid)?;
    let start_logs: Vec<(Instant, String)> = agent.logs()?.to_vec();
    let ready_ms = start_logs
        .iter()
        .find(|(_, l)| l.contains("ready:"))
        .map_or(0.0, |(seen, _)| ms(seen.duration_since(spawned)));
    inspect::check_is_agent(pid, &agent::redirector_bin()?)?;
    println!(
        "    ready after {ready_ms:.0} ms, pid {pid}, VmRSS {}",
        inspect::mib(mem_ready.rss_kib)
    );

    let ready_log_ms = timestamp(&ready_line).map(|t| ms_between(spawned_at, t));
    let applied = start_logs
        .iter()
        .map(|(_, l)| l)
        .find(|l| l.contains("Backends applied"));
    let timeline = timeline(
        &start_logs
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>(),
        spawned_at,
    );
    let backends_map = pin_dir.join("maps/BACKENDS");
    let (map_entries, map_capacity) = inspect::map_entries(&backends_map)?;
    println!("    BACKENDS map: {map_entries} entries (capacity {map_capacity})");

    let after = if plan.changes > 0 || !plan.idle.is_zero() {
        Some(after_start(plan, &mut agent, pid, &backends_map)?)
    } else {
        None
    };

    agent.terminate()?;
    let out = agent::redirector(&["uninstall", "--bpffs", &pin_dir.display().to_string()])?;
    if !out.status.success() {
        bail!(
            "redirector uninstall failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(Run {
        label: plan.label.to_owned(),
        backends: plan.backends,
        per_name: plan.per_name,
        ready_ms,
        ready_log_ms,
        applied_ms: applied.and_then(|l| field_u64(l, "elapsed_ms")),
        applied_addresses: applied.and_then(|l| field_u64(l, "addresses")),
        timeline,
        mem_ready,
        cpu_ready_s,
        map_entries,
        map_capacity,
        after,
    })
}
