//! `cargo xtask build-ebpf`: builds `redirector-ebpf` with nightly into its own target dir
//! and publishes the object at `target/bpf/redirector.bpf.o`.

use super::toolchain::{clean_command, ensure_bpf_linker, ensure_rust_src, nightly_sysroot};
use super::{check_status, workspace_root};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Instant;

/// The eBPF crate and its (only) binary.
const PACKAGE: &str = "redirector-ebpf";
const BIN: &str = "redirector";
const TARGET: &str = "bpfel-unknown-none";

/// The published object, relative to the workspace root; the agent's build.rs embeds it.
pub const OBJECT: &str = "target/bpf/redirector.bpf.o";

/// Installs what is missing, builds, and publishes the object; returns its path.
///
/// The object is always built with the release profile: unoptimised BPF code does not
/// pass the verifier (`--release` is accepted for symmetry and changes nothing).
pub fn build_ebpf() -> Result<PathBuf> {
    let started = Instant::now();
    let sysroot = nightly_sysroot()?;
    ensure_rust_src(&sysroot)?;
    ensure_bpf_linker(&sysroot)?;
    check_status(&mut bpf_cargo("build")).context("building the eBPF programs failed")?;

    let built = target_dir().join(TARGET).join("release").join(BIN);
    let published = workspace_root().join(OBJECT);
    let changed = publish(&built, &published)?;
    println!(
        "eBPF object: {} ({}) in {:.1?}",
        published.display(),
        if changed { "updated" } else { "unchanged" },
        started.elapsed()
    );
    Ok(published)
}

/// Clippy on the eBPF crate for its real target (run after [`build_ebpf`], which installs
/// the toolchain). On the host a workspace-wide clippy cannot check this crate: feature
/// unification gives `redirector-common` its `user` feature, hence aya and std, and std's
/// panic handler collides with the program's.
pub fn clippy_ebpf() -> Result<ExitStatus> {
    let mut cmd = bpf_cargo("clippy");
    cmd.args(["--", "-D", "warnings"]);
    cmd.status().with_context(|| format!("cannot run {cmd:?}"))
}

/// A nightly `cargo <subcommand>` of the eBPF crate for `bpfel-unknown-none`, with the
/// outer toolchain scrubbed from the environment.
fn bpf_cargo(subcommand: &str) -> Command {
    let mut cmd = clean_command("cargo");
    cmd.current_dir(workspace_root())
        .args(["+nightly", subcommand, "-p", PACKAGE, "--bins"])
        .args(["--target", TARGET, "-Z", "build-std=core", "--release"])
        .env("RUSTFLAGS", "-C debuginfo=2 -C link-arg=--btf")
        .env("CARGO_TARGET_DIR", target_dir());
    cmd
}

/// A target dir of its own: nightly artefacts in target/ would be invalidated by every
/// stable build and vice versa.
fn target_dir() -> PathBuf {
    workspace_root().join("target/bpf")
}

/// Copies `from` to `to` only if the content differs, so the agent's build script
/// (`rerun-if-changed` on the object) does not rebuild needlessly. Atomic via rename, so a
/// concurrent reader never sees half an object.
fn publish(from: &Path, to: &Path) -> Result<bool> {
    let new = std::fs::read(from).with_context(|| format!("cannot read {}", from.display()))?;
    if std::fs::read(to).is_ok_and(|old| old == new) {
        return Ok(false);
    }
    let tmp = to.with_extension(format!("o.tmp{}", std::process::id()));
    std::fs::write(&tmp, &new).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, to).with_context(|| format!("cannot rename to {}", to.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_copies_only_changes() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("xtask-publish-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let (src, dst) = (dir.join("src"), dir.join("dst.bpf.o"));
        std::fs::write(&src, b"one")?;
        assert!(publish(&src, &dst)?);
        let mtime = std::fs::metadata(&dst)?.modified()?;
        assert!(!publish(&src, &dst)?);
        assert_eq!(std::fs::metadata(&dst)?.modified()?, mtime);
        std::fs::write(&src, b"two")?;
        assert!(publish(&src, &dst)?);
        assert_eq!(std::fs::read(&dst)?, b"two");
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
