//! What the report says besides the numbers: machine and versions, load average, setup
//! lines and the exact wrk (and ceiling) commands.

use std::path::Path;

use super::{
    HAPROXY_HTTP_PORT, HAPROXY_PLAIN_PORT, HAPROXY_TCP_PORT, Plan, ceilings,
    report::{self, PLAIN_PORT},
    servers::{HOSTNAME, Haproxy, Nginx},
    tools::{self, Tools},
};
use crate::tasks::machine as facts;

/// The first three fields of /proc/loadavg.
pub(super) fn loadavg() -> String {
    facts::load_average().unwrap_or_else(|| "unknown".into())
}

/// The setup lines of the report.
pub(super) fn describe(plan: &Plan, nginx: &Nginx, haproxy: Option<&Haproxy>) -> Vec<String> {
    let nat = match &plan.tools.nat {
        tools::NatTool::Iptables(_) => "iptables",
        tools::NatTool::Nft(_) => "nft",
    };
    let server =
        format!("`server 10.200.2.2:443 ssl verify required ca-file ca.crt sni str({HOSTNAME})");
    let mut lines = vec![
        "namespaces pod (10.200.1.2, wrk in the pod cgroup) → node (10.200.1.1; HAProxy, agent) → \
         ext (10.200.2.2, nginx); `api.redirector.test` → 10.200.2.2 in the pod's and node's hosts files"
            .to_owned(),
        format!(
            "nginx: `worker_processes 1`, `listen 10.200.2.2:443 ssl`, TLS 1.2 + 1.3, no HTTP/2 (every \
             proxy gets http/1.1 by ALPN), and `listen 10.200.2.2:{PLAIN_PORT}` (plaintext HTTP, the \
             plaintext cases) in the same server; keepalive_requests 100000, static /1k (1024 B) and /1m \
             (1 MiB), sendfile on; ECDSA P-256 certificate for {HOSTNAME} from an rcgen test CA ({} processes: \
             master + worker); config: bench/nginx.conf.tmpl",
            nginx.pids().len()
        ),
        format!(
            "HAProxy: one process, `nbthread 1`; mode tcp on 10.200.1.1:{HAPROXY_TCP_PORT} with \
             {server} alpn http/1.1`; mode http on 10.200.1.1:{HAPROXY_HTTP_PORT} with `http-reuse \
             always` and {server} alpn h2,http/1.1`; plaintext mode tcp on \
             10.200.1.1:{HAPROXY_PLAIN_PORT} with `option splice-request`, `option splice-response` \
             and `server 10.200.2.2:{PLAIN_PORT}` (no TLS); the pod's connects to 10.200.2.2:443 \
             (10.200.2.2:{PLAIN_PORT} for plaintext) reach the port of the case by a DNAT rule \
             ({nat}, pod netns, OUTPUT) that exists only during that case's runs; config: \
             bench/haproxy.cfg.tmpl"
        ),
        format!(
            "redirector: `redirector run --worker-threads 1{}` (release build; one thread, as \
             HAProxy) in the node, Backend `bench/api` for api.redirector.test:443, `tls.mode: \
             ServerOnly` verified against the CA ConfigMap `bench/api-ca`, with `protocol: TCP` \
             (byte splice) or `protocol: HTTP` (hyper, upstream connections pooled, ALPN \
             h2,http/1.1), one Backend directory and one agent per case; started, measured, \
             stopped and uninstalled in every repetition, so no program is attached to the pod \
             cgroup during the other cases and every repetition starts with an empty pool; \
             Backend: bench/backend.yaml.tmpl; the policy case adds the BackendPolicy and \
             Secret of bench/backend-policy.yaml.tmpl to the HTTP Backend",
            plan.agent_args.iter().map(|a| format!(" {a}")).collect::<String>()
        ),
        format!(
            "plaintext Backend: `bench/api-plain` for api.redirector.test:{PLAIN_PORT}, no `tls`, \
             `protocol: TCP`: the agent forwards the bytes unchanged; a redirector run in which the \
             agent accepted no connection (`PassiveOpens` of the node namespace) fails as not \
             redirected; Backend: bench/backend-plain.yaml.tmpl"
        ),
        "the client speaks HTTP/1.1 to every case (plaintext to the proxies and in the plaintext \
         cases, wrk's own TLS to nginx for direct TLS)"
            .to_owned(),
        "conntrack is on in the pod namespace for every case (the nat hook stays installed, as on a \
         Kubernetes node); pod and node: ip_local_port_range 1024-65535, tcp_tw_reuse=1"
            .to_owned(),
    ];
    let wants_haproxy = plan.cases.iter().any(|c| c.is_haproxy());
    if wants_haproxy && haproxy.is_none() {
        lines.push("HAProxy did not start (see its rows)".to_owned());
    }
    if plan.ceilings {
        lines.push(format!(
            "ceilings, once after the repetitions, no program attached to the pod cgroup: iperf3 \
             (`iperf3 -s -B 10.200.2.2` in ext, client in the pod netns and cgroup, `-R` so ext sends, \
             as nginx does in the bulk runs, {} s); `openssl speed` (one process); \
             `cargo build --release -p redirector --example tls_speed` run on the host (one thread, \
             1 GiB, then 2 s of full handshakes)",
            plan.duration_s
        ));
    }
    lines
}

/// The exact wrk command lines of the planned cases and workloads, in run order.
pub(super) fn commands(plan: &Plan) -> Vec<String> {
    let mut lines = Vec::new();
    for case in &plan.cases {
        lines.push(format!("# {}", case.label()));
        for workload in &plan.workloads {
            let args: Vec<String> = workload
                .args(plan.duration_s, case.base_url())
                .into_iter()
                .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
                .collect();
            lines.push(format!("wrk {}", args.join(" ")));
        }
    }
    if plan.ceilings {
        lines.push("# ceilings".to_owned());
        lines.push(format!(
            "iperf3 {}  # in the pod; iperf3 -s -B 10.200.2.2 in ext",
            ceilings::iperf3_args(plan.duration_s).join(" ")
        ));
        let seconds = ceilings::openssl_seconds(plan.duration_s);
        for block in [16384, 1024] {
            lines.push(format!(
                "openssl {}",
                ceilings::openssl_args(seconds, block).join(" ")
            ));
        }
        lines.push(format!(
            "target/release/examples/tls_speed {}",
            ceilings::TLS_SPEED_ARGS.join(" ")
        ));
    }
    lines
}

/// Machine and software versions for the report header.
pub(super) fn machine(
    tools: &Tools,
    redirector: Result<&Path, &str>,
    custom_bin: bool,
) -> Vec<(String, String)> {
    let cpu_model = facts::cpu_model().unwrap_or_else(|| "unknown CPU".into());
    let kernel = facts::kernel_release().unwrap_or_else(|| "unknown".into());
    let nproc = facts::cpu_count();
    let date = facts::utc_date("%Y-%m-%d %H:%M UTC").unwrap_or_default();
    let rev = facts::git(&["rev-parse", "--short", "HEAD"]).unwrap_or_default();
    let dirty = facts::agent_sources_changed();
    let redirector = match redirector {
        Ok(bin) if custom_bin => format!(
            "{} (given with --redirector-bin; the workspace is at commit {rev})",
            bin.display()
        ),
        Ok(bin) => format!(
            "commit {rev}{} ({})",
            if dirty { " + uncommitted changes" } else { "" },
            bin.display()
        ),
        Err(why) => format!("commit {rev} (no binary: {})", report::one_line(why)),
    };
    vec![
        ("date".into(), date),
        ("machine".into(), format!("{nproc} CPUs ({cpu_model}), kernel {kernel}")),
        ("redirector".into(), redirector),
        ("nginx".into(), tools::version(&tools.nginx, "-v")),
        ("HAProxy".into(), tools::version(&tools.haproxy, "-v")),
        ("wrk".into(), tools::version(&tools.wrk, "-v")),
        ("iperf3".into(), tools::version(&tools.iperf3, "--version")),
        ("OpenSSL".into(), tools::version(&tools.openssl, "version")),
        (
            "note".into(),
            "client, proxy and server share these CPUs: compare cases with each other, not with other machines"
                .into(),
        ),
    ]
}
