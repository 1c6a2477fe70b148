//! What the agent sets up on the host around it: its limits, a network setting (and its
//! restoring by `redirector uninstall`), and where cgroups are.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use anyhow::Context;

use crate::datapath::{self, DatapathError, MigrateReqWas, PinLayout};

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

const MIGRATE_REQ: &str = "/proc/sys/net/ipv4/tcp_migrate_req";

/// `net.ipv4.tcp_migrate_req = 1` (IPv4 and IPv6): when an agent closes a listener it
/// shares with a newer agent (SO_REUSEPORT), the connections queued on it move to the
/// newer one instead of being reset. A per-network-namespace setting. The value it had is
/// recorded beside the pins, for `redirector uninstall` to restore (not an agent's exit:
/// the agent replacing it still needs the setting).
pub fn enable_request_migration(layout: &PinLayout) {
    let was = std::fs::read_to_string(MIGRATE_REQ);
    let was = was.map(|value| value.trim().parse::<u8>().ok());
    if let Ok(Some(1)) = was {
        return;
    }
    if let Err(error) = std::fs::write(MIGRATE_REQ, "1") {
        tracing::warn!(
            %error,
            "cannot set net.ipv4.tcp_migrate_req=1: during an upgrade, connections \
             queued on the old agent's listeners may be reset"
        );
        return;
    }
    tracing::info!(
        "set net.ipv4.tcp_migrate_req=1: connections queued on an agent that stops \
         move to the agent that replaces it"
    );
    let value = match was {
        Ok(Some(value)) => value,
        Ok(None) => return warn_unrecorded("it held no number"),
        Err(error) => return warn_unrecorded(&format!("reading {MIGRATE_REQ}: {error}")),
    };
    let recorded = network_namespace()
        .map_err(|source| DatapathError::Io {
            what: format!("stat {NETNS}"),
            source,
        })
        .and_then(|netns| datapath::record_migrate_req(layout, MigrateReqWas { value, netns }));
    match recorded {
        Ok(true) => tracing::info!(
            was = value,
            pins = %layout.root().display(),
            "recorded the previous net.ipv4.tcp_migrate_req beside the pins: \
             `redirector uninstall` sets it back"
        ),
        Ok(false) => tracing::info!(
            "an earlier agent recorded net.ipv4.tcp_migrate_req as it was before: \
             `redirector uninstall` sets that value back"
        ),
        Err(error) => warn_unrecorded(&format!(
            "{:#}; it was {value}: after `redirector uninstall`, set it back by hand with \
             `sysctl -w net.ipv4.tcp_migrate_req={value}`",
            anyhow::Error::from(error)
        )),
    }
}

fn warn_unrecorded(why: &str) {
    tracing::warn!(
        "the value net.ipv4.tcp_migrate_req had before the agent set it to 1 is not \
         recorded ({why}): `redirector uninstall` leaves it at 1"
    );
}

/// `redirector uninstall`: sets `net.ipv4.tcp_migrate_req` back to the value an agent
/// recorded before it set it to 1, if that agent ran in this network namespace (else
/// writing here would change another namespace's setting: it says where to do it).
pub fn restore_request_migration(recorded: &[(PathBuf, MigrateReqWas)]) -> anyhow::Result<()> {
    if recorded.is_empty() {
        return Ok(());
    }
    let here = network_namespace()
        .with_context(|| format!("cannot restore net.ipv4.tcp_migrate_req: stat {NETNS}"))?;
    for (_, MigrateReqWas { value, netns }) in recorded {
        if *netns != here {
            tracing::warn!(
                "net.ipv4.tcp_migrate_req not restored: the agent set it to 1 in network \
                 namespace net:[{netns}], and this is net:[{here}]; set it back there with \
                 `sysctl -w net.ipv4.tcp_migrate_req={value}` (`lsns -t net` lists them)"
            );
            continue;
        }
        if let Err(error) = std::fs::write(MIGRATE_REQ, value.to_string()) {
            anyhow::bail!(
                "cannot restore net.ipv4.tcp_migrate_req={value} (its value before the agent \
                 set it to 1): write {MIGRATE_REQ}: {error}; the pins are removed, set it by \
                 hand with `sysctl -w net.ipv4.tcp_migrate_req={value}`"
            );
        }
        println!(
            "restored net.ipv4.tcp_migrate_req={value} (its value before the agent set it to 1)"
        );
    }
    Ok(())
}

const NETNS: &str = "/proc/self/ns/net";

/// This process's network namespace, as the inode of its nsfs file.
fn network_namespace() -> std::io::Result<u64> {
    Ok(std::fs::metadata(NETNS)?.ino())
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
