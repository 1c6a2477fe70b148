//! `cargo xtask demo`: the whole story in throw-away namespaces, narrated.
//!
//! An unmodified client in a "pod" (its own network namespace and cgroup) dials a
//! declared hostname and goes through the agent's proxy; an undeclared destination goes
//! direct. Everything is torn down at the end, also on failure (the netlab guards).

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{Context, Result, bail};

use super::{cargo, check_status, ebpf, target_dir, workspace_root};
use xtask::netlab::{
    Bpffs, EXT_V4, EXT_V6, Topology,
    agent::{self, Agent, AgentConfig},
    probe::{self, ProbeServer, Reply},
};

/// Names in `deploy/examples`, all served by the demo's external host.
const NAMES: [&str; 3] = [
    "echo.redirector.test",
    "tls.redirector.test",
    "api.redirector.test",
];

pub fn demo() -> Result<ExitCode> {
    super::require_root("the demo loads eBPF programs and creates network namespaces")?;
    step("building the eBPF object, the agent and the test client");
    ebpf::build_ebpf()?;
    check_status(cargo().args(["build", "-p", "redirector", "-p", "xtask", "--bins"]))?;
    let probe_bin = target_dir().join("debug/netprobe");
    let examples = workspace_root().join("deploy/examples");

    step(
        "creating namespaces pod (10.200.1.2) -> node (router, agent) -> ext (10.200.2.2), and a cgroup for the pod",
    );
    let topology = Topology::new()?;
    let mut hosts: Vec<(IpAddr, &str)> = Vec::new();
    for name in NAMES {
        hosts.extend([(EXT_V4.into(), name), (EXT_V6.into(), name)]);
    }
    topology.node.set_hosts(&hosts)?;
    topology.pod.set_hosts(&hosts)?;
    println!(
        "    {} resolve to {EXT_V4} and {EXT_V6} (hosts files of pod and node)",
        NAMES.join(", ")
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

    step(&format!(
        "starting `redirector run --backends {}` in the node",
        backends.display()
    ));
    let mut config = AgentConfig::new(&backends, bpffs.path().join("redirector"));
    config.in_pod_cgroup = true;
    let agent = Agent::start(&topology, &config)?;
    println!("    {}", agent.ready_line.trim());

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
    let finished = agent.terminate()?;
    if !finished.status.success() {
        bail!("the agent exited with {}", finished.status);
    }
    step("redirector uninstall: detach the programs and remove the pins");
    let bpffs_dir = config.bpffs.display().to_string();
    let out = agent::redirector(&["uninstall", "--bpffs", &bpffs_dir])?;
    print!("{}", indent(&String::from_utf8_lossy(&out.stdout)));
    step("tearing down namespaces, cgroup and bpffs");
    Ok(ExitCode::SUCCESS)
}

/// A CA and a server certificate for api.redirector.test, as PEM files under `dir`.
fn tls_material(dir: &Path) -> Result<(String, PathBuf, PathBuf)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "redirector demo CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate()?;
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let leaf_key = KeyPair::generate()?;
    let leaf = CertificateParams::new(vec!["api.redirector.test".to_owned()])?
        .signed_by(&leaf_key, &issuer)?;
    let (cert, key) = (dir.join("api.crt"), dir.join("api.key"));
    std::fs::write(&cert, leaf.pem())?;
    std::fs::write(&key, leaf_key.serialize_pem())?;
    Ok((ca_pem, cert, key))
}

/// Copies the example Backends, putting `ca_pem` in place of the placeholder CA bundle.
fn copy_examples(from: &Path, to: &Path, ca_pem: &str) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let path = entry?.path();
        let Some(name) = path.file_name() else {
            continue;
        };
        let mut text = std::fs::read_to_string(&path)?;
        if let Some(at) = text.find("  ca.crt: |\n") {
            let indented: String = ca_pem.lines().map(|l| format!("    {l}\n")).collect();
            text = format!("{}  ca.crt: |\n{indented}", &text[..at]);
        }
        std::fs::write(to.join(name), text)?;
    }
    Ok(())
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
