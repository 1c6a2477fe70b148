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

mod after_start;
mod case;
pub(super) mod inspect;
mod launch;
mod logs;
mod report;
mod results;
mod timeline;
mod workload;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use xtask::netlab::agent;

use super::{cargo, check_status, ebpf, machine, target_dir, workspace_root};
use case::{Plan, run_case};

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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
