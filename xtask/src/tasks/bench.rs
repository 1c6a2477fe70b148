//! `cargo xtask bench`: the redirector against HAProxy and against direct TLS, in
//! throw-away namespaces.
//!
//! ```text
//!  pod (cgroup, wrk)              node                               ext
//!  10.200.1.2   --> 10.200.1.1 [HAProxy :18080 | agent :15001] --> 10.200.2.2 nginx :443 (TLS)
//! ```
//!
//! The client always dials `api.redirector.test:443`: with TLS itself (direct), or in
//! plaintext, sent to HAProxy by a DNAT rule in the pod or to the agent's proxy by its eBPF
//! hooks; both proxies originate TLS to nginx and verify its certificate. Repetitions are
//! interleaved case by case so a drift of the machine hits every case alike, and every
//! number is a median. A case that fails is reported failed and the others still run.

mod case;
mod context;
mod measure;
mod report;
mod servers;
mod testbed;
mod tools;
mod wrk;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{Context as _, Result, bail};
use context::{commands, loadavg, machine};
use report::Case;
use testbed::run;
use tools::Tools;
use xtask::netlab::agent;

use super::{cargo, ebpf, target_dir, workspace_root};

/// `cargo xtask bench` options.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Length of every wrk run (`10s`, `1m`; default 10s, 3s with --quick).
    #[arg(long)]
    duration: Option<String>,
    /// Interleaved repetitions; the report gives medians (default 3, 1 with --quick).
    #[arg(long)]
    reps: Option<u32>,
    /// Smoke run: 3 s runs, one repetition, report in bench/results-quick.md.
    #[arg(long)]
    quick: bool,
    /// Where to write the Markdown report (default bench/results.md).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Benchmark this redirector binary instead of building target/release/redirector.
    #[arg(long)]
    redirector_bin: Option<PathBuf>,
}

/// Where HAProxy listens (node, pod-facing address).
const HAPROXY_PORT: u16 = 18080;
/// The service's port, dialed by every case.
const SERVICE_PORT: u16 = 443;

pub fn bench(args: &BenchArgs) -> Result<ExitCode> {
    super::require_root("the benchmark loads eBPF programs and creates network namespaces")?;
    let duration_s = match &args.duration {
        Some(text) => parse_duration(text)?,
        None if args.quick => 3,
        None => 10,
    };
    let reps = args.reps.unwrap_or(if args.quick { 1 } else { 3 }).max(1);
    let out = args.out.clone().unwrap_or_else(|| {
        workspace_root().join(if args.quick {
            "bench/results-quick.md"
        } else {
            "bench/results.md"
        })
    });

    let tools = tools::ensure()?;
    let redirector = build_redirector(args);
    if let Ok(bin) = &redirector {
        agent::use_redirector_bin(bin.clone());
    }

    let plan = Plan {
        duration_s,
        reps,
        tools: &tools,
    };
    let mut setup = Vec::new();
    let load_before = loadavg();
    let results = run(
        &plan,
        redirector.as_deref().map_err(Clone::clone),
        &mut setup,
    )?;

    let mut ctx = report::Context {
        title_note: if args.quick {
            " (quick smoke run)".into()
        } else {
            String::new()
        },
        machine: machine(
            &tools,
            redirector.as_deref().ok(),
            args.redirector_bin.is_some(),
        ),
        duration_s,
        reps,
        setup,
        commands: commands(&plan),
    };
    ctx.machine.push((
        "load average (1, 5, 15 min)".into(),
        format!(
            "{load_before} before the runs, {} after (anything else running on the machine skews every case)",
            loadavg()
        ),
    ));
    let md = report::render(&results, &ctx);
    println!("\n{md}");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(&out, &md).with_context(|| format!("cannot write {}", out.display()))?;
    println!("bench: report written to {}", out.display());
    if !(results.complete(Case::Direct) && results.complete(Case::Haproxy)) {
        eprintln!("bench: a reference case (direct TLS or HAProxy) failed: the setup is broken");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

struct Plan<'a> {
    duration_s: u64,
    reps: u32,
    tools: &'a Tools,
}

impl Plan<'_> {
    /// How long one wrk run may take before it counts as hung.
    fn wrk_timeout(&self) -> Duration {
        Duration::from_secs(self.duration_s + 30)
    }
}

/// `10s`, `2m` or plain seconds.
fn parse_duration(text: &str) -> Result<u64> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix('s') {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60)
    } else {
        (text, 1)
    };
    let value: u64 = number
        .parse()
        .with_context(|| format!("--duration {text:?}: expected e.g. 10s or 1m"))?;
    if value == 0 {
        bail!("--duration must be at least 1s");
    }
    Ok(value * scale)
}

/// The release agent (and its eBPF object), or why there is none: a failed build fails
/// only the redirector case, the references still run.
fn build_redirector(args: &BenchArgs) -> Result<PathBuf, String> {
    if let Some(bin) = &args.redirector_bin {
        return std::fs::canonicalize(bin)
            .map_err(|e| format!("--redirector-bin {}: {e}", bin.display()));
    }
    println!("bench: building the eBPF object and the agent (release)");
    ebpf::build_ebpf()
        .map_err(|e| format!("the eBPF build failed: {e} (output above the report)"))?;
    let status = cargo()
        .args(["build", "--release", "-p", "redirector"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "`cargo build --release -p redirector` failed ({status}; the compiler output is above the report)"
        ));
    }
    Ok(target_dir().join("release/redirector"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), 10);
        assert_eq!(parse_duration("2m").unwrap(), 120);
        assert_eq!(parse_duration("7").unwrap(), 7);
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("fast").is_err());
    }
}
