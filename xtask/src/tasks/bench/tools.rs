//! The programs the benchmark drives (nginx, HAProxy, wrk, iptables or nft, and iperf3
//! and openssl for the ceilings): found on `PATH`, installed with apt-get when missing.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::tasks::packages;
pub use crate::tasks::packages::which;

/// Where the benchmark's external programs are.
#[derive(Debug, Clone)]
pub struct Tools {
    pub nginx: PathBuf,
    pub haproxy: PathBuf,
    pub wrk: PathBuf,
    pub nat: NatTool,
    pub iperf3: PathBuf,
    pub openssl: PathBuf,
}

/// What sets up the DNAT of the HAProxy case.
#[derive(Debug, Clone)]
pub enum NatTool {
    Iptables(PathBuf),
    Nft(PathBuf),
}

/// Finds the tools, installing the missing ones (Debian/Ubuntu: apt-get).
pub fn ensure() -> Result<Tools> {
    packages::install_missing("bench", missing_packages)?;
    let found = |name: &str| which(name).with_context(|| format!("{name} is still not on PATH"));
    let nat = match (which("iptables"), which("nft")) {
        (Some(path), _) => NatTool::Iptables(path),
        (None, Some(path)) => NatTool::Nft(path),
        (None, None) => bail!("neither iptables nor nft is on PATH"),
    };
    Ok(Tools {
        nginx: found("nginx")?,
        haproxy: found("haproxy")?,
        wrk: found("wrk")?,
        nat,
        iperf3: found("iperf3")?,
        openssl: found("openssl")?,
    })
}

/// Debian packages to install for what is not on `PATH`.
fn missing_packages() -> Vec<&'static str> {
    let mut wanted = Vec::new();
    wanted.extend(packages::nginx_package());
    // The iperf3 package's daemon is not started: its debconf default is no, and the
    // install runs with a policy-rc.d that denies service starts.
    for tool in ["haproxy", "wrk", "iperf3", "openssl"] {
        if which(tool).is_none() {
            wanted.push(tool);
        }
    }
    if which("iptables").is_none() && which("nft").is_none() {
        wanted.push("iptables");
    }
    wanted
}

/// The first line a program prints for its version flag (nginx and wrk use stderr).
pub fn version(program: &Path, flag: &str) -> String {
    let Ok(out) = Command::new(program).arg(flag).output() else {
        return "unknown".into();
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("unknown")
        .to_owned()
}
