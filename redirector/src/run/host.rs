//! What the agent sets up on the host around it: its limits, a network setting, and
//! where cgroups are.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// Every proxied connection holds two descriptors (three with a splice pipe), so the
/// usual soft limit of 1024 would cap the proxy near 400 connections: raise it to the
/// hard limit. Running out still only backs the accept loop off (see `proxy.rs`).
pub fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct we own.
    let raised = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) == 0 && {
            let before = limit.rlim_cur;
            limit.rlim_cur = limit.rlim_max;
            before == limit.rlim_max || libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit) == 0
        }
    };
    if raised {
        tracing::info!(open_files = limit.rlim_cur, "open file limit");
    } else {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            soft = limit.rlim_cur,
            "cannot raise the open file limit: connections beyond it are refused at accept"
        );
    }
}

/// `net.ipv4.tcp_migrate_req = 1` (IPv4 and IPv6): when an agent closes a listener it
/// shares with a newer agent (SO_REUSEPORT), the connections queued on it move to the
/// newer one instead of being reset. A per-network-namespace setting.
pub fn enable_request_migration() {
    const PATH: &str = "/proc/sys/net/ipv4/tcp_migrate_req";
    match std::fs::read_to_string(PATH) {
        Ok(value) if value.trim() == "1" => {}
        _ => match std::fs::write(PATH, "1") {
            Ok(()) => tracing::info!(
                "set net.ipv4.tcp_migrate_req=1: connections queued on an agent that stops \
                 move to the agent that replaces it"
            ),
            Err(error) => tracing::warn!(
                %error,
                "cannot set net.ipv4.tcp_migrate_req=1: during an upgrade, connections \
                 queued on the old agent's listeners may be reset"
            ),
        },
    }
}

/// The cgroup v2 mount point, from /proc/self/mounts (hybrid hosts mount it elsewhere
/// than /sys/fs/cgroup).
pub fn cgroup2_root() -> anyhow::Result<PathBuf> {
    let mounts =
        std::fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_source, target, fstype) = (fields.next()?, fields.next()?, fields.next()?);
            (fstype == "cgroup2").then(|| Path::new(target).to_path_buf())
        })
        .next()
        .context("no cgroup2 filesystem is mounted")
}
