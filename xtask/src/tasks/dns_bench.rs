//! `cargo xtask bench-dns`: what DNS capture costs a pod, measured with dnsperf.
//!
//! dnsperf in the pod asks NSD (a real authoritative server, in the ext namespace) for
//! names at `10.200.2.2:53`. Four cases, interleaved in one run of the bench, with one bed
//! and one agent (release build, 100 Backends from a directory, hooks on the pod cgroup
//! only; see [`bed`]):
//!
//! 1. names no Backend declares, not captured: the baseline;
//! 2. the same names, captured: the agent forwards them to NSD and relays the answers;
//! 3. Backend names, captured: the agent answers them with virtual addresses;
//! 4. Backend names, not captured: NSD answers them (for reference).
//!
//! Each gets queries per second (dnsperf unthrottled) and p50/p99 latency (dnsperf at a
//! fixed rate, every response's latency from `-v`), CPU time of the agent, NSD, dnsperf
//! and the machine, and the agent's counters as proof of who answered. Medians over the
//! repetitions and every run's figures go to bench/dns.md and stdout.

mod bed;
mod dnsperf;
mod measure;
mod names;
mod nsd;
mod raw;
mod report;
mod usage;

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, ensure};
use xtask::netlab::agent;

use super::{cargo, check_status, ebpf, machine, packages, target_dir, workspace_root};
use bed::{Bins, DnsBed};
use measure::Plan;

/// `cargo xtask bench-dns` options.
#[derive(clap::Args, Debug)]
pub struct BenchDnsArgs {
    /// Interleaved repetitions of every case; the report gives medians.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Length of each throughput run, seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Length of each latency run, seconds.
    #[arg(long, default_value_t = 5)]
    latency_seconds: u64,
    /// Fixed query rate of the latency runs (dnsperf -Q), queries per second.
    #[arg(long, default_value_t = 2000)]
    latency_qps: u64,
    /// Queries in flight at most (dnsperf -q).
    #[arg(long, default_value_t = 100)]
    outstanding: u32,
    /// Unmeasured run per case before the repetitions, seconds (0: none).
    #[arg(long, default_value_t = 2)]
    warmup_seconds: u64,
    /// Backends (distinct hostnames) the agent serves, at most 250.
    #[arg(long, default_value_t = 100)]
    backends: usize,
    /// A run during which other processes, not niced, used more than this share of one
    /// CPU (percent) is discarded and done again: on a shared machine, it measured them.
    #[arg(long, default_value_t = 25.0)]
    max_foreign_cpu: f64,
    /// How often one run may be done again for --max-foreign-cpu; the last is kept.
    #[arg(long, default_value_t = 2)]
    retries: usize,
    /// Passed to the agent as `--worker-threads` (default: its own, one per CPU).
    #[arg(long)]
    worker_threads: Option<u16>,
    /// Where to write the Markdown report (default bench/dns.md).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Use this redirector binary instead of building target/release/redirector.
    #[arg(long)]
    redirector_bin: Option<PathBuf>,
}

pub fn bench_dns(args: &BenchDnsArgs) -> Result<ExitCode> {
    super::require_root("the benchmark loads eBPF programs and creates network namespaces")?;
    ensure!(args.reps >= 1, "--reps: at least 1");
    ensure!(
        args.seconds >= 1 && args.latency_seconds >= 1,
        "runs last at least 1 s"
    );
    ensure!(args.latency_qps >= 1, "--latency-qps: at least 1");
    ensure!(
        (1..=names::MAX_NAMES).contains(&args.backends),
        "--backends: 1..={}",
        names::MAX_NAMES
    );
    packages::install_missing("bench-dns", missing_packages)
        .context("installing dnsperf and NSD")?;
    let bins = build(args)?;
    agent::use_redirector_bin(bins.redirector.clone());
    let agent_args: Vec<String> = args
        .worker_threads
        .map(|n| vec!["--worker-threads".to_owned(), n.to_string()])
        .unwrap_or_default();
    let plan = Plan {
        reps: args.reps,
        seconds: args.seconds,
        latency_seconds: args.latency_seconds,
        latency_qps: args.latency_qps,
        outstanding: args.outstanding,
        warmup_seconds: args.warmup_seconds,
        max_foreign: args.max_foreign_cpu / 100.0,
        retries: args.retries,
    };

    let load_before = machine::load_average().unwrap_or_else(|| "?".into());
    println!(
        "bench-dns: setting up the bed (NSD, agent with {} Backends)",
        args.backends
    );
    let mut bed = DnsBed::new(&bins, args.backends, &agent_args)?;
    println!(
        "bench-dns: agent ready (pid {}); names check out",
        bed.agent_pid
    );
    let runs = measure::run_all(&bed, &bins, &plan);
    bed.stop_agent()?;
    drop(bed);

    let ctx = report::Context {
        plan,
        backends: args.backends,
        agent_args,
        machine: machine_rows(&bins, load_before),
    };
    let md = report::render(&ctx, &runs);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| workspace_root().join("bench/dns.md"));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(&out, &md).with_context(|| format!("cannot write {}", out.display()))?;
    println!("\n{md}");
    println!("bench-dns: report written to {}", out.display());
    Ok(if runs.iter().all(|r| r.outcome.is_ok()) {
        ExitCode::SUCCESS
    } else {
        println!("bench-dns: a run failed (see the report)");
        ExitCode::from(2)
    })
}

/// The Debian packages of dnsperf and NSD, when they are not on `PATH`.
fn missing_packages() -> Vec<&'static str> {
    [("dnsperf", "dnsperf"), ("nsd", "nsd")]
        .into_iter()
        .filter(|(program, _)| packages::which(program).is_none())
        .map(|(_, package)| package)
        .collect()
}

/// `target/release/redirector` (with its eBPF object) or `--redirector-bin`, and where
/// dnsperf and NSD are.
fn build(args: &BenchDnsArgs) -> Result<Bins> {
    let redirector = match &args.redirector_bin {
        Some(bin) => std::fs::canonicalize(bin)
            .with_context(|| format!("--redirector-bin {}", bin.display()))?,
        None => {
            println!("bench-dns: building the eBPF object and the agent (release)");
            ebpf::build_ebpf()?;
            check_status(cargo().args(["build", "--release", "-p", "redirector"]))?;
            target_dir().join("release/redirector")
        }
    };
    let found = |program: &str| {
        packages::which(program).with_context(|| format!("{program} is not on PATH"))
    };
    Ok(Bins {
        redirector,
        dnsperf: found("dnsperf")?,
        nsd: found("nsd")?,
    })
}

/// Machine facts, and the versions of the programs measured.
fn machine_rows(bins: &Bins, load_before: String) -> Vec<(String, String)> {
    let mut rows = machine::agent_rows(machine::cpus(), &bins.redirector);
    rows.insert(2, ("CPU cores".into(), machine::cpu_count().to_string()));
    rows.push(("dnsperf".into(), package_version("dnsperf")));
    rows.push(("NSD".into(), package_version("nsd")));
    // Other work on the machine shares its CPUs with the bench: see "rest CPU".
    rows.push((
        "load average at the start (1, 5, 15 min)".into(),
        load_before,
    ));
    rows.push((
        "load average at the end (1, 5, 15 min)".into(),
        machine::load_average().unwrap_or_else(|| "?".into()),
    ));
    rows
}

/// The installed Debian version of `package`, `?` if unknown.
fn package_version(package: &str) -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", package])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| format!("{package} {}", String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_else(|| "?".into())
}
