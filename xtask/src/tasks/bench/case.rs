//! One repetition of one case: switching it on (DNAT to the port of its HAProxy
//! frontend, or an agent with the case's Backend), running its workloads and switching it
//! off again.

use std::{net::SocketAddr, path::PathBuf, process::Command};

use anyhow::{Context as _, Result, bail};
use xtask::netlab::{
    Bpffs, EXT_V4, Topology,
    agent::{self, Agent, AgentConfig},
};

use super::{
    Plan,
    report::{Case, Results},
    servers::{self, BackendSpec, Dnat, Haproxy, Nginx},
    tools,
};

/// What one case needs from the test bed.
pub(super) struct Bed<'a> {
    pub(super) topology: &'a Topology,
    pub(super) nginx: &'a Nginx,
    pub(super) haproxy: Option<&'a Haproxy>,
    pub(super) dnat: Option<&'a Dnat>,
    pub(super) bpffs: &'a Bpffs,
    /// One per redirector case.
    pub(super) backends: Vec<BackendDir>,
}

/// The Backend directory of one redirector case.
pub(super) struct BackendDir {
    pub(super) case: Case,
    pub(super) path: PathBuf,
    /// What `redirector check` said about it, if it objected.
    pub(super) check_problems: Option<String>,
}

impl Bed<'_> {
    /// One repetition of one case: switch it on, run every workload, switch it off.
    pub(super) fn run_case(
        &self,
        plan: &Plan,
        rep: u32,
        case: Case,
        results: &mut Results,
        agent_threads: &mut Option<u32>,
    ) -> Result<()> {
        match case {
            Case::Direct | Case::DirectPlain => {
                self.ensure_detached()?;
                self.workloads(plan, rep, case, None, results, || None);
                Ok(())
            }
            Case::HaproxyTcp | Case::HaproxyHttp | Case::HaproxyPlain => {
                self.ensure_detached()?;
                let (Some(haproxy), Some(dnat)) = (self.haproxy, self.dnat) else {
                    bail!("HAProxy is not running");
                };
                let Some(frontend) = haproxy.addr(case) else {
                    bail!("HAProxy has no frontend for {}", case.label());
                };
                // Only the port this case's client dials: 443, or 80 for plaintext.
                let service = SocketAddr::new(EXT_V4.into(), case.port());
                dnat.enable(service, frontend)?;
                self.workloads(plan, rep, case, Some(haproxy.pid()), results, || None);
                dnat.disable()
            }
            Case::RedirectorTcp
            | Case::RedirectorTcpDeny
            | Case::RedirectorHttp
            | Case::RedirectorHttpPolicy
            | Case::RedirectorPlain => self.run_redirector(plan, rep, case, results, agent_threads),
        }
    }

    /// The agent lives for one repetition: started, measured, stopped and uninstalled, so
    /// the other cases run with no program attached to the pod cgroup, and every
    /// repetition starts with an empty upstream pool, as HAProxy's is after its idle
    /// connections were purged between its runs.
    fn run_redirector(
        &self,
        plan: &Plan,
        rep: u32,
        case: Case,
        results: &mut Results,
        agent_threads: &mut Option<u32>,
    ) -> Result<()> {
        let Some(backends) = self.backends.iter().find(|b| b.case == case) else {
            bail!("no Backend directory for {}", case.label());
        };
        let pins = self.bpffs.path().join("redirector");
        let mut config = AgentConfig::new(&backends.path, &pins);
        // Outside the pod cgroup, so it is found by its command line and measured alone.
        config.in_pod_cgroup = false;
        // The same one thread HAProxy gets (`nbthread 1`): equal resources.
        config.extra_args = vec!["--worker-threads".to_owned(), "1".to_owned()];
        config.extra_args.extend(plan.agent_args.iter().cloned());
        if case == Case::RedirectorTcpDeny {
            // Nothing but the Backend is reached by the bench's client: deny refuses
            // nothing it sends, and every packet of it passes the policy's checks.
            config
                .extra_args
                .extend(["--egress-policy".to_owned(), "deny".to_owned()]);
        }
        let agent = Agent::start(self.topology, &config).map_err(|e| {
            // The agent's own error first: the report cuts long reasons short.
            let text = format!("{e:#}");
            let mut reason = match text.split("stderr: ").find_map(log_message) {
                Some(error) => format!("the agent did not start: {error} ({text})"),
                None => format!("the agent did not start: {text}"),
            };
            if let Some(problems) = &backends.check_problems {
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
            if let Some(problems) = &backends.check_problems {
                hints.push(format!("redirector check: {problems}"));
            }
            (!hints.is_empty()).then(|| format!("agent: {}", hints.join(" / ")))
        };
        self.workloads(plan, rep, case, Some(pid), results, hint);
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

    /// Runs the planned workloads of `case`; stops at the first run in which not one
    /// request succeeded (the case does not work, and more runs would only cost time).
    fn workloads(
        &self,
        plan: &Plan,
        rep: u32,
        case: Case,
        proxy_pid: Option<u32>,
        results: &mut Results,
        hint: impl Fn() -> Option<String>,
    ) {
        for &workload in &plan.workloads {
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

    /// Fails if any program is attached to the pod cgroup (checked with bpftool when it is
    /// installed): the reference cases must run without the agent's hooks.
    pub(super) fn ensure_detached(&self) -> Result<()> {
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

/// The Backend a redirector case declares (none for the other cases).
pub(super) fn backend_spec(case: Case) -> Option<BackendSpec> {
    match case {
        Case::RedirectorTcp | Case::RedirectorTcpDeny => Some(BackendSpec::Tls {
            protocol: "TCP",
            policy: false,
        }),
        Case::RedirectorHttp => Some(BackendSpec::Tls {
            protocol: "HTTP",
            policy: false,
        }),
        Case::RedirectorHttpPolicy => Some(BackendSpec::Tls {
            protocol: "HTTP",
            policy: true,
        }),
        Case::RedirectorPlain => Some(BackendSpec::Plain {
            port: crate::tasks::bench::report::PLAIN_PORT,
        }),
        _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;

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
