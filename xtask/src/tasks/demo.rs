//! `cargo xtask demo`: the whole story in throw-away namespaces, narrated.
//!
//! An unmodified client in a "pod" (its own network namespace and cgroup) dials a
//! declared hostname and goes through the agent's proxy; an undeclared destination goes
//! direct. Everything is torn down at the end, also on failure (the netlab guards).

use std::process::{ExitCode, ExitStatus};

use anyhow::{Context, Result, bail};

use super::{cargo, check_status, ebpf, target_dir, workspace_root};
use xtask::{
    examples::{HOSTNAMES, copy_examples, examples_dir, hosts, tls_material},
    netlab::{
        Bpffs, EXT_V4, EXT_V6, Topology,
        agent::{self, Agent, AgentConfig},
        probe::{self, ProbeServer, Reply},
    },
    pod::{self, AgentPod, Podman},
};

/// `container`: the agent runs from the image under podman as the DaemonSet's pod
/// (directory mode), not as a plain process.
pub fn demo(container: bool) -> Result<ExitCode> {
    super::require_root("the demo loads eBPF programs and creates network namespaces")?;
    step("building the eBPF object, the agent and the test client");
    ebpf::build_ebpf()?;
    check_status(cargo().args(["build", "-p", "redirector", "-p", "xtask", "--bins"]))?;
    let probe_bin = target_dir().join("debug/netprobe");
    let examples = examples_dir();
    let podman = if container {
        step("building the agent image (cargo xtask image)");
        let built = super::image::build()?;
        println!(
            "    {} ({:.1} MB)",
            built.reference,
            built.size as f64 / 1e6
        );
        Some(Podman::for_workspace(&workspace_root())?)
    } else {
        None
    };

    step(
        "creating namespaces pod (10.200.1.2) -> node (router, agent) -> ext (10.200.2.2), and a cgroup for the pod",
    );
    let topology = Topology::new()?;
    topology.node.set_hosts(&hosts())?;
    topology.pod.set_hosts(&hosts())?;
    println!(
        "    {} resolve to {EXT_V4} and {EXT_V6} (hosts files of pod and node)",
        HOSTNAMES.join(", ")
    );
    // A second address on ext that no Backend declares.
    let remote_if = topology.ext_link.remote.clone();
    topology
        .ext
        .ip(["addr", "add", "10.200.2.3/24", "dev", &remote_if])?;
    let bpffs = Bpffs::new()?;

    step(
        "starting TCP servers in ext on :8080 (declared in deploy/examples) and :9090 (not declared)",
    );
    let _declared = ProbeServer::start(&probe_bin, &topology.ext, "[::]:8080")?;
    let _undeclared = ProbeServer::start(&probe_bin, &topology.ext, "[::]:9090")?;

    step("making a test CA and a certificate for api.redirector.test; TLS server in ext on :443");
    let scratch = tempfile::tempdir()?;
    let (ca_pem, cert, key) = tls_material(scratch.path())?;
    let mut tls_server =
        ProbeServer::start_tls(&probe_bin, &topology.ext, "[::]:443", &cert, &key)?;
    let backends = scratch.path().join("backends");
    copy_examples(&examples, &backends, &ca_pem)?;
    println!(
        "    deploy/examples copied to {}, with the test CA in ConfigMap demo/api-ca",
        backends.display()
    );

    let mut config = AgentConfig::new(&backends, bpffs.path().join("redirector"));
    config.in_pod_cgroup = true;
    let agent = match &podman {
        Some(podman) => {
            step(&format!(
                "starting the DaemonSet's pod (deploy/daemonset.yaml, DIRECTORY MODE) under podman in the node, its ConfigMap volume being {}",
                backends.display()
            ));
            let (node, cgroup_parent) = pod::test_bed_node(&topology, bpffs.path(), &backends)?;
            let pod = AgentPod::start(podman, &topology, &node)?;
            println!(
                "    podman run {} {} {}",
                pod.run.options.join(" "),
                pod.run.image,
                pod.run.args.join(" ")
            );
            DemoAgent::Pod(Box::new(pod), cgroup_parent)
        }
        None => {
            step(&format!(
                "starting `redirector run --backends {}` in the node",
                backends.display()
            ));
            DemoAgent::Process(Agent::start(&topology, &config)?)
        }
    };
    println!("    {}", agent.ready_line().trim());

    for (what, target, family) in [
        ("declared hostname, IPv4", "echo.redirector.test:8080", "-4"),
        ("declared hostname, IPv6", "echo.redirector.test:8080", "-6"),
        (
            "declared host, undeclared port",
            "echo.redirector.test:9090",
            "-4",
        ),
        ("an address no Backend declares", "10.200.2.3:8080", "-4"),
    ] {
        step(&format!(
            "pod: netprobe connect {target} {family}   ({what})"
        ));
        show(&probe::connect_from_pod(
            &probe_bin,
            &topology,
            target,
            "hello",
            &[family],
        )?)?;
    }

    step(
        "pod: netprobe connect api.redirector.test:443 -4 --send hello   (plaintext from the pod; Backend demo/api says ServerOnly TLS)",
    );
    let reply = probe::connect_from_pod(
        &probe_bin,
        &topology,
        "api.redirector.test:443",
        "hello",
        &["-4"],
    )?;
    show(&reply)?;
    let handshake = tls_server.wait_for("handshake-ok")?;
    println!("    TLS server: {handshake}  (the proxy verified its certificate against the CA)");

    step("stopping the agent (SIGTERM): it drains and exits 0; programs stay pinned");
    let status = agent.stop()?;
    if !status.success() {
        bail!("the agent exited with {status}");
    }
    step("redirector uninstall: detach the programs and remove the pins");
    let printed = match &podman {
        Some(podman) => {
            println!("    (in a container of deploy/uninstall/daemonset.yaml)");
            let (finished, _) = pod::uninstall(podman, &topology, bpffs.path())?;
            if !finished.status.success() {
                bail!(
                    "uninstall exited with {}: {:?}",
                    finished.status,
                    finished.stderr
                );
            }
            finished.stdout.join("\n")
        }
        None => {
            let bpffs_dir = config.bpffs.display().to_string();
            let out = agent::redirector(&["uninstall", "--bpffs", &bpffs_dir])?;
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    print!("{}", indent(&printed));
    step("tearing down namespaces, cgroup and bpffs");
    Ok(ExitCode::SUCCESS)
}

/// The demo's agent: a process, or the DaemonSet's pod under podman.
enum DemoAgent {
    Process(Agent),
    /// With what podman leaves of its cgroup, removed after the pod.
    Pod(Box<AgentPod>, pod::CgroupParent),
}

impl DemoAgent {
    fn ready_line(&self) -> &str {
        match self {
            DemoAgent::Process(agent) => &agent.ready_line,
            DemoAgent::Pod(pod, _) => &pod.ready_line,
        }
    }

    /// SIGTERM (the pod: `podman stop` with its grace period) and the exit status.
    fn stop(self) -> Result<ExitStatus> {
        Ok(match self {
            DemoAgent::Process(agent) => agent.terminate()?.status,
            DemoAgent::Pod(pod, _cgroup_parent) => pod.stop()?.0.status,
        })
    }
}

fn step(text: &str) {
    println!("\n==> {text}");
}

fn show(reply: &Reply) -> Result<()> {
    if !reply.ok() {
        bail!("the client failed: {}", reply.json);
    }
    let seen = reply.seen_by_server().context("server reply")?;
    println!(
        "    client: getpeername() = {}  (what it dialed)",
        reply.peer()
    );
    let via = if seen.starts_with("10.200.1.") || seen.starts_with("[fd00:200:1::") {
        "direct, the pod's own address"
    } else {
        "through the proxy on the node"
    };
    println!("    server: saw the connection from {seen}  ({via})");
    Ok(())
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}
