//! The main run after start-up: an idle window in which the agent's CPU use is measured,
//! then the changes, each a new one-Backend file renamed into the directory and timed
//! until the agent's `Backend address map updated ... added=1` line.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};

use super::case::Plan;
use super::launch::ScaleAgent;
use super::logs::{self, field_u64, ms_between, timestamp};
use super::results::{AfterStart, Change};
use super::{inspect, ms, workload};

/// How long one change may take before the benchmark gives up.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Idle window, then the changes.
pub fn after_start(
    plan: &Plan,
    agent: &mut ScaleAgent,
    pid: u32,
    map: &Path,
) -> Result<AfterStart> {
    let lines_before_idle = agent.logs()?.len();
    let cpu_before = inspect::cpu_seconds(pid)?;
    let idle_started = Instant::now();
    std::thread::sleep(plan.idle);
    let idle_s = idle_started.elapsed().as_secs_f64();
    let idle_cpu_s = inspect::cpu_seconds(pid)? - cpu_before;
    let mem_idle = inspect::memory(pid)?;
    let idle_map_updates = agent.logs()?[lines_before_idle..]
        .iter()
        .filter(|(_, l)| l.contains("Backend address map updated"))
        .count();
    println!(
        "    idle {idle_s:.1} s: {:.2} s CPU, VmRSS {}",
        idle_cpu_s,
        inspect::mib(mem_idle.rss_kib)
    );

    let mut changes = Vec::with_capacity(plan.changes);
    let mut renamed_at = Vec::with_capacity(plan.changes);
    let pauses_ms = (50, 250);
    let mut changes_cpu_s = 0.0;
    if plan.changes > 0 {
        let staging = plan.staging.context("a change run needs a staging dir")?;
        // Whatever the idle window logged is not a reply to a change.
        agent.skip_logged()?;
        for j in 0..plan.changes {
            let name = workload::change_name(j);
            let staged = staging.join(format!("{name}.yaml"));
            let target = plan.backends_dir.join(format!("zz-{name}.yaml"));
            std::fs::write(&staged, workload::xbackend(&name))
                .with_context(|| format!("cannot write {}", staged.display()))?;
            // Spread the changes over the agent's periodic work (hosts-file refresh)
            // instead of hitting it at a fixed phase: 50..250 ms, deterministic.
            let pause = pauses_ms.0 + (j as u64 * 37) % (pauses_ms.1 - pauses_ms.0);
            std::thread::sleep(Duration::from_millis(pause));
            let cpu_before = inspect::cpu_seconds(pid)?;
            let at = SystemTime::now();
            let started = Instant::now();
            std::fs::rename(&staged, &target).with_context(|| {
                format!("cannot rename {} -> {}", staged.display(), target.display())
            })?;
            let (seen, updated) = loop {
                let (seen, line) = agent
                    .wait_for_log("Backend address map updated", CHANGE_TIMEOUT)
                    .with_context(|| format!("change {name}: the map was not updated"))?;
                if field_u64(&line, "added") == Some(1) {
                    break (seen, line);
                }
            };
            let seen_ms = ms(seen.duration_since(started));
            let (_, applied) = agent
                .wait_for_log("Backends applied", CHANGE_TIMEOUT)
                .with_context(|| format!("change {name}: no `Backends applied` line"))?;
            changes_cpu_s += inspect::cpu_seconds(pid)? - cpu_before;
            changes.push(Change {
                seen_ms,
                log_ms: timestamp(&updated).map(|t| ms_between(at, t)),
                applied_ms: field_u64(&applied, "elapsed_ms"),
                ..Change::default()
            });
            renamed_at.push((name, at, timestamp(&updated)));
        }
        println!(
            "    {} changes applied; median {:.0} ms",
            changes.len(),
            logs::Summary::of(&changes.iter().map(|c| c.seen_ms).collect::<Vec<_>>())
                .map_or(0.0, |s| s.median)
        );
    }
    // The `Backend added` line of each change, found afterwards so that waiting for it
    // can never delay the measurement of the map update.
    let all = agent.logs()?;
    for (change, (name, at, updated)) in changes.iter_mut().zip(&renamed_at) {
        let needle = format!("backend={}/{name} ", workload::NAMESPACE);
        let added = all
            .iter()
            .find(|(_, l)| l.contains("Backend added") && l.contains(&needle))
            .and_then(|(_, l)| timestamp(l));
        change.reload_ms = added.map(|t| ms_between(*at, t));
        change.apply_ms = added.zip(*updated).map(|(a, u)| ms_between(a, u));
    }
    let mem_changes = inspect::memory(pid)?;
    let (map_entries_changes, _) = inspect::map_entries(map)?;
    Ok(AfterStart {
        idle_s,
        idle_cpu_s,
        mem_idle,
        changes,
        pauses_ms,
        mem_changes,
        changes_cpu_s,
        map_entries_changes,
        idle_map_updates,
    })
}
