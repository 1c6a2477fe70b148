//! `cargo xtask bench-load`: the agent under load and faults (issue 13), in throw-away
//! namespaces.
//!
//! 1. 10,000 client connections held through the proxy together, for a TCP and for an
//!    HTTP Backend, every one served while all are open; the agent's memory.
//! 2. Slow peers with a short `--idle-timeout`: clients that never read, an upstream
//!    that never reads, clients that trickle; memory stays bounded, idle ones are closed
//!    and counted.
//! 3. An upstream that swallows SYNs, under load, with `--connect-timeout 2s`: when its
//!    clients learn of it, and whether a healthy Backend's rate and latency change.
//!
//! The client and the TCP servers are `loadgen` (tokio: one process holds 10,000
//! sockets); the HTTP upstream is nginx. See `bed.rs` for the topology. The report goes
//! to bench/load.md and stdout.

mod bed;
mod buffers;
mod held;
mod hole;
mod probe;
mod report;
mod servers;
mod slow;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use xtask::netlab::agent;

use super::{cargo, check_status, ebpf, machine, numbers::thousands, target_dir, workspace_root};
use bed::Bed;

/// `cargo xtask bench-load` options.
#[derive(clap::Args, Debug)]
pub struct BenchLoadArgs {
    /// Connections held at once (part 1).
    #[arg(long, default_value_t = 10_000)]
    conns: usize,
    /// Seconds they stay open between the two exchanges (part 1; the HTTP path closes
    /// a connection idle for 30 s, so keep the whole part below that).
    #[arg(long, default_value_t = 5)]
    hold_secs: u64,
    /// Connections per slow-peer case (part 2).
    #[arg(long, default_value_t = 1_000)]
    slow_conns: usize,
    /// Only these slow-peer cases, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_enum)]
    slow_cases: Vec<slow::Kind>,
    /// `--idle-timeout` of the agent in part 2, seconds.
    #[arg(long, default_value_t = 5)]
    idle_timeout_secs: u64,
    /// `--connect-timeout` of the agent in part 3, seconds.
    #[arg(long, default_value_t = 2)]
    connect_timeout_secs: u64,
    /// Churn workers per black-holed Backend (part 3).
    #[arg(long, default_value_t = 200)]
    hole_workers: usize,
    /// Keep-alive connections of each rate run on a healthy Backend (part 3).
    #[arg(long, default_value_t = 16)]
    rate_conns: usize,
    /// Length of each rate run, seconds (part 3).
    #[arg(long, default_value_t = 10)]
    rate_secs: u64,
    /// Only these parts, comma-separated: held, slow, hole (default: all). A partial
    /// run writes bench/load-partial.md unless --out says otherwise.
    #[arg(long, value_delimiter = ',', value_enum)]
    parts: Vec<Part>,
    /// Where to write the Markdown report (default bench/load.md).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Use this redirector binary instead of building target/release/redirector.
    #[arg(long)]
    redirector_bin: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Held,
    Slow,
    Hole,
}

/// RLIMIT_NOFILE given to everything the bench starts (agent, loadgen, nginx inherit
/// it): 10,000 held connections cost the agent 20,000 descriptors (client and upstream
/// sockets), more than the usual hard limit of a shell here (20,000).
const NOFILE: u64 = 262_144;

pub fn bench_load(args: &BenchLoadArgs) -> Result<ExitCode> {
    super::require_root("the benchmark loads eBPF programs and creates network namespaces")?;
    let parts = if args.parts.is_empty() {
        vec![Part::Held, Part::Slow, Part::Hole]
    } else {
        args.parts.clone()
    };
    let nginx = servers::nginx_bin()?;
    let (redirector, loadgen) = build(args)?;
    agent::use_redirector_bin(redirector.clone());
    let limits = raise_nofile()?;
    let load_before = machine::load_average().unwrap_or_else(|| "?".into());

    let bed = Bed::new(&loadgen, &nginx)?;
    let facts = facts(&bed);
    let held = if parts.contains(&Part::Held) {
        held::run(&bed, args, limits.after.1)
    } else {
        Vec::new()
    };
    let slow = if parts.contains(&Part::Slow) {
        slow::run(&bed, args)
    } else {
        Vec::new()
    };
    let hole = parts.contains(&Part::Hole).then(|| hole::run(&bed, args));
    bed.uninstall();
    drop(bed);

    let mut rows = machine::agent_rows(machine::cpus(), &redirector);
    rows.push((
        "memory".into(),
        machine::memory_total().unwrap_or_else(|| "?".into()),
    ));
    rows.push((
        "load average (1, 5, 15 min)".into(),
        format!(
            "{load_before} before, {} after (other work on the machine, e.g. builds and \
             tests of concurrent sessions, shares the 2 CPUs and skews rates and latencies)",
            machine::load_average().unwrap_or_else(|| "?".into())
        ),
    ));
    rows.push(("RLIMIT_NOFILE".into(), nofile_fact(&limits)));
    rows.extend(facts);
    let ctx = report::Context {
        machine: rows,
        command: "cargo xtask bench-load".into(),
        nofile: limits.after.1,
        conns: args.conns,
        hold_secs: args.hold_secs,
        slow_conns: args.slow_conns,
        idle_timeout_secs: args.idle_timeout_secs,
        connect_timeout_secs: args.connect_timeout_secs,
        hole_workers: args.hole_workers,
        rate_conns: args.rate_conns,
        rate_secs: args.rate_secs,
    };
    let md = report::render(&ctx, &held, &slow, hole.as_ref());
    let partial = parts.len() < 3 || !args.slow_cases.is_empty();
    let out = args.out.clone().unwrap_or_else(|| {
        workspace_root().join(if partial {
            "bench/load-partial.md"
        } else {
            "bench/load.md"
        })
    });
    write(&out, &md)?;
    println!("\n{md}");
    println!("bench-load: report written to {}", out.display());
    let failed = held.iter().any(Result::is_err)
        || slow.iter().any(Result::is_err)
        || hole.as_ref().is_some_and(Result::is_err);
    Ok(if failed {
        println!("bench-load: a case failed (see the report)");
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// The release agent (with its eBPF object) or `--redirector-bin`, and release loadgen.
fn build(args: &BenchLoadArgs) -> Result<(PathBuf, PathBuf)> {
    let redirector = match &args.redirector_bin {
        Some(bin) => std::fs::canonicalize(bin)
            .with_context(|| format!("--redirector-bin {}", bin.display()))?,
        None => {
            println!("bench-load: building the eBPF object and the agent (release)");
            ebpf::build_ebpf()?;
            check_status(cargo().args(["build", "--release", "-p", "redirector"]))?;
            target_dir().join("release/redirector")
        }
    };
    check_status(cargo().args(["build", "--release", "-p", "xtask", "--bin", "loadgen"]))?;
    Ok((redirector, target_dir().join("release/loadgen")))
}

/// Raises this process's RLIMIT_NOFILE towards [`NOFILE`] (children inherit it): the
/// hard limit if the kernel lets us (CAP_SYS_RESOURCE), the soft one to the hard one in
/// any case. Returns the limits before and after.
fn raise_nofile() -> Result<Limits> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } != 0 {
        anyhow::bail!("getrlimit: {}", std::io::Error::last_os_error());
    }
    let before = (limit.rlim_cur, limit.rlim_max);
    let set = |soft: u64, hard: u64| {
        let wanted = libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads one rlimit struct we own.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const wanted) == 0 }
    };
    let high = limit.rlim_max.max(NOFILE);
    let after = if set(high, high) {
        (high, high)
    } else {
        // No CAP_SYS_RESOURCE (some sandboxes drop it even for root): keep the hard limit.
        eprintln!(
            "bench-load: cannot raise the hard RLIMIT_NOFILE to {NOFILE} ({}); using {}",
            std::io::Error::last_os_error(),
            limit.rlim_max
        );
        anyhow::ensure!(
            set(limit.rlim_max, limit.rlim_max),
            "cannot raise the soft RLIMIT_NOFILE: {}",
            std::io::Error::last_os_error()
        );
        (limit.rlim_max, limit.rlim_max)
    };
    Ok(Limits { before, after })
}

/// RLIMIT_NOFILE (soft, hard) of the bench before and after [`raise_nofile`].
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub before: (u64, u64),
    pub after: (u64, u64),
}

/// Kernel settings that bound how many connections fit, as the bench's namespaces see
/// them (each namespace has its own; new ones start from the kernel defaults).
fn facts(bed: &Bed) -> Vec<(String, String)> {
    let t = &bed.topology;
    let ports = |ns| probe::sysctl_in(ns, "/proc/sys/net/ipv4/ip_local_port_range");
    let host_ports = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .map(|s| s.trim().replace('\t', " "))
        .unwrap_or_else(|_| "?".into());
    vec![
        (
            "ephemeral ports (ip_local_port_range)".into(),
            format!(
                "host {host_ports}; pod netns {}; node netns {} (defaults, not changed: \
                 10,000 connections from one pod address to one proxy address fit, as do \
                 the agent's 10,000 upstream connections to one server)",
                ports(&t.pod),
                ports(&t.node)
            ),
        ),
        (
            "net.core.somaxconn (node netns)".into(),
            probe::sysctl_in(&t.node, "/proc/sys/net/core/somaxconn"),
        ),
        (
            "conntrack".into(),
            format!(
                "nf_conntrack_max {} (host); the bench's namespaces have no netfilter rules, \
                 so nothing is tracked (count in the node netns shown in part 1)",
                std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_max")
                    .map(|s| s.trim().to_owned())
                    .unwrap_or_else(|_| "? (module not loaded)".into())
            ),
        ),
        (
            "upstreams".into(),
            format!(
                "nginx {} (1 worker, worker_connections 32768) and `loadgen serve`, in ext",
                nginx_version()
            ),
        ),
    ]
}

fn nofile_fact(limits: &Limits) -> String {
    let (soft, hard) = limits.before;
    let mut text = format!(
        "the bench's shell had {} soft / {} hard; everything the bench starts got {} / {}",
        thousands(soft),
        thousands(hard),
        thousands(limits.after.0),
        thousands(limits.after.1)
    );
    if limits.after.1 < NOFILE {
        text.push_str(&format!(
            " (raising the hard limit to {} was refused: this machine's root lacks \
             CAP_SYS_RESOURCE, so no process the bench starts can have more)",
            thousands(NOFILE)
        ));
    }
    text.push_str("; the agent raises its soft limit to the hard one and logs it");
    text
}

fn nginx_version() -> String {
    std::process::Command::new("nginx")
        .arg("-v")
        .env("PATH", super::packages::path_with_sbin())
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stderr)
                .trim()
                .replace("nginx version: ", "")
        })
        .unwrap_or_else(|| "?".into())
}

fn write(out: &Path, md: &str) -> Result<()> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(out, md).with_context(|| format!("cannot write {}", out.display()))
}
