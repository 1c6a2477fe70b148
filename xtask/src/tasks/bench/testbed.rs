//! The test bed of `cargo xtask bench`: namespaces, servers, DNAT and Backend directory
//! built once, every repetition of every case run on it, all torn down at the end.

use std::{
    net::{IpAddr, SocketAddr},
    path::Path,
};

use anyhow::{Context as _, Result};
use xtask::netlab::{Bpffs, EXT_V4, NODE_POD_V4, Topology, agent};

use super::{
    HAPROXY_PORT, Plan, SERVICE_PORT,
    case::Bed,
    context::describe,
    report::{self, Case, Results},
    servers::{self, Dnat, HOSTNAME, Haproxy, Nginx, Pki},
};

/// Builds the test bed, runs every repetition, tears everything down (guards, also on
/// error) and returns what was measured.
pub(super) fn run(
    plan: &Plan,
    redirector: Result<&Path, String>,
    setup: &mut Vec<String>,
) -> Result<Results> {
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
