//! One wrk run from the pod, the CPU the proxy and nginx spent during it (from
//! /proc/<pid>/stat before and after), the whole machine's (/proc/stat) and the TCP
//! connections nginx accepted (from its namespace's /proc/net/snmp): whether a proxy reuses upstream connections is a count,
//! not a guess from the throughput. For a redirector case the connections the agent
//! accepted are counted the same way (its node namespace): a plaintext client that was
//! not redirected would still get its answers, straight from nginx, so a run in which
//! the agent accepted nothing is refused.

use anyhow::{Result, bail};
use xtask::netlab::ChildGuard;

use super::{
    Plan,
    case::Bed,
    report::{Case, Sample},
    servers,
    wrk::{self, Workload},
};

impl Bed<'_> {
    /// One wrk run from the pod, with the CPU the proxy and nginx spent during it and the
    /// connections nginx accepted.
    pub(super) fn wrk(
        &self,
        plan: &Plan,
        rep: u32,
        case: Case,
        workload: Workload,
        proxy_pid: Option<u32>,
    ) -> Result<Sample> {
        let nginx_pids = self.nginx.pids();
        let cpu =
            |pids: &[u32]| -> Result<f64> { pids.iter().map(|&p| servers::cpu_seconds(p)).sum() };
        // The master's namespace is the ext namespace; only nginx accepts there.
        let opens = || servers::passive_opens(nginx_pids[0]).ok();
        // The node namespace: only the agent accepts there during a redirector run.
        let agent_pid = proxy_pid.filter(|_| case.is_redirector());
        let accepted = || agent_pid.map(servers::passive_opens).transpose();
        let accepted_before = accepted()?;
        let proxy_before = proxy_pid.map(servers::cpu_times).transpose()?;
        let machine_before = servers::machine_cpu()?;
        let nginx_before = cpu(&nginx_pids)?;
        let opens_before = opens();
        let mut command = self.topology.spawn_in_pod(
            &plan.tools.wrk,
            workload.args(plan.duration_s, case.base_url()),
        );
        let mut child = ChildGuard::spawn("wrk", &mut command)?;
        let finished = child.finish(plan.wrk_timeout())?;
        let proxy_after = proxy_pid.map(servers::cpu_times).transpose()?;
        let machine = machine_before.until(servers::machine_cpu()?);
        let nginx_after = cpu(&nginx_pids)?;
        let opens_after = opens();
        let accepted_after = accepted()?;
        if !finished.status.success() {
            bail!(
                "wrk exited with {}: {}",
                finished.status,
                finished.stderr.join(" ")
            );
        }
        let proxy = proxy_before.zip(proxy_after).map(|(b, a)| b.until(a));
        let report = wrk::parse(&finished.stdout.join("\n"))?;
        if let (Some(before), Some(after)) = (accepted_before, accepted_after)
            && after == before
            && report.requests > 0
        {
            bail!(
                "not redirected: wrk completed {} requests but the agent accepted no connection",
                report.requests
            );
        }
        Ok(Sample {
            rep,
            wrk: report,
            proxy_cpu_s: proxy.map(|p| p.user_s + p.system_s),
            proxy_user_s: proxy.map(|p| p.user_s),
            machine: Some(machine),
            nginx_cpu_s: nginx_after - nginx_before,
            upstream_conns: opens_before
                .zip(opens_after)
                .map(|(b, a)| a.saturating_sub(b)),
        })
    }
}
