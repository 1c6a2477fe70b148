//! bench/history.md: every run of `cargo xtask bench` appends a short entry (date,
//! commit, binary, `--label`, crypto provider, medians, issue 14 targets), full run or
//! not, so a variant is judged by all its runs and not by the best one.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use super::{BenchArgs, Plan, report::HistoryHead};
use crate::tasks::machine as facts;

/// The head of a new history file.
const HEADER: &str = "# Benchmark history\n\n\
Every run of `cargo xtask bench` appends an entry here, full or quick, partial or not, \
whatever its numbers: date, commit, the agent binary (`--redirector-bin`), the variant \
being measured (`--label`), the rustls crypto provider (as `examples/tls_speed` reports \
it), the TCP congestion control of the bed (from 2026-11-27; earlier runs inherited the \
host's bbr), the ceilings, the medians per case and workload, and the issue 14 target \
rows. \
Quick runs (1 x 3 s) are smoke tests on a shared machine; compare variants on full \
runs of the same day. The full report of a run is in the file its entry names (only \
bench/results.md is committed).\n";

/// The entry's head for this run.
pub(super) fn head(
    args: &BenchArgs,
    plan: &Plan,
    redirector: &Result<PathBuf, String>,
    out: &Path,
) -> HistoryHead {
    let rev = facts::git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = facts::agent_sources_changed();
    let redirector = match (redirector, &args.redirector_bin) {
        (Ok(bin), Some(_)) => format!("--redirector-bin {}", bin.display()),
        (Ok(bin), None) => format!("built from the work tree ({})", bin.display()),
        (Err(why), _) => format!("none ({})", super::report::one_line(why)),
    };
    let cases: Vec<&str> = plan.cases.iter().map(|c| c.name()).collect();
    let workloads: Vec<&str> = plan.workloads.iter().map(|w| w.name()).collect();
    HistoryHead {
        date: facts::utc_date("%Y-%m-%d %H:%M UTC").unwrap_or_default(),
        commit: if dirty {
            format!("{rev} + uncommitted changes")
        } else {
            rev
        },
        redirector,
        label: args.label.clone().unwrap_or_default(),
        run: format!(
            "{}{} x {} s, cases {}, workloads {}{}, congestion control {}",
            if args.quick { "quick, " } else { "" },
            plan.reps,
            plan.duration_s,
            cases.join(","),
            workloads.join(","),
            if plan.agent_args.is_empty() {
                String::new()
            } else {
                format!(", agent args `{}`", plan.agent_args.join(" "))
            },
            plan.congestion_control.unwrap_or("inherited from the host"),
        ),
        report: out.display().to_string(),
    }
}

/// Appends `entry` to `path`, writing the header first if the file is new.
pub(super) fn append(path: &Path, entry: &str) -> Result<()> {
    let new = !path.exists();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    if new {
        file.write_all(HEADER.as_bytes())?;
    }
    file.write_all(entry.as_bytes())
        .with_context(|| format!("cannot append to {}", path.display()))
}
