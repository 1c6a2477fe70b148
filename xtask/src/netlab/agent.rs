//! The redirector agent under test, started the way a node runs it.
//!
//! The agent runs in the node namespace, but not through `ip netns exec`: that remounts
//! `/sys`, which hides the cgroup2 mount the agent must attach to. Instead it gets a
//! private mount namespace (`unshare --mount`) where the node's hosts file and
//! resolv.conf are bind-mounted over `/etc`, then joins the node's network namespace
//! with `nsenter --net`. Optionally it first puts itself into the pod cgroup, like a
//! node agent that sits inside the cgroup it redirects.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, ExitStatus},
    sync::OnceLock,
    time::Duration,
};

use anyhow::{Context, Result};

use super::{ChildGuard, Finished, NODE_POD_V4, NODE_POD_V6, Stream, Topology};

/// The port the agent's proxy listens on in tests and the demo.
pub const PROXY_PORT: u16 = 15001;
/// How long the agent may take to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The binary chosen by [`use_redirector_bin`], if any.
static CHOSEN_BIN: OnceLock<PathBuf> = OnceLock::new();

/// Makes [`redirector_bin`] return `path` for the rest of the process (the benchmarks
/// run their own release build). The first choice stands: returns false if one was made.
pub fn use_redirector_bin(path: PathBuf) -> bool {
    CHOSEN_BIN.set(path).is_ok()
}

/// The `redirector` binary: the one chosen by [`use_redirector_bin`], else
/// `$REDIRECTOR_BIN` (set by `cargo xtask test`), else the workspace's debug build.
pub fn redirector_bin() -> Result<PathBuf> {
    let path = match (CHOSEN_BIN.get(), std::env::var_os("REDIRECTOR_BIN")) {
        (Some(chosen), _) => chosen.clone(),
        (None, Some(path)) => PathBuf::from(path),
        (None, None) => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/redirector"),
    };
    anyhow::ensure!(
        path.is_file(),
        "redirector binary not found at {}: run `cargo xtask test` (or `cargo build -p redirector`)",
        path.display()
    );
    Ok(path)
}

/// The proxy addresses on the node's pod-facing link.
pub fn proxy_addrs() -> [SocketAddr; 2] {
    [
        SocketAddr::new(NODE_POD_V4.into(), PROXY_PORT),
        SocketAddr::new(NODE_POD_V6.into(), PROXY_PORT),
    ]
}

/// How to start the agent.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub backends: PathBuf,
    pub bpffs: PathBuf,
    /// Join the pod cgroup before starting (the agent is then subject to its own hooks).
    pub in_pod_cgroup: bool,
    /// Attach to this cgroup instead of the pod cgroup.
    pub cgroup: Option<PathBuf>,
    /// Extra `redirector run` arguments.
    pub extra_args: Vec<String>,
    /// Run the agent with this RLIMIT_NOFILE, soft and hard (`prlimit`).
    pub open_files_limit: Option<u64>,
    /// Give the agent only the IPv4 proxy address (a single-stack node).
    pub ipv4_proxy_only: bool,
    /// Also append the agent's log to this file as it logs, as `redirector run ... 2>>
    /// FILE` would (the lines still reach [`Agent::logs`]).
    pub log_file: Option<PathBuf>,
}

impl AgentConfig {
    pub fn new(backends: impl Into<PathBuf>, bpffs: impl Into<PathBuf>) -> Self {
        Self {
            backends: backends.into(),
            bpffs: bpffs.into(),
            in_pod_cgroup: true,
            cgroup: None,
            extra_args: Vec::new(),
            open_files_limit: None,
            ipv4_proxy_only: false,
            log_file: None,
        }
    }
}

/// A running agent; SIGKILLed on drop.
pub struct Agent {
    child: ChildGuard,
    /// The ready line it logged.
    pub ready_line: String,
}

impl Agent {
    /// Starts `redirector run` in the node and waits for its ready line. The node's
    /// hosts file must have been written (`topology.node.set_hosts`).
    pub fn start(topology: &Topology, config: &AgentConfig) -> Result<Agent> {
        let mut agent = Self::spawn(topology, config)?;
        agent.wait_for_ready()?;
        Ok(agent)
    }

    /// Starts `redirector run` without waiting for it to become ready (`ready_line` stays
    /// empty until [`Agent::wait_for_ready`]).
    pub fn spawn(topology: &Topology, config: &AgentConfig) -> Result<Agent> {
        let mut command = Self::command(topology, config)?;
        let copy = (config.log_file.as_ref())
            .map(|path| {
                (std::fs::OpenOptions::new().create(true).append(true))
                    .open(path)
                    .with_context(|| format!("cannot open {}", path.display()))
            })
            .transpose()?;
        let child = ChildGuard::spawn_copying("agent", &mut command, Stream::Stderr, copy)?;
        Ok(Agent {
            child,
            ready_line: String::new(),
        })
    }

    /// Waits for the ready line and keeps it in `ready_line`.
    pub fn wait_for_ready(&mut self) -> Result<()> {
        self.ready_line = self
            .child
            .wait_for_line("ready:", READY_TIMEOUT)
            .context("the agent did not become ready")?;
        Ok(())
    }

    /// Runs `redirector run` to its exit (for start-ups that must fail).
    pub fn run_to_exit(topology: &Topology, config: &AgentConfig) -> Result<Finished> {
        let mut command = Self::command(topology, config)?;
        let mut child = ChildGuard::spawn_watching("agent", &mut command, Stream::Stderr)?;
        child.finish(READY_TIMEOUT)
    }

    fn command(topology: &Topology, config: &AgentConfig) -> Result<Command> {
        let etc = topology.node.etc_dir();
        let procs = if config.in_pod_cgroup {
            topology.pod_cgroup.procs_file().display().to_string()
        } else {
            String::new()
        };
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(concat!(
                r#"mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf && "#,
                r#"{ [ -z "$3" ] || echo $$ > "$3"; } && netns="$4" && shift 4 && "#,
                r#"exec nsenter --net="/run/netns/$netns" "$@""#
            ))
            .arg("sh")
            .arg(etc.join("hosts"))
            .arg(etc.join("resolv.conf"))
            .arg(procs)
            .arg(topology.node.name());
        if let Some(limit) = config.open_files_limit {
            command
                .arg("prlimit")
                .arg(format!("--nofile={limit}:{limit}"));
        }
        command.arg(redirector_bin()?).arg("run");
        // A Kubernetes-sourced agent has no Backend directory.
        if !config.extra_args.iter().any(|a| a == "--kubernetes") {
            command.arg("--backends").arg(&config.backends);
        }
        command
            .arg("--cgroup")
            .arg(
                config
                    .cgroup
                    .as_deref()
                    .unwrap_or(topology.pod_cgroup.path()),
            )
            .arg("--bpffs")
            .arg(&config.bpffs);
        for addr in proxy_addrs() {
            if config.ipv4_proxy_only && addr.is_ipv6() {
                continue;
            }
            command.arg("--proxy-addr").arg(addr.to_string());
        }
        command.args(&config.extra_args).env("NO_COLOR", "1");
        Ok(command)
    }

    /// Waits for the next log line containing `needle`.
    pub fn wait_for_log(&mut self, needle: &str) -> Result<String> {
        self.child.wait_for_line(needle, READY_TIMEOUT)
    }

    /// Everything the agent logged so far.
    pub fn logs(&self) -> Vec<String> {
        self.child.lines(Stream::Stderr)
    }

    /// SIGKILL, as a crash or an OOM kill would.
    pub fn kill(mut self) -> Result<ExitStatus> {
        self.child.signal(libc::SIGKILL)?;
        Ok(self.child.finish(READY_TIMEOUT)?.status)
    }

    /// SIGTERM, as the kubelet sends, then waits for the exit.
    pub fn terminate(mut self) -> Result<Finished> {
        self.child.signal(libc::SIGTERM)?;
        self.child.finish(READY_TIMEOUT)
    }
}

/// Runs `redirector <args>` to completion (check, uninstall).
pub fn redirector(args: &[&str]) -> Result<std::process::Output> {
    let bin = redirector_bin()?;
    Command::new(&bin)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .with_context(|| format!("running {} {}", bin.display(), args.join(" ")))
}

/// The value of the sample `name{labels..}` (other labels ignored) in the Prometheus
/// text of the agent's `/metrics`.
pub fn metric_sample(metrics: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (label_set, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        let all = labels.iter().all(|(key, wanted)| {
            label_set
                .split(',')
                .any(|pair| pair == format!("{key}=\"{wanted}\""))
        });
        all.then(|| value.trim().parse().ok()).flatten()
    })
}
