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

mod report;
mod servers;
mod tools;
mod wrk;

use std::{
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, ExitCode},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use report::{Case, Results, Sample};
use servers::{Dnat, HOSTNAME, Haproxy, Nginx, Pki};
use tools::Tools;
use wrk::Workload;
use xtask::netlab::{
    Bpffs, ChildGuard, EXT_V4, NODE_POD_V4, Topology,
    agent::{self, Agent, AgentConfig},
};

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

/// Builds the test bed, runs every repetition, tears everything down (guards, also on
/// error) and returns what was measured.
fn run(plan: &Plan, redirector: Result<&Path, String>, setup: &mut Vec<String>) -> Result<Results> {
    let mut results = Results::default();
    if let Err(reason) = &redirector {
        results.give_up(Case::Redirector, reason.clone());
    }
    // Declaration order is the reverse of drop order: the temp dir outlives the
    // namespaces, which outlive the servers, the bpffs and the agent.
    let dir = tempfile::Builder::new().prefix("rdbench").tempdir()?;
    let pki = Pki::generate().context("generating the test CA")?;
    pki.write(dir.path())?;

    let topology = Topology::new()?;
    let hosts: [(IpAddr, &str); 1] = [(EXT_V4.into(), HOSTNAME)];
    topology.pod.set_hosts(&hosts)?;
    topology.node.set_hosts(&hosts)?;
    // Connection-per-request runs open tens of thousands of connections from the pod (and
    // from the node, for the proxies' upstream side): widen the port range and let
    // TIME_WAIT ports be reused, or later runs would fail on port exhaustion.
    for ns in [&topology.pod, &topology.node] {
        servers::sysctl(
            ns,
            &[
                "net.ipv4.ip_local_port_range=1024 65535",
                "net.ipv4.tcp_tw_reuse=1",
            ],
        )?;
    }
    let service = SocketAddr::new(EXT_V4.into(), SERVICE_PORT);
    let haproxy_addr = SocketAddr::new(NODE_POD_V4.into(), HAPROXY_PORT);

    println!("bench: starting nginx in the ext namespace ({service})");
    let nginx = Nginx::start(&plan.tools.nginx, &topology.ext, dir.path(), service)?;
    println!("bench: starting HAProxy in the node namespace ({haproxy_addr})");
    let haproxy = match Haproxy::start(
        &plan.tools.haproxy,
        &topology.node,
        dir.path(),
        haproxy_addr,
        service,
    ) {
        Ok(h) => Some(h),
        Err(e) => {
            results.give_up(Case::Haproxy, format!("{e:#}"));
            None
        }
    };
    let dnat = match Dnat::install(&plan.tools.nat, &topology.pod, service, haproxy_addr) {
        Ok(d) => Some(d),
        Err(e) => {
            results.give_up(Case::Haproxy, format!("cannot set up the DNAT: {e:#}"));
            None
        }
    };
    let bpffs = Bpffs::new()?;
    let backends = dir.path().join("backends");
    servers::write_backend_dir(&backends, &pki.ca_pem)?;
    let check_problems = redirector
        .as_ref()
        .ok()
        .and_then(|_| check_backends(&backends));

    setup.extend(describe(plan, &nginx, haproxy.as_ref()));
    let bed = Bed {
        topology: &topology,
        nginx: &nginx,
        haproxy: haproxy.as_ref(),
        dnat: dnat.as_ref(),
        bpffs: &bpffs,
        backends: &backends,
        check_problems,
    };
    let mut agent_threads = None;
    for rep in 1..=plan.reps {
        for case in Case::ALL {
            if results.is_dead(case) {
                continue;
            }
            println!("\n==> repetition {rep}/{}: {}", plan.reps, case.label());
            if let Err(e) = bed.run_case(plan, rep, case, &mut results, &mut agent_threads) {
                results.give_up(case, format!("{e:#}"));
                if case == Case::Redirector {
                    // The hooks may still be attached: every later pod connect to the
                    // service would be redirected. Stop rather than measure that.
                    bed.ensure_detached()?;
                }
            }
        }
    }
    if let Some(n) = agent_threads {
        setup.push(format!(
            "redirector agent: {n} threads (tokio runtime defaults)"
        ));
    }
    if let Some(problems) = &bed.check_problems {
        setup.push(format!(
            "`redirector check` on the Backend directory: {problems}"
        ));
    }
    Ok(results)
}

/// What one case needs from the test bed.
struct Bed<'a> {
    topology: &'a Topology,
    nginx: &'a Nginx,
    haproxy: Option<&'a Haproxy>,
    dnat: Option<&'a Dnat>,
    bpffs: &'a Bpffs,
    backends: &'a Path,
    /// What `redirector check` said about the Backend directory, if it objected.
    check_problems: Option<String>,
}

impl Bed<'_> {
    /// One repetition of one case: switch it on, run every workload, switch it off.
    fn run_case(
        &self,
        plan: &Plan,
        rep: u32,
        case: Case,
        results: &mut Results,
        agent_threads: &mut Option<u32>,
    ) -> Result<()> {
        match case {
            Case::Direct => {
                self.ensure_detached()?;
                self.workloads(plan, rep, case, None, results, || None);
                Ok(())
            }
            Case::Haproxy => {
                self.ensure_detached()?;
                let (Some(haproxy), Some(dnat)) = (self.haproxy, self.dnat) else {
                    bail!("HAProxy is not running");
                };
                dnat.enable()?;
                self.workloads(plan, rep, case, Some(haproxy.pid()), results, || None);
                dnat.disable()
            }
            Case::Redirector => self.run_redirector(plan, rep, results, agent_threads),
        }
    }

    /// The agent lives for one repetition: started, measured, stopped and uninstalled, so
    /// the other cases run with no program attached to the pod cgroup.
    fn run_redirector(
        &self,
        plan: &Plan,
        rep: u32,
        results: &mut Results,
        agent_threads: &mut Option<u32>,
    ) -> Result<()> {
        let pins = self.bpffs.path().join("redirector");
        let mut config = AgentConfig::new(self.backends, &pins);
        // Outside the pod cgroup, so it is found by its command line and measured alone.
        config.in_pod_cgroup = false;
        let agent = Agent::start(self.topology, &config).map_err(|e| {
            let mut reason = format!("the agent did not start: {e:#}");
            if let Some(problems) = &self.check_problems {
                reason.push_str(&format!(" (redirector check: {problems})"));
            }
            anyhow::anyhow!(reason)
        })?;
        let pins_text = pins.display().to_string();
        let pids = servers::find_redirector(&pins_text);
        let [pid] = pids[..] else {
            bail!(
                "expected one redirector process with {pins_text} in its command line, found {pids:?}"
            );
        };
        *agent_threads = servers::threads(pid);
        let hint = || {
            let mut hints: Vec<String> = Vec::new();
            for line in agent.logs() {
                let Some(message) = log_message(&line) else {
                    continue;
                };
                if !hints.contains(&message) {
                    hints.push(message);
                }
                if hints.len() == 2 {
                    break;
                }
            }
            if let Some(problems) = &self.check_problems {
                hints.push(format!("redirector check: {problems}"));
            }
            (!hints.is_empty()).then(|| format!("agent: {}", hints.join(" / ")))
        };
        self.workloads(plan, rep, Case::Redirector, Some(pid), results, hint);
        let finished = agent.terminate()?;
        if !finished.status.success() {
            bail!("the agent exited with {} on SIGTERM", finished.status);
        }
        let out = agent::redirector(&["uninstall", "--bpffs", &pins_text])?;
        if !out.status.success() {
            bail!(
                "redirector uninstall failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        self.ensure_detached()
    }

    /// Runs the three workloads of `case`; stops at the first run in which not one request
    /// succeeded (the case does not work, and more runs would only cost time).
    fn workloads(
        &self,
        plan: &Plan,
        rep: u32,
        case: Case,
        proxy_pid: Option<u32>,
        results: &mut Results,
        hint: impl Fn() -> Option<String>,
    ) {
        for workload in Workload::ALL {
            println!("--- {} · {}", case.label(), workload.label());
            match self.wrk(plan, rep, case, workload, proxy_pid) {
                Ok(sample) => match sample.wrk.problem() {
                    None => results.record(case, workload, Ok(sample)),
                    Some(problem) => {
                        let reason = match hint() {
                            Some(hint) => format!("{problem}; {hint}"),
                            None => problem,
                        };
                        if sample.wrk.nothing_worked() {
                            results.give_up(case, reason);
                            return;
                        }
                        results.record(case, workload, Err(reason));
                    }
                },
                Err(e) => {
                    results.give_up(case, format!("{e:#}"));
                    return;
                }
            }
        }
    }

    /// One wrk run from the pod, with the CPU the proxy and nginx spent during it.
    fn wrk(
        &self,
        plan: &Plan,
        rep: u32,
        case: Case,
        workload: Workload,
        proxy_pid: Option<u32>,
    ) -> Result<Sample> {
        let nginx_pids = self.nginx.pids();
        let cpu =
            |pids: &[u32]| -> Result<f64> { pids.iter().map(|&p| servers::cpu_seconds(p)).sum() };
        let proxy_before = proxy_pid.map(servers::cpu_seconds).transpose()?;
        let nginx_before = cpu(&nginx_pids)?;
        let mut command = self.topology.spawn_in_pod(
            &plan.tools.wrk,
            workload.args(plan.duration_s, case.base_url()),
        );
        let mut child = ChildGuard::spawn("wrk", &mut command)?;
        let finished = child.finish(plan.wrk_timeout())?;
        let proxy_after = proxy_pid.map(servers::cpu_seconds).transpose()?;
        let nginx_after = cpu(&nginx_pids)?;
        if !finished.status.success() {
            bail!(
                "wrk exited with {}: {}",
                finished.status,
                finished.stderr.join(" ")
            );
        }
        let report = wrk::parse(&finished.stdout.join("\n"))?;
        Ok(Sample {
            rep,
            wrk: report,
            proxy_cpu_s: proxy_before.zip(proxy_after).map(|(b, a)| a - b),
            nginx_cpu_s: nginx_after - nginx_before,
        })
    }

    /// Fails if any program is attached to the pod cgroup (checked with bpftool when it is
    /// installed): the reference cases must run without the agent's hooks.
    fn ensure_detached(&self) -> Result<()> {
        let Some(bpftool) = tools::which("bpftool") else {
            return Ok(());
        };
        let out = Command::new(bpftool)
            .args(["cgroup", "show"])
            .arg(self.topology.pod_cgroup.path())
            .output()
            .context("cannot run bpftool")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let attached: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("ID"))
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .collect();
        if !attached.is_empty() {
            bail!(
                "programs are still attached to the pod cgroup: {}",
                attached.join("; ")
            );
        }
        Ok(())
    }
}

/// The message of an agent WARN or ERROR log line, without the timestamp and with the
/// peer's port cut (so repeated lines for different connections compare equal).
fn log_message(line: &str) -> Option<String> {
    let at = line.find(" WARN ").or_else(|| line.find(" ERROR "))?;
    let message = line[at..].trim();
    let message = match message.find(" peer=") {
        Some(cut) => &message[..cut],
        None => message,
    };
    Some(message.to_owned())
}

/// The first three fields of /proc/loadavg.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// `redirector check` on the Backend directory; its complaints, if any.
fn check_backends(dir: &Path) -> Option<String> {
    let dir = dir.display().to_string();
    let out = agent::redirector(&["check", &dir]).ok()?;
    if out.status.success() {
        return None;
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(report::one_line(&text))
}

/// The setup lines of the report.
fn describe(plan: &Plan, nginx: &Nginx, haproxy: Option<&Haproxy>) -> Vec<String> {
    let nat = match &plan.tools.nat {
        tools::NatTool::Iptables(_) => "iptables",
        tools::NatTool::Nft(_) => "nft",
    };
    let mut lines = vec![
        "namespaces pod (10.200.1.2, wrk in the pod cgroup) → node (10.200.1.1; HAProxy, agent) → \
         ext (10.200.2.2, nginx); `api.redirector.test` → 10.200.2.2 in the pod's and node's hosts files"
            .to_owned(),
        format!(
            "nginx: `worker_processes 1`, `listen 10.200.2.2:443 ssl`, TLS 1.2 + 1.3, keepalive_requests \
             100000, static /1k (1024 B) and /1m (1 MiB); ECDSA P-256 certificate for {HOSTNAME} from an \
             rcgen test CA ({} processes: master + worker); config: bench/nginx.conf.tmpl",
            nginx.pids().len()
        ),
        format!(
            "HAProxy: `nbthread 1`, mode tcp, listens on 10.200.1.1:{HAPROXY_PORT}, \
             `server 10.200.2.2:443 ssl verify required ca-file ca.crt sni str({HOSTNAME}) alpn http/1.1`; \
             the pod's connects to 10.200.2.2:443 reach it by a DNAT rule ({nat}, pod netns, OUTPUT) that \
             exists only during the HAProxy runs; config: bench/haproxy.cfg.tmpl"
        ),
        "redirector: `redirector run` (release build) in the node, Backend `bench/api` for \
         api.redirector.test:443, protocol HTTP, `tls.mode: ServerOnly` verified against the CA \
         ConfigMap `bench/api-ca`; started, measured, stopped and uninstalled in every repetition, so \
         no program is attached to the pod cgroup during the other cases; Backend: bench/backend.yaml.tmpl"
            .to_owned(),
        "conntrack is on in the pod namespace for every case (the nat hook stays installed, as on a \
         Kubernetes node); pod and node: ip_local_port_range 1024-65535, tcp_tw_reuse=1"
            .to_owned(),
    ];
    if haproxy.is_none() {
        lines.push("HAProxy did not start (see its row)".to_owned());
    }
    lines
}

/// The exact wrk command lines, in run order.
fn commands(plan: &Plan) -> Vec<String> {
    let mut lines = Vec::new();
    for case in Case::ALL {
        lines.push(format!("# {}", case.label()));
        for workload in Workload::ALL {
            let args: Vec<String> = workload
                .args(plan.duration_s, case.base_url())
                .into_iter()
                .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
                .collect();
            lines.push(format!("wrk {}", args.join(" ")));
        }
    }
    lines
}

/// Machine and software versions for the report header.
fn machine(tools: &Tools, redirector: Option<&Path>, custom_bin: bool) -> Vec<(String, String)> {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into())
    };
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(workspace_root())
            .output()
            .ok()
    };
    let rev = git(&["rev-parse", "--short", "HEAD"])
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let dirty = git(&[
        "status",
        "--porcelain",
        "--",
        "redirector",
        "redirector-common",
        "redirector-ebpf",
    ])
    .is_some_and(|o| !o.stdout.is_empty());
    let redirector = match redirector {
        Some(bin) if custom_bin => format!(
            "{} (given with --redirector-bin; the workspace is at commit {rev})",
            bin.display()
        ),
        Some(bin) => format!(
            "commit {rev}{} ({})",
            if dirty { " + uncommitted changes" } else { "" },
            bin.display()
        ),
        None => format!("commit {rev} (no binary: the build failed)"),
    };
    vec![
        ("date".into(), date),
        ("machine".into(), format!("{nproc} CPUs ({cpu_model}), kernel {}", read("/proc/sys/kernel/osrelease"))),
        ("redirector".into(), redirector),
        ("nginx".into(), tools::version(&tools.nginx, "-v")),
        ("HAProxy".into(), tools::version(&tools.haproxy, "-v")),
        ("wrk".into(), tools::version(&tools.wrk, "-v")),
        (
            "note".into(),
            "client, proxy and server share these CPUs: compare cases with each other, not with other machines"
                .into(),
        ),
    ]
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

    #[test]
    fn agent_log_messages() {
        let line = "2026-11-23T01:43:19.125Z  WARN redirector::proxy::connection: refused: TLS \
                    peer=10.200.1.2:10914 reason=\"x\"";
        assert_eq!(
            log_message(line).as_deref(),
            Some("WARN redirector::proxy::connection: refused: TLS")
        );
        assert_eq!(log_message("2026 INFO ready: ok"), None);
    }
}
