//! The test bed of `cargo xtask bench`: namespaces, servers, DNAT and Backend directories
//! built once, every repetition of every case run on it, then the ceilings, all torn
//! down at the end.

use std::{
    net::{IpAddr, SocketAddr},
    path::Path,
};

use anyhow::{Context as _, Result};
use xtask::netlab::{Bpffs, EXT_V4, NODE_POD_V4, Topology, agent};

use super::{
    HAPROXY_HTTP_PORT, HAPROXY_PLAIN_PORT, HAPROXY_TCP_PORT, Plan, SERVICE_PORT,
    case::{BackendDir, Bed, backend_spec},
    ceilings,
    context::describe,
    report::{self, Case, Ceilings, PLAIN_PORT, Results},
    servers::{self, Dnat, HOSTNAME, Haproxy, Listen, Nginx, Pki, Upstream},
};

/// Builds the test bed, runs every repetition, measures the ceilings, tears everything
/// down (guards, also on error) and returns what was measured.
pub(super) fn run(
    plan: &Plan,
    redirector: Result<&Path, String>,
    setup: &mut Vec<String>,
) -> Result<(Results, Option<Ceilings>)> {
    let mut results = Results::new(&plan.cases, &plan.workloads);
    if let Err(reason) = &redirector {
        for case in plan.cases.iter().filter(|c| c.is_redirector()) {
            results.give_up(*case, reason.clone());
        }
    }
    let haproxy_cases: Vec<Case> = plan
        .cases
        .iter()
        .copied()
        .filter(|c| c.is_haproxy())
        .collect();
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
    setup.push(congestion_control(plan, &topology)?);
    let service = SocketAddr::new(EXT_V4.into(), SERVICE_PORT);
    let plain = SocketAddr::new(EXT_V4.into(), PLAIN_PORT);
    let listen = Listen {
        tcp: SocketAddr::new(NODE_POD_V4.into(), HAPROXY_TCP_PORT),
        http: SocketAddr::new(NODE_POD_V4.into(), HAPROXY_HTTP_PORT),
        plain: SocketAddr::new(NODE_POD_V4.into(), HAPROXY_PLAIN_PORT),
    };

    println!("bench: starting nginx in the ext namespace ({service} TLS, {plain} plaintext)");
    let nginx = Nginx::start(&plan.tools.nginx, &topology.ext, dir.path(), service, plain)?;
    // HAProxy and its DNAT only when a HAProxy case is planned: a failure to start it
    // then fails those cases, not the run.
    let (haproxy, dnat) = if haproxy_cases.is_empty() {
        (None, None)
    } else {
        println!(
            "bench: starting HAProxy in the node namespace (mode tcp {}, mode http {}, plaintext mode tcp {})",
            listen.tcp, listen.http, listen.plain
        );
        let give_up = |results: &mut Results, reason: String| {
            for &case in &haproxy_cases {
                results.give_up(case, reason.clone());
            }
        };
        let haproxy = Haproxy::start(
            &plan.tools.haproxy,
            &topology.node,
            dir.path(),
            listen,
            Upstream {
                tls: service,
                plain,
            },
        )
        .map_err(|e| give_up(&mut results, format!("{e:#}")))
        .ok();
        let dnat = Dnat::install(&plan.tools.nat, &topology.pod)
            .map_err(|e| give_up(&mut results, format!("cannot set up the DNAT: {e:#}")))
            .ok();
        (haproxy, dnat)
    };
    let bpffs = Bpffs::new()?;
    // One directory per redirector case, so each agent loads only its own Backend.
    let backends = plan
        .cases
        .iter()
        .filter_map(|&case| Some((case, backend_spec(case)?)))
        .map(|(case, spec)| -> Result<BackendDir> {
            let path = dir.path().join(format!("backends-{}", case.name()));
            servers::write_backend_dir(&path, &pki.ca_pem, spec)?;
            let check_problems = redirector.as_ref().ok().and_then(|_| check_backends(&path));
            Ok(BackendDir {
                case,
                path,
                check_problems,
            })
        })
        .collect::<Result<Vec<_>>>()?;

    setup.extend(describe(plan, &nginx, haproxy.as_ref()));
    let bed = Bed {
        topology: &topology,
        nginx: &nginx,
        haproxy: haproxy.as_ref(),
        dnat: dnat.as_ref(),
        bpffs: &bpffs,
        backends,
    };
    let mut agent_threads = None;
    for rep in 1..=plan.reps {
        for &case in &plan.cases {
            if results.is_dead(case) {
                continue;
            }
            println!("\n==> repetition {rep}/{}: {}", plan.reps, case.label());
            if let Err(e) = bed.run_case(plan, rep, case, &mut results, &mut agent_threads) {
                results.give_up(case, format!("{e:#}"));
                if !case.is_reference() {
                    // The hooks may still be attached: every later pod connect to the
                    // service would be redirected. Stop rather than measure that.
                    bed.ensure_detached()?;
                }
            }
        }
    }
    let ceilings = plan.ceilings.then(|| ceilings::measure(plan, &bed));
    if let Some(n) = agent_threads {
        setup.push(format!(
            "redirector agent: {n} OS threads (/proc/<pid>/task once it is up, in its last \
             run): the runtime's one (`--worker-threads 1`) and helpers such as \
             the Backend directory's file watcher"
        ));
    }
    for b in &bed.backends {
        if let Some(problems) = &b.check_problems {
            setup.push(format!(
                "`redirector check` on the Backend directory of {}: {problems}",
                b.case.label()
            ));
        }
    }
    Ok((results, ceilings))
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

/// Sets `--congestion-control` in the bed's three namespaces (each has its own; the
/// host's is untouched) and says what every one of them uses, beside the host's default.
fn congestion_control(plan: &Plan, topology: &Topology) -> Result<String> {
    let namespaces = [&topology.pod, &topology.node, &topology.ext];
    if let Some(name) = plan.congestion_control {
        let setting = format!("net.ipv4.tcp_congestion_control={name}");
        for ns in namespaces {
            servers::sysctl(ns, &[&setting]).with_context(|| {
                format!("--congestion-control {name}: not available on this kernel?")
            })?;
        }
    }
    let read = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_owned());
    let mut used = Vec::new();
    for ns in namespaces {
        let output = ns
            .exec("cat")
            .arg("/proc/sys/net/ipv4/tcp_congestion_control")
            .output()?;
        used.push(String::from_utf8_lossy(&output.stdout).trim().to_owned());
    }
    let host = read("/proc/sys/net/ipv4/tcp_congestion_control").unwrap_or_default();
    let qdisc = read("/proc/sys/net/core/default_qdisc").unwrap_or_default();
    Ok(format!(
        "TCP congestion control (pod, node, ext): {} ({}; the host's default: {host}, \
         default qdisc {qdisc}, veths have none, so bbr would pace in software)",
        used.join(", "),
        match plan.congestion_control {
            Some(_) => "--congestion-control",
            None => "--congestion-control inherit: as the host gives new namespaces",
        }
    ))
}
