//! Finding the outside programs xtask drives (`ip`, `nginx`, `podman`, `runc`...) on
//! `PATH`, the sbin directories included.

use std::path::PathBuf;
use std::process::Command;

/// `sbin` directories are searched too: `cargo` may run with a user's `PATH`.
const EXTRA_PATH: &str = "/usr/local/sbin:/usr/sbin:/sbin";

/// `PATH` with the sbin directories appended: where Debian puts `ip`, `bpftool`, `runc`
/// and `tcpdump`, and what a root shell has but `cargo` run by a user's login may not.
pub fn path_with_sbin() -> String {
    match std::env::var("PATH") {
        Ok(path) if !path.is_empty() => format!("{path}:{EXTRA_PATH}"),
        _ => EXTRA_PATH.to_owned(),
    }
}

/// `command -v NAME`, with the sbin directories appended to `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", r#"command -v "$1""#, "sh", name])
        .env("PATH", path_with_sbin())
        .output()
        .ok()?;
    let found = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && found.starts_with('/')).then(|| PathBuf::from(found))
}
