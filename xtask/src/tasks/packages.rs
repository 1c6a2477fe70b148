//! Outside programs the tasks drive (nginx, curl, HAProxy, wrk...): found on `PATH`,
//! installed with apt-get (Debian/Ubuntu) when missing.

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

pub use xtask::search_path::{path_with_sbin, which};

/// Installs the Debian packages `missing()` names until it names none. `missing` is asked
/// again after every install, so it should look at `PATH` ([`which`]). `task` prefixes the
/// progress lines (`bench`, `test`).
pub fn install_missing(task: &str, missing: impl Fn() -> Vec<&'static str>) -> Result<()> {
    let mut tried_update = false;
    let mut installed: Vec<&str> = Vec::new();
    loop {
        let missing = missing();
        if missing.is_empty() {
            return Ok(());
        }
        if missing == installed {
            bail!(
                "apt-get installed {} but the programs are not on PATH",
                missing.join(" ")
            );
        }
        println!(
            "{task}: installing {} (apt-get install -y --no-install-recommends)",
            missing.join(" ")
        );
        if install(&missing)? {
            installed = missing;
            continue;
        }
        if tried_update {
            bail!(
                "apt-get could not install {}; install them by hand",
                missing.join(" ")
            );
        }
        // A fresh machine may have no package lists yet (or stale ones).
        println!("{task}: apt-get install failed; running apt-get update and trying again");
        crate::tasks::check_status(Command::new("apt-get").args(["update", "-q"]))?;
        tried_update = true;
    }
}

/// The package that provides `nginx` when it is not on `PATH`: nginx-light is the
/// smallest build (Debian 12); later releases have only nginx.
pub fn nginx_package() -> Option<&'static str> {
    package_for("nginx", &["nginx-light", "nginx"])
}

/// The package that provides `java` when it is not on `PATH`: the HTTP tests run Java's
/// own HTTP client from a source file (`java File.java`), which takes a JDK (its
/// compiler), and Java 17 is the version those tests name. A release without it (Debian
/// 13) gets its default JDK, which runs the same source.
pub fn java_package() -> Option<&'static str> {
    package_for("java", &["openjdk-17-jdk-headless", "default-jdk-headless"])
}

/// `None` if `program` is on `PATH`, else the first of `candidates` that apt knows (the
/// last if it knows none: its install then says what is wrong).
fn package_for(program: &str, candidates: &[&'static str]) -> Option<&'static str> {
    if which(program).is_some() {
        return None;
    }
    let known = candidates.iter().copied().find(|p| apt_knows(p));
    known.or_else(|| candidates.last().copied())
}

/// Runs apt-get install; `false` if it failed. Services the packages ship (nginx and
/// haproxy start one listening on the host's port 80 by default) are kept from starting by
/// a temporary `policy-rc.d`, unless one exists already.
fn install(packages: &[&str]) -> Result<bool> {
    let _policy = NoServiceStart::new()?;
    let status = Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("cannot run apt-get")?;
    Ok(status.success())
}

/// Whether apt knows `package` (its package lists have it).
pub fn apt_knows(package: &str) -> bool {
    Command::new("apt-cache")
        .args(["show", "--no-all-versions", package])
        .output()
        .is_ok_and(|out| out.status.success() && !out.stdout.is_empty())
}

const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// A `policy-rc.d` that denies every service start (exit 101, see invoke-rc.d(8)) for as
/// long as it lives; none is written, and none removed, if the machine has one already.
struct NoServiceStart {
    created: bool,
}

impl NoServiceStart {
    fn new() -> Result<NoServiceStart> {
        let path = Path::new(POLICY_RC_D);
        if path.exists() {
            return Ok(NoServiceStart { created: false });
        }
        std::fs::write(
            path,
            "#!/bin/sh\n# written by cargo xtask during apt-get install; removed after\nexit 101\n",
        )
        .with_context(|| format!("cannot write {POLICY_RC_D}"))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot chmod {POLICY_RC_D}"))?;
        Ok(NoServiceStart { created: true })
    }
}

impl Drop for NoServiceStart {
    fn drop(&mut self) {
        if self.created
            && let Err(e) = std::fs::remove_file(POLICY_RC_D)
        {
            eprintln!("xtask: cannot remove {POLICY_RC_D}: {e}");
        }
    }
}
