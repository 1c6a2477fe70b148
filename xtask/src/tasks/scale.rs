//! `cargo xtask bench-scale`: how the agent copes with 10,000 Backends and 100,000
//! Backend map entries, in throw-away namespaces.
//!
//! No traffic at all: Backend hostnames resolve (through the node's hosts file, which the
//! agent reads in its private mount namespace) to addresses in 10.201.0.0/16 and
//! fd00:201::/32 that nothing routes, and only the map is filled. Three runs, each with
//! its own namespaces, cgroup, bpffs and agent:
//!
//! 1. baseline: no Backends (the fixed cost of starting: eBPF load, verifier, attach);
//! 2. 10k Backends with 1 address each (10k map entries);
//! 3. 10k Backends with 10 addresses each (100k entries), then an idle window (CPU),
//!    then 100 changes: each renames a new one-Backend file into the directory and
//!    waits for the agent's `Backend address map updated ... added=1` line.
//!
//! Figures come from the bench's own clock (`Instant`), from the agent's log timestamps
//! (RFC 3339, same realtime clock as our `SystemTime`), from `/proc/<pid>` and from
//! `bpftool`. The report goes to bench/scale.md and stdout.

mod inspect;
mod launch;
mod logs;
mod report;
mod workload;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use xtask::netlab::{Bpffs, Topology, agent};

use super::{cargo, check_status, ebpf, machine, target_dir, workspace_root};
use inspect::Memory;
use launch::ScaleAgent;
use logs::{field_u64, ms_between, timestamp};

/// `cargo xtask bench-scale` options.
#[derive(clap::Args, Debug)]
pub struct BenchScaleArgs {
    /// Backends to generate.
    #[arg(long, default_value_t = 10_000)]
    backends: usize,
    /// Addresses per Backend hostname in the main run (alternately IPv4 and IPv6).
    #[arg(long, default_value_t = 10)]
    addresses: usize,
    /// Backends added one file at a time to measure change-to-datapath latency.
    #[arg(long, default_value_t = 100)]
    changes: usize,
    /// Idle window after start-up in which the agent's CPU use is measured, seconds.
    #[arg(long, default_value_t = 10)]
    idle_seconds: u64,
    /// Only the main run (skip the baseline and the one-address run).
    #[arg(long)]
    main_only: bool,
    /// Where to write the Markdown report (default bench/scale.md).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Use this redirector binary instead of building target/release/redirector.
    #[arg(long)]
    redirector_bin: Option<PathBuf>,
    /// Extra `redirector run` argument for every run, repeatable (e.g.
    /// `--agent-arg=--dns-min-ttl=1h` to take the periodic hosts-file refresh out).
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    agent_args: Vec<String>,
}

/// How long one change may take before the benchmark gives up.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Capacity given to the agent's Backend map (`--max-backend-addresses`), at least.
const MAP_CAPACITY: usize = 131_072;

/// Targets from the issue.
pub const TARGET_READY_MS: f64 = 2_000.0;
pub const TARGET_CHANGE_P99_MS: f64 = 1_000.0;
pub const TARGET_RSS_KIB: u64 = 100 * 1024;

pub fn bench_scale(args: &BenchScaleArgs) -> Result<ExitCode> {
    super::require_root("the benchmark loads eBPF programs and creates network namespaces")?;
    if args.changes > 256 {
        bail!("--changes: at most 256");
    }
    let bin = build_redirector(args)?;
    agent::use_redirector_bin(bin.clone());
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        println!(
            "bench-scale: the agent's log lines are echoed on stderr (over 10,000 of them); \
             redirect it (2>scale.log)"
        );
    }

    let work = tempfile::Builder::new()
        .prefix("rdscale")
        .tempdir()
        .context("cannot create a temp dir")?;
    let backends_dir = work.path().join("backends");
    let staging = work.path().join("staging");
    let empty = work.path().join("empty");
    for dir in [&backends_dir, &staging, &empty] {
        std::fs::create_dir(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let files = workload::write_bulk(&backends_dir, args.backends)?;
    println!(
        "bench-scale: generated {} XBackends in {files} files under {}",
        args.backends,
        backends_dir.display()
    );
    let capacity =
        MAP_CAPACITY.max((args.backends * args.addresses + args.changes).next_power_of_two());
    let check_ms = time_check(&backends_dir)?;
    println!("bench-scale: `redirector check` of those files took {check_ms:.0} ms");
    let mut agent_args = vec!["--max-backend-addresses".to_owned(), capacity.to_string()];
    agent_args.extend(args.agent_args.iter().cloned());
    let load_before = machine::load_average().unwrap_or_else(|| "?".into());

    let mut starts = Vec::new();
    let (baseline_log, one_address_log, main_log) = (
        work.path().join("agent-baseline.log"),
        work.path().join("agent-one-address.log"),
        work.path().join("agent-main.log"),
    );
    if !args.main_only {
        let plans = [
            Plan::start_only(
                "baseline: no Backends",
                &empty,
                0,
                0,
                &agent_args,
                &baseline_log,
            ),
            Plan::start_only(
                "Backends x 1 address",
                &backends_dir,
                args.backends,
                1,
                &agent_args,
                &one_address_log,
            ),
        ];
        for plan in plans {
            println!("\n==> {}", plan.label);
            match run_case(&plan) {
                Ok(run) => starts.push(Ok(run)),
                Err(e) => {
                    eprintln!("bench-scale: {} failed: {e:#}", plan.label);
                    starts.push(Err((plan.label.to_owned(), format!("{e:#}"))));
                }
            }
        }
    }
    let main_plan = Plan {
        label: "Backends x addresses (main)",
        backends_dir: &backends_dir,
        backends: args.backends,
        per_name: args.addresses,
        changes: args.changes,
        staging: Some(&staging),
        idle: Duration::from_secs(args.idle_seconds),
        agent_args: &agent_args,
        log_file: &main_log,
    };
    println!("\n==> {}", main_plan.label);
    let main = run_case(&main_plan)?;

    let mut ctx = report::Context {
        machine: machine::agent_rows(
            format!(
                "{}, {} RAM",
                machine::cpus(),
                machine::memory_total().unwrap_or_else(|| "?".into())
            ),
            &bin,
        ),
        args: std::iter::once(format!(
            "--backends {} --addresses {} --changes {} --idle-seconds {}",
            args.backends, args.addresses, args.changes, args.idle_seconds
        ))
        .chain(args.agent_args.iter().map(|a| format!("--agent-arg={a}")))
        .collect::<Vec<_>>()
        .join(" "),
        files,
        check_ms,
        capacity,
        addresses: workload::describe_addresses(args.addresses),
    };
    ctx.machine.push((
        "load average (1, 5, 15 min)".into(),
        format!(
            "{load_before} before, {} after (other work on the machine inflates the wall-clock figures; the CPU-time ones less so)",
            machine::load_average().unwrap_or_else(|| "?".into())
        ),
    ));
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| workspace_root().join("bench/scale.md"));
    // A hand-written analysis below the marker survives a rerun.
    let kept = std::fs::read_to_string(&out)
        .ok()
        .and_then(|old| old.find(report::KEEP_MARKER).map(|at| old[at..].to_owned()));
    let mut md = report::render(&ctx, &starts, &main);
    if let Some(kept) = kept {
        md.push('\n');
        md.push_str(&kept);
    }
    // Written before it is printed: a closed stdout must not lose the report.
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(&out, &md).with_context(|| format!("cannot write {}", out.display()))?;
    println!("\n{md}");
    println!("bench-scale: report written to {}", out.display());
    Ok(if report::all_targets_met(&main) {
        ExitCode::SUCCESS
    } else {
        println!("bench-scale: a target was missed (see the report)");
        ExitCode::from(2)
    })
}

/// Wall time of `redirector check <dir>`: loading and validating the files alone.
fn time_check(dir: &Path) -> Result<f64> {
    let started = Instant::now();
    let out = agent::redirector(&["check", &dir.display().to_string()])?;
    let took = ms(started.elapsed());
    if !out.status.success() {
        bail!(
            "redirector check rejects the generated Backends:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(took)
}

/// `target/release/redirector`, built with its eBPF object, or `--redirector-bin`.
fn build_redirector(args: &BenchScaleArgs) -> Result<PathBuf> {
    if let Some(bin) = &args.redirector_bin {
        return std::fs::canonicalize(bin)
            .with_context(|| format!("--redirector-bin {}", bin.display()));
    }
    println!("bench-scale: building the eBPF object and the agent (release)");
    ebpf::build_ebpf()?;
    check_status(cargo().args(["build", "--release", "-p", "redirector"]))?;
    Ok(target_dir().join("release/redirector"))
}

/// One agent run.
struct Plan<'a> {
    label: &'static str,
    backends_dir: &'a Path,
    backends: usize,
    per_name: usize,
    /// Backends added one by one after start-up (0: start-up figures only).
    changes: usize,
    /// Where change files are written before they are renamed into `backends_dir`.
    staging: Option<&'a Path>,
    idle: Duration,
    agent_args: &'a [String],
    /// Where the agent's log goes.
    log_file: &'a Path,
}

impl<'a> Plan<'a> {
    fn start_only(
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

/// What one run measured.
#[derive(Debug)]
pub struct Run {
    pub label: String,
    pub backends: usize,
    pub per_name: usize,
    /// Agent spawned -> its ready line seen by us.
    pub ready_ms: f64,
    /// Agent spawned -> the ready line's own timestamp.
    pub ready_log_ms: Option<f64>,
    /// The first `Backends applied` line: `elapsed_ms` and `addresses`.
    pub applied_ms: Option<u64>,
    pub applied_addresses: Option<u64>,
    /// Log lines up to the ready line, as (ms since spawn, message).
    pub timeline: Vec<(f64, String)>,
    pub mem_ready: Memory,
    /// CPU time (user + system) the agent used until ready, seconds.
    pub cpu_ready_s: f64,
    /// Entries in the BACKENDS map after start-up (bpftool), and its capacity.
    pub map_entries: usize,
    pub map_capacity: u64,
    pub after: Option<AfterStart>,
}

/// The main run's figures after start-up.
#[derive(Debug)]
pub struct AfterStart {
    pub idle_s: f64,
    pub idle_cpu_s: f64,
    pub mem_idle: Memory,
    pub changes: Vec<Change>,
    /// Spacing between changes (the pause before each rename), ms.
    pub pauses_ms: (u64, u64),
    pub mem_changes: Memory,
    /// CPU time the agent used between each rename and its `Backends applied`, summed.
    pub changes_cpu_s: f64,
    pub map_entries_changes: usize,
    /// `Backend address map updated` lines seen in the idle window (should be none:
    /// hosts-file answers do not change).
    pub idle_map_updates: usize,
}

/// One change: a new file with one Backend renamed into the directory.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// Rename -> the map-updated line seen by us (bench clock).
    pub seen_ms: f64,
    /// Rename (SystemTime) -> the map-updated line's own timestamp.
    pub log_ms: Option<f64>,
    /// Rename -> the agent's `Backend added` line for it (watch settle + reload, in which
    /// only changed files are parsed and validated).
    pub reload_ms: Option<f64>,
    /// `Backend added` -> map updated (resolve, table, map sync), agent timestamps.
    pub apply_ms: Option<f64>,
    /// `elapsed_ms` of the `Backends applied` line (the reconciler's whole apply).
    pub applied_ms: Option<u64>,
}

fn run_case(plan: &Plan) -> Result<Run> {
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Idle window, then the changes.
fn after_start(plan: &Plan, agent: &mut ScaleAgent, pid: u32, map: &Path) -> Result<AfterStart> {
    let lines_before_idle = agent.logs()?.len();
    let cpu_before = inspect::cpu_seconds(pid)?;
    let idle_started = Instant::now();
    std::thread::sleep(plan.idle);
    let idle_s = idle_started.elapsed().as_secs_f64();
    let idle_cpu_s = inspect::cpu_seconds(pid)? - cpu_before;
    let mem_idle = inspect::memory(pid)?;
    let idle_map_updates = agent.logs()?[lines_before_idle..]
        .iter()
        .filter(|(_, l)| l.contains("Backend address map updated"))
        .count();
    println!(
        "    idle {idle_s:.1} s: {:.2} s CPU, VmRSS {}",
        idle_cpu_s,
        inspect::mib(mem_idle.rss_kib)
    );

    let mut changes = Vec::with_capacity(plan.changes);
    let mut renamed_at = Vec::with_capacity(plan.changes);
    let pauses_ms = (50, 250);
    let mut changes_cpu_s = 0.0;
    if plan.changes > 0 {
        let staging = plan.staging.context("a change run needs a staging dir")?;
        // Whatever the idle window logged is not a reply to a change.
        agent.skip_logged()?;
        for j in 0..plan.changes {
            let name = workload::change_name(j);
            let staged = staging.join(format!("{name}.yaml"));
            let target = plan.backends_dir.join(format!("zz-{name}.yaml"));
            std::fs::write(&staged, workload::xbackend(&name))
                .with_context(|| format!("cannot write {}", staged.display()))?;
            // Spread the changes over the agent's periodic work (hosts-file refresh)
            // instead of hitting it at a fixed phase: 50..250 ms, deterministic.
            let pause = pauses_ms.0 + (j as u64 * 37) % (pauses_ms.1 - pauses_ms.0);
            std::thread::sleep(Duration::from_millis(pause));
            let cpu_before = inspect::cpu_seconds(pid)?;
            let at = SystemTime::now();
            let started = Instant::now();
            std::fs::rename(&staged, &target).with_context(|| {
                format!("cannot rename {} -> {}", staged.display(), target.display())
            })?;
            let (seen, updated) = loop {
                let (seen, line) = agent
                    .wait_for_log("Backend address map updated", CHANGE_TIMEOUT)
                    .with_context(|| format!("change {name}: the map was not updated"))?;
                if field_u64(&line, "added") == Some(1) {
                    break (seen, line);
                }
            };
            let seen_ms = ms(seen.duration_since(started));
            let (_, applied) = agent
                .wait_for_log("Backends applied", CHANGE_TIMEOUT)
                .with_context(|| format!("change {name}: no `Backends applied` line"))?;
            changes_cpu_s += inspect::cpu_seconds(pid)? - cpu_before;
            changes.push(Change {
                seen_ms,
                log_ms: timestamp(&updated).map(|t| ms_between(at, t)),
                applied_ms: field_u64(&applied, "elapsed_ms"),
                ..Change::default()
            });
            renamed_at.push((name, at, timestamp(&updated)));
        }
        println!(
            "    {} changes applied; median {:.0} ms",
            changes.len(),
            logs::Summary::of(&changes.iter().map(|c| c.seen_ms).collect::<Vec<_>>())
                .map_or(0.0, |s| s.median)
        );
    }
    // The `Backend added` line of each change, found afterwards so that waiting for it
    // can never delay the measurement of the map update.
    let all = agent.logs()?;
    for (change, (name, at, updated)) in changes.iter_mut().zip(&renamed_at) {
        let needle = format!("backend={}/{name} ", workload::NAMESPACE);
        let added = all
            .iter()
            .find(|(_, l)| l.contains("Backend added") && l.contains(&needle))
            .and_then(|(_, l)| timestamp(l));
        change.reload_ms = added.map(|t| ms_between(*at, t));
        change.apply_ms = added.zip(*updated).map(|(a, u)| ms_between(a, u));
    }
    let mem_changes = inspect::memory(pid)?;
    let (map_entries_changes, _) = inspect::map_entries(map)?;
    Ok(AfterStart {
        idle_s,
        idle_cpu_s,
        mem_idle,
        changes,
        pauses_ms,
        mem_changes,
        changes_cpu_s,
        map_entries_changes,
        idle_map_updates,
    })
}

/// The agent's start-up as (ms since spawn, message): every line up to the ready line,
/// with the per-Backend `Backend added` lines folded into their first and last.
fn timeline<S: AsRef<str>>(lines: &[S], spawned_at: SystemTime) -> Vec<(f64, String)> {
    let mut out = Vec::new();
    let mut added: Vec<f64> = Vec::new();
    let flush = |out: &mut Vec<(f64, String)>, added: &mut Vec<f64>| {
        if let (Some(first), Some(last)) = (added.first(), added.last()) {
            out.push((*first, format!("Backend added (first of {})", added.len())));
            if added.len() > 1 {
                out.push((*last, format!("Backend added (last of {})", added.len())));
            }
        }
        added.clear();
    };
    for line in lines {
        let line = line.as_ref();
        let Some(at) = timestamp(line) else { continue };
        let ms = ms_between(spawned_at, at);
        let message = message(line);
        if message.starts_with("Backend added") {
            added.push(ms);
            continue;
        }
        flush(&mut out, &mut added);
        let short: String = message.chars().take(110).collect();
        out.push((ms, short));
        if line.contains("ready:") {
            break;
        }
    }
    flush(&mut out, &mut added);
    out
}

/// The part of a text log line after `<timestamp> <LEVEL> <target>: `.
fn message(line: &str) -> &str {
    let mut rest = line;
    for _ in 0..2 {
        rest = rest.trim_start();
        rest = rest.find(char::is_whitespace).map_or("", |i| &rest[i..]);
    }
    let rest = rest.trim_start();
    match rest.split_once(": ") {
        Some((target, msg)) if !target.contains(' ') => msg,
        _ => rest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_strips_timestamp_level_and_target() {
        assert_eq!(
            message("2026-11-23T01:52:01.1Z  INFO redirector::run: ready: programs attached"),
            "ready: programs attached"
        );
        assert_eq!(
            message("2026-11-23T01:52:01.1Z  WARN redirector::reconcile: skipped: x: y"),
            "skipped: x: y"
        );
    }

    #[test]
    fn timeline_folds_backend_added_lines() {
        let t = "2026-11-23T01:52:01.000Z";
        let lines: Vec<String> = [
            format!("{t}  INFO redirector::datapath: programs loaded"),
            format!("{t}  INFO redirector::reconcile: Backend added backend=scale/b1"),
            format!("{t}  INFO redirector::reconcile: Backend added backend=scale/b2"),
            format!("{t}  INFO redirector::run: ready: programs attached"),
            format!("{t}  INFO redirector::reconcile: after ready"),
        ]
        .into();
        let at = logs::parse_rfc3339(t).unwrap();
        let messages: Vec<String> = timeline(&lines, at).into_iter().map(|(_, m)| m).collect();
        assert_eq!(
            messages,
            [
                "programs loaded",
                "Backend added (first of 2)",
                "Backend added (last of 2)",
                "ready: programs attached"
            ]
        );
    }
}
