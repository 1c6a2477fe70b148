//! Disposable network test beds: network namespaces, veth links, cgroups, a private bpffs
//! and supervised child processes, each an RAII guard.
//!
//! Why guards: end-to-end tests of a node agent touch global kernel state (namespaces,
//! cgroups, mounts). Every guard undoes its own piece on `Drop`, so also when a test
//! panics, and logs (never panics on) cleanup errors. Every name is unique per process and
//! per object (`rd` + prefix + pid + counter), so tests may run in parallel, and since each
//! test owns its namespaces the same addresses can be reused by all of them.
//!
//! Namespaces and links are managed by shelling out to `ip` (iproute2): it is the tool an
//! operator would use to inspect a failed run, and it handles the `/run/netns` bind mounts
//! and the `/etc/netns/<name>` overlay for us. Everything here requires root.

pub mod agent;
mod bpffs;
mod cgroup;
mod child;
mod netns;
pub mod probe;
mod topology;

pub use bpffs::Bpffs;
pub use cgroup::{Cgroup, cgroup2_mount};
pub use child::{ChildGuard, Finished, Stream};
pub use netns::{Netns, Veth};
pub use topology::{
    EXT_V4, EXT_V6, NODE_EXT_V4, NODE_EXT_V6, NODE_POD_V4, NODE_POD_V6, POD_V4, POD_V6, Topology,
    in_cgroup_in_netns,
};

use anyhow::{Context, Result, bail};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Per-process counter behind [`unique_name`].
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name unique to this process and call: `rd<prefix><pid>-<n>`.
///
/// The prefix is cut to 6 alphanumeric characters so names stay short in `ip` output.
/// Interface names (15-byte kernel limit) are not built from this; see [`Netns::link`].
pub fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("rd{}{}-{}", short(prefix, 6), std::process::id(), n)
}

/// The next value of the per-process counter (used for interface names).
pub(crate) fn next_id() -> u32 {
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// `s` reduced to its first `max` ASCII alphanumeric characters.
pub(crate) fn short(s: &str, max: usize) -> String {
    s.chars()
        .filter(char::is_ascii_alphanumeric)
        .take(max)
        .collect()
}

/// Runs `cmd` to completion and fails with its stderr if it exits non-zero.
///
/// Returns stdout. The command line is part of the error so a failing setup step is
/// obvious from the test output alone.
pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `ip <args>`.
pub(crate) fn ip<I, S>(args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    run(Command::new("ip").args(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_are_short_and_distinct() {
        let a = unique_name("podnamespace");
        let b = unique_name("podnamespace");
        assert_ne!(a, b);
        assert!(a.starts_with("rdpodnam"), "{a}");
        assert!(a.len() <= 2 + 6 + 7 + 1 + 10, "{a}");
    }

    #[test]
    fn short_keeps_alphanumerics() {
        assert_eq!(short("p-o_d!x", 3), "pod");
    }
}
