//! One case's connects: `netprobe connect-many` batches in the pod netns and a cgroup,
//! with connect4's statistics read around each.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use xtask::netlab::{Cgroup, ChildGuard, Topology, in_cgroup_in_netns};

use super::cases::{Outcome, Round};
use super::{BenchHooksArgs, stats};

/// How long one batch of connects may take.
const BATCH_TIMEOUT: Duration = Duration::from_secs(600);

/// Where and how one case's connects are made.
pub struct Bed<'a> {
    pub topology: &'a Topology,
    pub probe: &'a Path,
    pub cgroup: &'a Cgroup,
    pub target: SocketAddr,
    pub expect: Outcome,
    pub prog: u64,
}

impl Bed<'_> {
    /// A warm-up batch, then the measured rounds.
    pub fn measure(&self, args: &BenchHooksArgs) -> Result<Vec<Round>> {
        if args.warmup > 0 {
            self.batch(args.warmup).context("warm-up")?;
        }
        let mut rounds = Vec::new();
        for _ in 0..args.rounds {
            let before = stats::prog_stats(self.prog)?;
            let elapsed_ns = self.batch(args.connects)?;
            let after = stats::prog_stats(self.prog)?;
            let runs = after.run_cnt.saturating_sub(before.run_cnt);
            let time = after.run_time_ns.saturating_sub(before.run_time_ns);
            ensure!(
                runs >= args.connects,
                "connect4 ran {runs} times for {} connects (are BPF stats still enabled?)",
                args.connects
            );
            let round = Round {
                ns_per_run: time as f64 / runs as f64,
                runs,
                wall_us: elapsed_ns as f64 / args.connects as f64 / 1000.0,
            };
            println!(
                "    {:.1} ns per run ({runs} runs); {:.1} us per connect for the client",
                round.ns_per_run, round.wall_us
            );
            rounds.push(round);
        }
        Ok(rounds)
    }

    /// `netprobe connect-many TARGET COUNT` in the pod netns and `cgroup`; fails unless
    /// every connect ended as expected. Returns the client's elapsed ns.
    fn batch(&self, count: u64) -> Result<u64> {
        let args = [
            "connect-many".to_owned(),
            self.target.to_string(),
            count.to_string(),
        ];
        let mut command = in_cgroup_in_netns(self.cgroup, &self.topology.pod, self.probe, args);
        let mut client = ChildGuard::spawn("client", &mut command)?;
        let done = client.finish(BATCH_TIMEOUT)?;
        ensure!(
            done.status.success(),
            "netprobe connect-many: {}",
            done.status
        );
        let line = done.stdout.first().cloned().unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("netprobe printed {line:?}; stderr {:?}", done.stderr))?;
        let expected = json[self.expect.key()].as_u64().unwrap_or(0);
        ensure!(
            expected == count,
            "expected {count} connects to end {:?}, got {line}",
            self.expect
        );
        Ok(json["elapsed_ns"].as_u64().unwrap_or(0))
    }
}
