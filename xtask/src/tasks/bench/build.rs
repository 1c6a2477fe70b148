//! What the benchmark builds before it runs: the release agent (with its eBPF object) and
//! `examples/tls_speed`, the rustls ceiling. A failed build fails only what needs it: the
//! redirector cases, or the rustls ceiling; the references still run.

use std::path::PathBuf;

use super::BenchArgs;
use crate::tasks::{cargo, ebpf, target_dir, workspace_root};

/// The release agent (and its eBPF object), or why there is none.
pub(super) fn redirector(args: &BenchArgs) -> Result<PathBuf, String> {
    if let Some(bin) = &args.redirector_bin {
        return std::fs::canonicalize(bin)
            .map_err(|e| format!("--redirector-bin {}: {e}", bin.display()));
    }
    println!("bench: building the eBPF object and the agent (release)");
    ebpf::build_ebpf()
        .map_err(|e| format!("the eBPF build failed: {e} (output above the report)"))?;
    cargo_release(&["-p", "redirector"])?;
    Ok(target_dir().join("release/redirector"))
}

/// `examples/tls_speed` from this work tree (release), or why there is none. The
/// redirector library embeds the eBPF object, so that is built first when it is missing.
pub(super) fn tls_speed() -> Result<PathBuf, String> {
    println!("bench: building examples/tls_speed (release)");
    if !workspace_root().join(ebpf::OBJECT).is_file() {
        ebpf::build_ebpf()
            .map_err(|e| format!("the eBPF build failed: {e} (output above the report)"))?;
    }
    cargo_release(&["-p", "redirector", "--example", "tls_speed"])?;
    Ok(target_dir().join("release/examples/tls_speed"))
}

fn cargo_release(args: &[&str]) -> Result<(), String> {
    let status = cargo()
        .args(["build", "--release"])
        .args(args)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "`cargo build --release {}` failed ({status}; the compiler output is above the report)",
            args.join(" ")
        ));
    }
    Ok(())
}
