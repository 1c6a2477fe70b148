//! `cargo xtask bench`: the redirector against HAProxy and against direct TLS, in
//! throw-away namespaces, for both kinds of Backend.
//!
//! ```text
//!  pod (cgroup, wrk)              node                                                    ext
//!  10.200.1.2   --> 10.200.1.1 [HAProxy :18080 tcp, :18081 http, :18082 plain | agent :15001] --> 10.200.2.2 nginx :443 (TLS), :80
//! ```
//!
//! The client always dials `api.redirector.test:443`: with TLS itself (direct), or in
//! plaintext, sent to HAProxy by a DNAT rule in the pod or to the agent's proxy by its eBPF
//! hooks; both proxies originate TLS to nginx and verify its certificate. A TCP Backend
//! (byte splice) is held against HAProxy `mode tcp`, an HTTP Backend (hyper, pooled
//! upstream connections) against HAProxy `mode http` with `http-reuse always`: each
//! comparison is between proxies doing the same work. Repetitions are interleaved case by
//! case so a drift of the machine hits every case alike, and every number is a median. A
//! case that fails is reported failed and the others still run.
//!
//! Plaintext HTTP to port 80 is measured too: straight to nginx, through HAProxy `mode
//! tcp` with splice (DNAT of port 80), and through a Backend with no `tls` (bytes
//! forwarded unchanged). After the repetitions the same run measures
//! the ceilings (iperf3 over the same path, `openssl speed` and the agent's rustls
//! provider on one core), and every run appends an entry to bench/history.md.

mod build;
mod case;
mod ceilings;
mod context;
mod history;
mod measure;
mod report;
pub(super) mod servers;
mod testbed;
mod tools;
mod wrk;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{Context as _, Result, bail};
use context::{commands, loadavg, machine};
use report::Case;
use testbed::run;
use tools::Tools;
use wrk::Workload;
use xtask::netlab::agent;

use super::workspace_root;

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
    /// Only these cases, comma-separated: direct, haproxy-tcp, redirector-tcp,
    /// haproxy-http, redirector-http, direct-plain, haproxy-plain, redirector-plain, or
    /// the groups tcp and http (each with direct, the bulk reference), plain, haproxy,
    /// redirector, all (default all).
    #[arg(long, value_name = "LIST")]
    cases: Option<String>,
    /// Only these workloads, comma-separated: keepalive, close, bulk, all (default all).
    #[arg(long, value_name = "LIST")]
    workloads: Option<String>,
    /// Where to write the Markdown report (default bench/results.md for a full run;
    /// bench/results-quick.md, not committed, with --quick, --cases or --workloads).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Benchmark this redirector binary instead of building target/release/redirector.
    #[arg(long)]
    redirector_bin: Option<PathBuf>,
    /// What variant is measured (e.g. "aws-lc-rs", "splice(2)"): printed in the report
    /// header and recorded in the history.
    #[arg(long, value_name = "TEXT")]
    label: Option<String>,
    /// The history file every run appends its entry to (default bench/history.md).
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// Skip the ceilings (iperf3, openssl speed, tls_speed).
    #[arg(long)]
    no_ceilings: bool,
    /// One more argument for `redirector run` in every redirector case (repeatable),
    /// e.g. `--agent-arg=--kernel-tls=require` to measure kernel TLS where the kernel has
    /// it (where it has none the agent does not start, and the run says so).
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    agent_args: Vec<String>,
    /// TCP congestion control of the bench's namespaces (pod, node, ext: a sysctl of
    /// each namespace, the host's own is left alone), or `inherit` for whatever new
    /// namespaces get from the host. Default cubic, Linux's default: with bbr and no fq
    /// qdisc (veth has none) every sender paces in software, which halves plaintext
    /// bulk on one hop and costs a proxy's two hops more (bench/README.md).
    #[arg(long, value_name = "NAME", default_value = "cubic")]
    congestion_control: String,
}

/// Where HAProxy `mode tcp` listens (node, pod-facing address).
const HAPROXY_TCP_PORT: u16 = 18080;
/// Where HAProxy `mode http` listens (node, pod-facing address).
const HAPROXY_HTTP_PORT: u16 = 18081;
/// Where HAProxy's plaintext `mode tcp` (splice) listens (node, pod-facing address).
const HAPROXY_PLAIN_PORT: u16 = 18082;
/// The service's TLS port, dialed by every case but the plaintext ones (port 80).
const SERVICE_PORT: u16 = 443;

pub fn bench(args: &BenchArgs) -> Result<ExitCode> {
    super::require_root("the benchmark loads eBPF programs and creates network namespaces")?;
    let duration_s = match &args.duration {
        Some(text) => parse_duration(text)?,
        None if args.quick => 3,
        None => 10,
    };
    let reps = args.reps.unwrap_or(if args.quick { 1 } else { 3 }).max(1);
    let cases = match &args.cases {
        Some(text) => Case::select(text)?,
        None => Case::ALL.to_vec(),
    };
    let workloads = match &args.workloads {
        Some(text) => Workload::select(text)?,
        None => Workload::ALL.to_vec(),
    };
    // Only a full run may replace the committed report.
    let partial = cases.len() < Case::ALL.len() || workloads.len() < Workload::ALL.len();
    let out = args.out.clone().unwrap_or_else(|| {
        workspace_root().join(if args.quick || partial {
            "bench/results-quick.md"
        } else {
            "bench/results.md"
        })
    });

    let tools = tools::ensure()?;
    let redirector = if cases.iter().any(|c| c.is_redirector()) {
        build::redirector(args)
    } else {
        Err("not built, no redirector case was selected (--cases)".to_owned())
    };
    if let Ok(bin) = &redirector {
        agent::use_redirector_bin(bin.clone());
    }
    let tls_speed = if args.no_ceilings {
        Err("not built (--no-ceilings)".to_owned())
    } else {
        build::tls_speed()
    };

    let plan = Plan {
        duration_s,
        reps,
        tools: &tools,
        cases,
        workloads,
        ceilings: !args.no_ceilings,
        tls_speed,
        agent_args: &args.agent_args,
        congestion_control: (args.congestion_control != "inherit")
            .then_some(args.congestion_control.as_str()),
    };
    let mut setup = Vec::new();
    let load_before = loadavg();
    let (results, ceilings) = run(
        &plan,
        redirector.as_deref().map_err(Clone::clone),
        &mut setup,
    )?;

    let mut ctx = report::Context {
        title_note: title_note(args.quick, partial.then_some(&plan)),
        machine: machine(
            &tools,
            redirector.as_deref().map_err(String::as_str),
            args.redirector_bin.is_some(),
        ),
        duration_s,
        reps,
        setup,
        commands: commands(&plan),
    };
    let label = args.label.as_deref().unwrap_or("");
    ctx.machine.insert(
        0,
        (
            "label".into(),
            if label.is_empty() {
                "(none; --label names the variant measured)".into()
            } else {
                label.to_owned()
            },
        ),
    );
    if let Some(c) = &ceilings {
        ctx.machine
            .push(("rustls crypto provider".into(), c.provider()));
    }
    ctx.machine.push((
        "load average (1, 5, 15 min)".into(),
        format!(
            "{load_before} before the runs, {} after (anything else running on the machine skews every case)",
            loadavg()
        ),
    ));
    let md = report::render(&results, ceilings.as_ref(), &ctx);
    println!("\n{md}");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(&out, &md).with_context(|| format!("cannot write {}", out.display()))?;
    println!("bench: report written to {}", out.display());
    let history_file = args
        .history
        .clone()
        .unwrap_or_else(|| workspace_root().join("bench/history.md"));
    let head = history::head(args, &plan, &redirector, &out);
    history::append(
        &history_file,
        &report::history_entry(&results, ceilings.as_ref(), &head),
    )?;
    println!("bench: run recorded in {}", history_file.display());
    let broken: Vec<&str> = plan
        .cases
        .iter()
        .filter(|c| c.is_reference() && !results.complete(**c))
        .map(|c| c.label())
        .collect();
    if !broken.is_empty() {
        eprintln!(
            "bench: a reference case failed ({}): the setup is broken",
            broken.join(", ")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// What the run does: how long, how often, which cases and workloads.
struct Plan<'a> {
    duration_s: u64,
    reps: u32,
    tools: &'a Tools,
    /// In run order (`--cases`).
    cases: Vec<Case>,
    /// Extra arguments of every agent (`--agent-arg`).
    agent_args: &'a [String],
    /// Set in every namespace of the bed, or `None` to keep the host's (`inherit`).
    congestion_control: Option<&'a str>,
    /// In run order (`--workloads`).
    workloads: Vec<Workload>,
    /// Whether to measure the ceilings after the repetitions (not `--no-ceilings`).
    ceilings: bool,
    /// `examples/tls_speed`, or why there is none.
    tls_speed: Result<PathBuf, String>,
}

impl Plan<'_> {
    /// How long one wrk run may take before it counts as hung.
    fn wrk_timeout(&self) -> Duration {
        Duration::from_secs(self.duration_s + 30)
    }
}

/// What the title says about a run that is not a full one.
fn title_note(quick: bool, partial: Option<&Plan>) -> String {
    let mut notes = Vec::new();
    if quick {
        notes.push("quick smoke run".to_owned());
    }
    if let Some(plan) = partial {
        notes.push(format!(
            "partial run: --cases {} --workloads {}",
            plan.cases
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(","),
            plan.workloads
                .iter()
                .map(|w| w.name())
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
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
