//! What was measured: every run of every (case, workload) that was planned, and the
//! medians the report is made of.

use super::super::servers::MachineCpu;
use super::cases::{CASES, Case};
use super::format::one_line;
use super::wrk::{self, Workload};

pub(super) fn workload_index(w: Workload) -> usize {
    match w {
        Workload::Keepalive => 0,
        Workload::Close => 1,
        Workload::Bulk => 2,
    }
}

/// One wrk run that could be counted.
#[derive(Debug, Clone)]
pub struct Sample {
    pub rep: u32,
    pub wrk: wrk::Report,
    /// CPU seconds the proxy process spent during the run (none for the direct case).
    pub proxy_cpu_s: Option<f64>,
    /// Of those, the seconds in user space (the rest is the kernel's, on its behalf).
    pub proxy_user_s: Option<f64>,
    /// The whole machine's CPU time across the run: what wrk, nginx, the proxy and the
    /// kernel's softirqs and threads used together, and what was left idle.
    pub machine: Option<MachineCpu>,
    /// CPU seconds nginx (master + worker) spent during the run.
    pub nginx_cpu_s: f64,
    /// TCP connections nginx accepted during the run (the ext namespace's
    /// `Tcp: PassiveOpens`): what a proxy's upstream pooling saves shows here.
    pub upstream_conns: Option<u64>,
}

/// Everything measured, by case and workload.
#[derive(Debug)]
pub struct Results {
    /// The cases and workloads that were to run (`--cases`, `--workloads`), in run order:
    /// the report shows only these, so a partial run does not read as failures.
    pub(super) cases: Vec<Case>,
    pub(super) workloads: Vec<Workload>,
    /// [case][workload]: the samples, a failed run as its reason.
    pub(super) runs: [[Vec<Result<Sample, String>>; 3]; CASES],
    /// Why a case was given up (it cannot run at all).
    pub(super) dead: [Option<String>; CASES],
}

impl Results {
    pub fn new(cases: &[Case], workloads: &[Workload]) -> Results {
        Results {
            cases: cases.to_vec(),
            workloads: workloads.to_vec(),
            runs: Default::default(),
            dead: Default::default(),
        }
    }

    /// Whether the plan includes this case and workload.
    pub fn planned(&self, case: Case, workload: Workload) -> bool {
        self.cases.contains(&case) && self.workloads.contains(&workload)
    }

    pub fn record(&mut self, case: Case, workload: Workload, run: Result<Sample, String>) {
        self.runs[case.index()][workload_index(workload)].push(run);
    }

    pub fn give_up(&mut self, case: Case, reason: String) {
        let slot = &mut self.dead[case.index()];
        if slot.is_none() {
            *slot = Some(one_line(&reason));
        }
    }

    pub fn is_dead(&self, case: Case) -> bool {
        self.dead[case.index()].is_some()
    }

    /// Whether the case produced a usable number for every planned workload.
    pub fn complete(&self, case: Case) -> bool {
        !self.is_dead(case) && self.workloads.iter().all(|&w| self.cell(case, w).is_ok())
    }

    /// The successful samples, or the first failure (a workload with any failed run is
    /// reported failed: a proxy that drops requests has no throughput to speak of).
    pub(super) fn cell(&self, case: Case, workload: Workload) -> Result<Vec<&Sample>, String> {
        if let Some(reason) = &self.dead[case.index()] {
            return Err(reason.clone());
        }
        let runs = &self.runs[case.index()][workload_index(workload)];
        if let Some(Err(reason)) = runs.iter().find(|r| r.is_err()) {
            return Err(reason.clone());
        }
        let samples: Vec<&Sample> = runs.iter().filter_map(|r| r.as_ref().ok()).collect();
        if samples.is_empty() {
            return Err("not run".into());
        }
        Ok(samples)
    }

    /// Median of `f` over the case's samples of `workload`.
    pub(super) fn median(
        &self,
        case: Case,
        workload: Workload,
        f: impl Fn(&Sample) -> Option<f64>,
    ) -> Option<f64> {
        let samples = self.cell(case, workload).ok()?;
        median(samples.iter().filter_map(|s| f(s)).collect())
    }
}

/// The middle value (mean of the two middle ones for an even count).
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

/// CPU seconds per GiB read by the client (the bulk workload's cost of moving bytes).
pub(super) fn per_gib(cpu_s: Option<f64>, read_bytes: f64) -> Option<f64> {
    let cpu = cpu_s?;
    (read_bytes > 0.0).then(|| cpu / (read_bytes / f64::from(1u32 << 30)))
}

/// CPU seconds per 10,000 requests.
pub(super) fn per_10k(cpu_s: Option<f64>, requests: u64) -> Option<f64> {
    let cpu = cpu_s?;
    (requests > 0).then(|| cpu / requests as f64 * 10_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }
}
