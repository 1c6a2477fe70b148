//! `cargo xtask bench-hooks`: the CPU cost of one run of the `connect4` eBPF program, per
//! path through it, measured by the kernel (`kernel.bpf_stats_enabled`).
//!
//! Five agent set-ups, each in its own throw-away namespaces (10.200.0.0/16, the netlab
//! topology), cgroup, bpffs and agent (release build, hooks attached to the bench's pod
//! cgroup only): Backends from a directory; from a fake Kubernetes API with
//! `--backend-scope namespace` (two namespaces' Backends for the same hostname, pods as
//! kubelet-style `kubepods/pod<uid>` cgroups below the attached cgroup); and the same
//! API with `--backend-scope cluster`; and the directory set-up again under
//! `--egress-policy deny`, without and with `--allow-cidr` for the server's address (the
//! policy's cost per connect: cases 7-9 against 1 and 2). Each case runs `netprobe connect-many` from a
//! cgroup in the pod netns: `--connects` IPv4 connects to a closed port (not a Backend)
//! or to the Backend address (redirected to the proxy, which forwards to the server in
//! ext; or refused by the hook for a pod the agent has not mapped). Per round, the delta
//! of `run_time_ns` over the delta of `run_cnt` of the agent's connect4 program (found
//! through its pinned link) is the cost per run. Report: bench/hooks.md and stdout.

mod batch;
mod cases;
mod fixtures;
mod report;
mod stats;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail, ensure};
use xtask::netlab::{
    Bpffs, Cgroup, EXT_V4, EXT_V6, Topology,
    agent::{self, Agent, AgentConfig},
};

use super::{cargo, check_status, ebpf, target_dir, workspace_root};
use batch::Bed;
use cases::{CASES, CLOSED_PORT, Case, CaseResult, Client, Dest, Setup};
use fixtures::{FakeApi, QuietServer};

/// `cargo xtask bench-hooks` options.
#[derive(clap::Args, Debug)]
pub struct BenchHooksArgs {
    /// Connects per round and case.
    #[arg(long, default_value_t = 5000)]
    connects: u64,
    /// Measured rounds per case (the report gives their minimum and median).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Unmeasured connects before the rounds of each case.
    #[arg(long, default_value_t = 200)]
    warmup: u64,
    /// Where to write the Markdown report (default bench/hooks.md).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Use this redirector binary instead of building target/release/redirector.
    #[arg(long)]
    redirector_bin: Option<PathBuf>,
}

const UID_A: &str = "0a0a0a0a-1111-4111-8111-aaaaaaaaaaaa";
const UID_B: &str = "0b0b0b0b-2222-4222-8222-bbbbbbbbbbbb";
/// A pod cgroup below kubepods that the API does not know.
const UID_UNMAPPED: &str = "0c0c0c0c-3333-4333-8333-cccccccccccc";

/// The binaries the bench runs.
struct Bins {
    redirector: PathBuf,
    netprobe: PathBuf,
    fakeapi: PathBuf,
}

pub fn bench_hooks(args: &BenchHooksArgs) -> Result<ExitCode> {
    super::require_root("the benchmark loads eBPF programs and creates network namespaces")?;
    ensure!(args.connects >= 1, "--connects: at least 1");
    ensure!(args.rounds >= 1, "--rounds: at least 1");
    // The per-program run counters are read with bpftool (the tests need none).
    super::packages::install_missing("bench-hooks", || match super::packages::which("bpftool") {
        Some(_) => Vec::new(),
        None => vec!["bpftool"],
    })?;
    let bins = build(args)?;
    agent::use_redirector_bin(bins.redirector.clone());

    let enabled = stats::StatsEnabled::enable()?;
    let previous = enabled.previous().to_owned();
    println!("bench-hooks: kernel.bpf_stats_enabled=1 (was {previous}; restored at the end)");
    let mut results = Vec::new();
    let setups = [
        Setup::Directory,
        Setup::KubeNamespace,
        Setup::KubeCluster,
        Setup::DirectoryDeny,
        Setup::DirectoryDenyAllowed,
    ];
    for setup in setups {
        let cases: Vec<&'static Case> = CASES.iter().filter(|c| c.setup == setup).collect();
        println!("\n==> {}", setup.label());
        if let Err(e) = run_setup(setup, &cases, &bins, args, &mut results) {
            eprintln!("bench-hooks: {} failed: {e:#}", setup.label());
            for case in cases {
                if !results
                    .iter()
                    .any(|r: &CaseResult| r.case.number == case.number)
                {
                    results.push(CaseResult {
                        case,
                        rounds: Err(format!("{e:#}")),
                    });
                }
            }
        }
    }
    drop(enabled);

    let ctx = report::Context {
        connects: args.connects,
        rounds: args.rounds,
        warmup: args.warmup,
        previous_sysctl: previous,
        machine: report::machine(&bins.redirector),
    };
    let md = report::render(&ctx, &results);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| workspace_root().join("bench/hooks.md"));
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(&out, &md).with_context(|| format!("cannot write {}", out.display()))?;
    println!("\n{md}");
    println!("bench-hooks: report written to {}", out.display());
    Ok(if results.iter().all(|r| r.rounds.is_ok()) {
        ExitCode::SUCCESS
    } else {
        println!("bench-hooks: a case failed (see the report)");
        ExitCode::from(2)
    })
}

/// `target/release/redirector` (with its eBPF object) or `--redirector-bin`, and the
/// release `netprobe` and `fakeapi`.
fn build(args: &BenchHooksArgs) -> Result<Bins> {
    let redirector = match &args.redirector_bin {
        Some(bin) => std::fs::canonicalize(bin)
            .with_context(|| format!("--redirector-bin {}", bin.display()))?,
        None => {
            println!("bench-hooks: building the eBPF object and the agent (release)");
            ebpf::build_ebpf()?;
            check_status(cargo().args(["build", "--release", "-p", "redirector"]))?;
            target_dir().join("release/redirector")
        }
    };
    check_status(
        cargo()
            .args(["build", "--release", "-p", "xtask"])
            .args(["--bin", "netprobe", "--bin", "fakeapi"]),
    )?;
    Ok(Bins {
        redirector,
        netprobe: target_dir().join("release/netprobe"),
        fakeapi: target_dir().join("release/fakeapi"),
    })
}

/// kubelet-style pod cgroups below the attached cgroup. Field order is drop order: the
/// pods before `kubepods`.
struct PodCgroups {
    pod_a: Cgroup,
    _pod_b: Cgroup,
    unmapped: Cgroup,
    _kubepods: Cgroup,
}

impl PodCgroups {
    fn new(attached: &Cgroup) -> Result<PodCgroups> {
        let kubepods = attached.child("kubepods")?;
        Ok(PodCgroups {
            pod_a: kubepods.child(&format!("pod{UID_A}"))?,
            _pod_b: kubepods.child(&format!("pod{UID_B}"))?,
            unmapped: kubepods.child(&format!("pod{UID_UNMAPPED}"))?,
            _kubepods: kubepods,
        })
    }
}

/// One agent set-up and its cases; appends a result per case.
fn run_setup(
    setup: Setup,
    cases: &[&'static Case],
    bins: &Bins,
    args: &BenchHooksArgs,
    results: &mut Vec<CaseResult>,
) -> Result<()> {
    // Drop order is the reverse: agent, API, server, bpffs, pod cgroups, namespaces.
    let topology = Topology::new()?;
    let hosts: [(IpAddr, &str); 2] = [
        (EXT_V4.into(), fixtures::HOSTNAME),
        (EXT_V6.into(), fixtures::HOSTNAME),
    ];
    topology.node.set_hosts(&hosts)?;
    // Thousands of connections to one address each from the client (pod) and the proxy
    // (node), each side closing first: without this the ports in TIME_WAIT run out
    // after ~14k connects and every connect then searches (measured: 1.5 ms instead of
    // 0.35 ms per connection in the third round). These namespaces only.
    for netns in [&topology.pod, &topology.node] {
        let mut sysctl = netns.exec("sysctl");
        sysctl.args(["-q", "-w", "net.ipv4.tcp_tw_reuse=1"]);
        sysctl.arg("net.ipv4.ip_local_port_range=1024 65535");
        let out = sysctl
            .output()
            .with_context(|| format!("cannot run {sysctl:?}"))?;
        ensure!(
            out.status.success(),
            "{sysctl:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let pods = match setup {
        Setup::KubeNamespace | Setup::KubeCluster => Some(PodCgroups::new(&topology.pod_cgroup)?),
        _ => None,
    };
    let backends = tempfile::Builder::new()
        .prefix("rdhooks")
        .tempdir()
        .context("cannot create a temp dir")?;
    let file = backends.path().join("backends.yaml");
    std::fs::write(&file, fixtures::backend_yaml())
        .with_context(|| format!("cannot write {}", file.display()))?;
    let bpffs = Bpffs::new()?;
    let pin_dir = bpffs.path().join("redirector");
    let _server = QuietServer::start(&bins.netprobe, &topology.ext, "[::]:8080")?;
    let api = match setup {
        Setup::Directory | Setup::DirectoryDeny | Setup::DirectoryDenyAllowed => None,
        Setup::KubeNamespace => Some(FakeApi::start(
            &bins.fakeapi,
            &topology.node,
            &[
                fixtures::backend("team-a"),
                fixtures::backend("team-b"),
                fixtures::pod("a", "team-a", UID_A),
                fixtures::pod("b", "team-b", UID_B),
            ],
        )?),
        // One Backend only: in the cluster scope two on the same address are ambiguous
        // (the proxy would refuse their connections; the hook's work is the same).
        Setup::KubeCluster => Some(FakeApi::start(
            &bins.fakeapi,
            &topology.node,
            &[
                fixtures::backend("team-a"),
                fixtures::pod("a", "team-a", UID_A),
                fixtures::pod("b", "team-b", UID_B),
            ],
        )?),
    };
    let mut config = AgentConfig::new(backends.path(), &pin_dir);
    config.in_pod_cgroup = false;
    config.extra_args = setup.egress_args();
    if let Some(api) = &api {
        let scope = if setup == Setup::KubeCluster {
            "cluster"
        } else {
            "namespace"
        };
        config.extra_args = api.agent_args(scope);
    }
    let mut agent = Agent::start(&topology, &config)?;
    if setup == Setup::KubeNamespace {
        let mapped = |l: &String| l.contains("pod scopes updated") && l.contains("pods=2");
        if !agent.logs().iter().any(mapped) {
            let line = agent.wait_for_log("pod scopes updated")?;
            ensure!(
                line.contains("pods=2"),
                "pods not mapped as expected: {line}"
            );
        }
    }
    let prog = stats::prog_id_of_link(&pin_dir.join("links/connect4"))?;
    let name = stats::prog_name(prog)?;
    ensure!(
        name == "connect4",
        "the connect4 link runs program {prog} named {name}"
    );
    println!("    agent ready; connect4 is program {prog}");

    for case in cases {
        let cgroup = match (case.client, &pods) {
            (Client::Attached, _) => &topology.pod_cgroup,
            (Client::PodA, Some(p)) => &p.pod_a,
            (Client::Unmapped, Some(p)) => &p.unmapped,
            (_, None) => bail!("case {} needs pod cgroups", case.number),
        };
        let port = match case.dest {
            Dest::Closed => CLOSED_PORT,
            Dest::Backend => fixtures::PORT,
        };
        let bed = Bed {
            topology: &topology,
            probe: &bins.netprobe,
            cgroup,
            target: SocketAddr::new(EXT_V4.into(), port),
            expect: case.expect,
            prog,
        };
        println!("  case {}: {} -> {}", case.number, case.label, bed.target);
        let rounds = bed.measure(args).map_err(|e| {
            eprintln!("bench-hooks: case {} failed: {e:#}", case.number);
            format!("{e:#}")
        });
        results.push(CaseResult { case, rounds });
    }

    let finished = agent.terminate()?;
    if !finished.status.success() {
        eprintln!("bench-hooks: the agent exited with {}", finished.status);
    }
    let out = agent::redirector(&["uninstall", "--bpffs", &pin_dir.display().to_string()])?;
    if !out.status.success() {
        eprintln!(
            "bench-hooks: redirector uninstall failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(api);
    Ok(())
}
