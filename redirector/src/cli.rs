//! Command line: the contract in DESIGN.md ("CLI contract"). Flags may be added, never
//! renamed.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::proxy::KernelTlsMode;

mod crd;
mod egress;

pub use crd::{CrdArgs, GatewayApi};
pub use egress::EgressArgs;

/// Transparent egress redirector: sends connects to declared external services
/// (Gateway API XBackend objects) through a local proxy that enforces the Backend's TLS.
#[derive(Debug, Parser)]
#[command(
    version,
    propagate_version = true,
    after_help = "Log levels: REDIRECTOR_LOG takes tracing filter directives (default \
                  `info`; e.g. REDIRECTOR_LOG=redirector=debug)."
)]
pub struct Cli {
    /// Log format: human-readable text, or one JSON object per line for collectors.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendScope {
    Namespace,
    Cluster,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the node agent: load and attach the eBPF programs, load Backends, proxy.
    ///
    /// Needs CAP_BPF and CAP_NET_ADMIN (root has both; see deploy/daemonset.yaml).
    /// Programs and maps are pinned under --bpffs and stay attached after the agent
    /// exits, so connects to Backends are never silently sent direct while it restarts;
    /// `redirector uninstall` removes them.
    Run(Box<RunArgs>),
    /// Validate Backend YAML offline: one line per problem, exit status 1 if any.
    Check(CheckArgs),
    /// Print the Backends of a running agent: state, addresses, TLS, active connections.
    Status(StatusArgs),
    /// Print the XBackend and BackendPolicy CustomResourceDefinitions
    /// (`redirector crd | kubectl apply -f -`).
    ///
    /// XBackend in upstream's newest schema by default; `--gateway-api v1.6` for Gateway
    /// API v1.6.1. Install them once per cluster, apart from the agent (deploy/crd/), and
    /// the XBackend CRD only where no newer one is installed: another implementation may
    /// own it (`--backend-policy` prints the BackendPolicy CRD alone).
    Crd(CrdArgs),
    /// Detach the programs and remove every pin under --bpffs.
    ///
    /// Also sets net.ipv4.tcp_migrate_req back to its value from before the agent set it
    /// to 1, if the agent changed it (an agent's exit does not: the agent replacing it
    /// during an upgrade needs it). The setting is per network namespace: run uninstall in
    /// the agent's (the host's, for an agent on the host network); elsewhere it only says
    /// which namespace and value to restore.
    Uninstall(UninstallArgs),
    /// Ask this pod's own agent, over its --admin-socket, whether it is ready or alive
    /// (exit status 0 if so): for exec probes, which stay with their own agent when two
    /// run on a node during an upgrade.
    Probe(ProbeArgs),
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// `ready` (/readyz) or `live` (/healthz).
    #[arg(value_enum)]
    pub what: ProbeKind,
    /// The agent's --admin-socket.
    #[arg(long, value_name = "PATH")]
    pub admin_socket: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProbeKind {
    Ready,
    Live,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The agent's --admin-addr.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:15000")]
    pub admin_addr: SocketAddr,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Directory of Kubernetes YAML (XBackend, and the ConfigMaps and Secrets they
    /// reference); read recursively and watched, may be given several times.
    #[arg(
        long = "backends",
        value_name = "DIR",
        required_unless_present = "kubernetes",
        conflicts_with = "kubernetes"
    )]
    pub backends: Vec<PathBuf>,

    /// Take Backends from the Kubernetes API (XBackends of all namespaces, and the
    /// ConfigMaps and Secrets they reference) instead of a directory.
    #[arg(long, requires = "node_name")]
    pub kubernetes: bool,

    /// kubeconfig for --kubernetes (default: the in-cluster service account).
    #[arg(long, value_name = "PATH", requires = "kubernetes")]
    pub kubeconfig: Option<PathBuf>,

    /// Namespace of the Lease that elects the one agent writing XBackend status
    /// (--kubernetes).
    #[arg(long, value_name = "NAMESPACE", default_value = crate::kubernetes::lease::DEFAULT_NAMESPACE)]
    pub lease_namespace: String,

    /// This node's name (--kubernetes): only its pods are scoped.
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,

    /// With --kubernetes: `namespace` applies a Backend to the pods of its own namespace
    /// only; `cluster` applies every Backend to every process in --cgroup. (Directory
    /// Backends always apply cluster-wide.)
    #[arg(long, value_enum, default_value_t = BackendScope::Namespace)]
    pub backend_scope: BackendScope,

    /// Where pod cgroups are searched (default: --cgroup). The top of kubelet's pod tree
    /// (`kubepods`, `kubepods.slice`) is found below it too: from under it, connects to
    /// Backend addresses by pods not mapped yet are refused rather than sent direct.
    #[arg(long, value_name = "PATH")]
    pub pod_cgroup_root: Option<PathBuf>,

    /// cgroup v2 directory whose processes are redirected (default: the cgroup2 root).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    /// Where redirected connects go: one IPv4 and/or one IPv6 address. Connects of a
    /// family without a proxy address are not redirected (logged at start-up).
    #[arg(long = "proxy-addr", value_name = "IP:PORT", required = true)]
    pub proxy_addrs: Vec<SocketAddr>,

    /// Threads that run the proxy and everything else (default: one per CPU). A node
    /// that reserves the agent one core gets less context switching with 1, which runs
    /// tokio's current-thread scheduler.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub worker_threads: Option<u16>,

    /// Kernel TLS for upstream TLS connections: after rustls's TLS 1.3 handshake the
    /// session keys go to the kernel, which then seals and opens records on the socket,
    /// and a bytes Backend's connection is spliced (its bytes never enter user space).
    /// `auto` probes the kernel at start and keeps TLS in rustls where it has none
    /// (CONFIG_TLS); `require` refuses to start there. Connections handed over are not
    /// resumed later (their session tickets are dropped), end on a server's KeyUpdate,
    /// and end at the cipher's record limit (AES-GCM: 2^24 writes) instead of rekeying;
    /// HTTP Backends lend such a connection no more once a 16th of the limit is left.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = KernelTlsMode::Off)]
    pub kernel_tls: KernelTlsMode,

    /// Admin HTTP endpoint: /healthz, /readyz, /metrics.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:15000")]
    pub admin_addr: SocketAddr,

    /// Also serve the admin endpoints on this unix socket, which belongs to this agent
    /// alone: during an upgrade two agents share --admin-addr (either may answer), so
    /// probes should use `redirector probe --admin-socket PATH`.
    #[arg(long, value_name = "PATH")]
    pub admin_socket: Option<PathBuf>,

    #[command(flatten)]
    pub bpffs: BpffsArg,

    #[command(flatten)]
    pub limits: Limits,

    #[command(flatten)]
    pub dns: DnsArgs,

    #[command(flatten)]
    pub http: HttpArgs,

    #[command(flatten)]
    pub egress: EgressArgs,
}

/// How HTTP Backends (`spec.protocol` other than TCP) are proxied.
#[derive(Debug, Clone, Args)]
pub struct HttpArgs {
    /// A pooled upstream connection idle this long is lent no more, and closed within
    /// one more such period. Keep it below the servers' own keep-alive timeouts (nginx:
    /// 75s) so the proxy, not the server, usually closes it; a request that meets a
    /// connection the server closed anyway is retried once on a fresh one, as nothing
    /// of it was sent.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub http_pool_idle_timeout: Duration,

    /// Longest wait for an upstream's response head, counted from when the request,
    /// body included, has been sent (an upload may take as long as it takes); then the
    /// client gets 504. Upgrades (WebSocket) too. Not applied to MCP Backends, whose
    /// streams may stay silent (only --idle-timeout).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub http_response_timeout: Duration,

    /// Write one JSON line per HTTP request (`"event":"request"`: time, backend, source,
    /// method, authority, path, status, bytes, duration_ms, upstream_protocol, `-` for
    /// the proxy's own answers) and per connection of bytes Backends, passthroughs and
    /// refusals (`"event":"connection"`: time, backend, source, destination, port,
    /// bytes_sent, bytes_received, duration_ms, outcome, reason) to this file (`-`:
    /// standard output). `source`: namespace, pod, service_account (Kubernetes) and
    /// cgroup (the path below --cgroup).
    #[arg(long, value_name = "PATH")]
    pub access_log: Option<PathBuf>,
}

/// How Backend hostnames are kept resolved.
#[derive(Debug, Clone, Args)]
pub struct DnsArgs {
    /// Shortest time between resolutions of a name (TTLs below are raised to it; also
    /// the refresh period of /etc/hosts entries and the retry after a failure).
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub dns_min_ttl: Duration,

    /// Longest time an answer is used before resolving again.
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub dns_max_ttl: Duration,

    /// How long an address that left the DNS answers stays redirected, for clients that
    /// still hold the old answer.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub dns_grace: Duration,

    #[command(flatten)]
    pub capture: CaptureArgs,
}

/// DNS capture: pods' queries for Backend names are answered by the agent.
#[derive(Debug, Clone, Args)]
pub struct CaptureArgs {
    /// Do not capture pods' DNS. Queries then go to their nameservers, and a connect is
    /// recognised by address alone: when the pod's nameserver answers a Backend name
    /// with an address the agent's resolver did not see (CDN rotation, geo DNS, TTL
    /// races), the connect goes direct, and for a TLS Backend its plaintext leaves the
    /// node. With capture on (the default), UDP and TCP queries to port 53 of any
    /// nameserver reach the agent: Backend names get virtual addresses that name their
    /// Backend exactly; everything else is forwarded to the nameserver asked, unchanged.
    #[arg(long)]
    pub no_dns_capture: bool,

    /// Port of the agent's DNS listener, on each --proxy-addr address (UDP and TCP).
    #[arg(long, value_name = "PORT", default_value_t = 15053)]
    pub dns_port: u16,

    /// TTL of the agent's answers for Backend names. Short, so pods pick up a deleted
    /// Backend soon; its virtual addresses keep working for this plus --dns-grace.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub dns_answer_ttl: Duration,

    /// Virtual IPv4 addresses for Backend hostnames: a range inside 240.0.0.0/4, which
    /// is reserved (RFC 1112) and never assigned to a real network, so a virtual address
    /// can never be somebody's real one. Prefix length 8..=24.
    #[arg(long, value_name = "CIDR", default_value = "240.0.0.0/16")]
    pub virtual_ipv4_range: crate::virtual_hosts::Ipv4Range,

    /// Virtual IPv6 addresses for Backend hostnames: a /96 of a unique local address
    /// prefix (RFC 4193, fd00::/8; the default's global ID spells "redir"), never
    /// routed on the Internet. The same offset is used as in the IPv4 range.
    #[arg(long, value_name = "CIDR", default_value = "fd72:6564:6972::/96")]
    pub virtual_ipv6_range: crate::virtual_hosts::Ipv6Range,
}

#[derive(Debug, Args)]
pub struct BpffsArg {
    /// Directory on a bpf filesystem where programs, links and maps are pinned.
    #[arg(long, value_name = "DIR", default_value = "/sys/fs/bpf/redirector")]
    pub bpffs: PathBuf,
}

/// Sizes and timeouts; the defaults suit a node with a few thousand connections.
#[derive(Debug, Clone, Args)]
pub struct Limits {
    /// Capacity of the Backend address map ((address, port) entries).
    #[arg(long, default_value_t = 65_536)]
    pub max_backend_addresses: u32,

    /// Capacity of the per-connection record maps (redirected sockets alive at once,
    /// and accepted-but-not-yet-consumed records). LRU eviction is only a backstop.
    #[arg(long, default_value_t = 65_536)]
    pub max_connections: u32,

    /// Capacity of the pod-cgroup -> scope map (pods on the node, when Backends are
    /// scoped by namespace), and of the pod-cgroup -> egress policy map.
    #[arg(long, default_value_t = 16_384)]
    pub max_scoped_cgroups: u32,

    /// Time allowed to connect to the original destination.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub connect_timeout: Duration,

    /// A proxied connection with no bytes in either direction for this long is closed
    /// (HTTP client connections too, with requests in progress).
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    pub idle_timeout: Duration,

    /// On SIGTERM/SIGINT, how long open connections may take to finish.
    #[arg(long, value_parser = parse_duration, default_value = "25s")]
    pub drain_timeout: Duration,

    /// Largest per-direction copy buffer of a proxied connection, in bytes. Buffers start
    /// at 4 KiB, double while reads fill them, and are given back while a direction
    /// waits; plaintext on both sides moves through splice(2) instead. Full TLS records
    /// from an upstream are gathered into writes of two records, doubling up to this size
    /// (rounded down to whole 16 KiB records; below two records, none are gathered).
    #[arg(long, default_value_t = 64 * 1024)]
    pub buffer_size: usize,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Directories of Backend YAML to validate.
    #[arg(value_name = "DIR", required = true)]
    pub dirs: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct UninstallArgs {
    #[command(flatten)]
    pub bpffs: BpffsArg,
}

/// Parses `500ms`, `10s`, `5m`, `1h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit (use ms, s, m or h)"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a number"))?;
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{text}` (use ms, s, m or h)"
            ));
        }
    };
    let millis = number
        .checked_mul(millis_per_unit)
        .ok_or_else(|| format!("`{text}` is too long"))?;
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("3d").is_err());
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
