//! The agent under test, started exactly as `netlab::agent::Agent` starts it (private
//! mount namespace with the node's hosts file, then the node's network namespace), except
//! that its log goes to a file that we tail.
//!
//! Why not `Agent` itself: its logs come through a pipe read by `ChildGuard`, whose
//! `wait_for_line` rescans every line since the last match on each new line while holding
//! the lock the reader thread needs. With the 10,000 `Backend added` lines of a start-up
//! that is quadratic; the reader falls behind, the pipe fills and the agent blocks in
//! `write(2)` on its log. Measured: logging those lines took 1.4 s instead of 0.1 s, and
//! the agent's CPU time until ready was a third of its wall time. A regular file never
//! blocks the writer, and the tail below looks at each line once.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use xtask::netlab::{
    ChildGuard, Topology,
    agent::{self, READY_TIMEOUT},
};

/// How often the log file is polled while waiting for a line.
const POLL: Duration = Duration::from_millis(1);

/// A running agent; SIGKILLed on drop (by its `ChildGuard`).
pub struct ScaleAgent {
    child: ChildGuard,
    log: LogTail,
}

impl ScaleAgent {
    /// Starts `redirector run --backends <backends> --bpffs <bpffs> <extra_args>` in the
    /// node, outside the pod cgroup, logging to `log_file`; returns once it is ready, with
    /// the ready line.
    pub fn start(
        topology: &Topology,
        backends: &Path,
        bpffs: &Path,
        extra_args: &[String],
        log_file: &Path,
    ) -> Result<(ScaleAgent, String)> {
        File::create(log_file).with_context(|| format!("cannot create {}", log_file.display()))?;
        let etc = topology.node.etc_dir();
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(concat!(
                r#"mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf && "#,
                r#"netns="$3" && log="$4" && shift 4 && "#,
                r#"exec nsenter --net="/run/netns/$netns" "$@" 2>>"$log""#
            ))
            .arg("sh")
            .arg(etc.join("hosts"))
            .arg(etc.join("resolv.conf"))
            .arg(topology.node.name())
            .arg(log_file)
            .arg(agent::redirector_bin()?)
            .arg("run")
            .arg("--backends")
            .arg(backends)
            .arg("--cgroup")
            .arg(topology.pod_cgroup.path())
            .arg("--bpffs")
            .arg(bpffs);
        for addr in agent::proxy_addrs() {
            command.arg("--proxy-addr").arg(addr.to_string());
        }
        command.args(extra_args).env("NO_COLOR", "1");
        let child = ChildGuard::spawn("agent", &mut command)?;
        let mut agent = ScaleAgent {
            child,
            log: LogTail::open(log_file)?,
        };
        let ready = agent
            .wait_for_log("ready:", READY_TIMEOUT)
            .context("the agent did not become ready")?;
        Ok((agent, ready.1))
    }

    /// The agent's pid (`unshare`, `sh` and `nsenter` all exec, so it is the agent's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the next log line containing `needle`; returns when we read it, and the
    /// line. Lines before it are passed over for good (they stay in [`ScaleAgent::logs`]).
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) -> Result<(Instant, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            self.log.poll()?;
            if let Some(found) = self.log.next_matching(needle) {
                return Ok(found);
            }
            if let Some(status) = self.child.wait_timeout(Duration::ZERO)? {
                bail!(
                    "the agent exited ({status}) before logging {needle:?}; its last lines:\n{}",
                    self.log.tail(20)
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "no agent log line containing {needle:?} within {timeout:?}; its last lines:\n{}",
                    self.log.tail(20)
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// Passes over every line logged so far: the next wait looks at newer lines only.
    pub fn skip_logged(&mut self) -> Result<()> {
        self.log.poll()?;
        self.log.cursor = self.log.lines.len();
        Ok(())
    }

    /// Every line the agent logged so far.
    pub fn logs(&mut self) -> Result<&[(Instant, String)]> {
        self.log.poll()?;
        Ok(&self.log.lines)
    }

    /// SIGTERM, then waits for the exit; fails unless it exits 0.
    pub fn terminate(mut self) -> Result<()> {
        self.child.signal(libc::SIGTERM)?;
        let finished = self.child.finish(READY_TIMEOUT)?;
        self.log.poll()?;
        if !finished.status.success() {
            bail!(
                "the agent exited with {}; its last lines:\n{}",
                finished.status,
                self.log.tail(20)
            );
        }
        Ok(())
    }
}

/// The lines of a growing log file, each with the instant we first read it.
struct LogTail {
    path: PathBuf,
    file: File,
    partial: Vec<u8>,
    lines: Vec<(Instant, String)>,
    /// Index of the first line not yet passed over by `next_matching`.
    cursor: usize,
}

impl LogTail {
    fn open(path: &Path) -> Result<LogTail> {
        Ok(LogTail {
            path: path.to_owned(),
            file: File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
            partial: Vec::new(),
            lines: Vec::new(),
            cursor: 0,
        })
    }

    /// Reads whatever was appended since the last call; echoes new lines on stderr.
    fn poll(&mut self) -> Result<()> {
        let mut chunk = Vec::new();
        self.file
            .read_to_end(&mut chunk)
            .with_context(|| format!("cannot read {}", self.path.display()))?;
        if chunk.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        self.partial.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = self.partial[start..].iter().position(|b| *b == b'\n') {
            let line = String::from_utf8_lossy(&self.partial[start..start + end])
                .trim_end_matches('\r')
                .to_owned();
            eprintln!("[agent:err] {line}");
            self.lines.push((now, line));
            start += end + 1;
        }
        self.partial.drain(..start);
        Ok(())
    }

    fn next_matching(&mut self, needle: &str) -> Option<(Instant, String)> {
        while self.cursor < self.lines.len() {
            let i = self.cursor;
            self.cursor += 1;
            if self.lines[i].1.contains(needle) {
                return Some(self.lines[i].clone());
            }
        }
        None
    }

    fn tail(&self, n: usize) -> String {
        let from = self.lines.len().saturating_sub(n);
        self.lines[from..]
            .iter()
            .map(|(_, l)| format!("  {l}\n"))
            .collect()
    }
}
