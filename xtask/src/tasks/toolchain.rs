//! Everything the eBPF build needs besides stable Rust: nightly's `rust-src` (to build
//! `core` for `bpfel-unknown-none`) and `bpf-linker` 0.13.0 linked against nightly's own
//! libLLVM (see TOOLCHAIN.md). Installed on first use, checked cheaply afterwards.

use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

const BPF_LINKER_VERSION: &str = "0.13.0";

/// Environment variables a surrounding `cargo run` / rustup proxy sets that would make a
/// nested cargo use the outer toolchain, wrapper or flags instead of nightly's.
const INHERITED_EXACT: &[&str] = &[
    "CARGO",
    "RUSTC",
    "RUSTDOC",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTUP_TOOLCHAIN",
    "RUSTUP_TOOLCHAIN_SOURCE",
    "RUSTFLAGS",
    "RUSTDOCFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_ENCODED_RUSTDOCFLAGS",
    "CARGO_BUILD_RUSTC",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTDOC",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_BUILD_RUSTDOCFLAGS",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_TARGET_DIR",
    "CARGO_MAKEFLAGS",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "OUT_DIR",
];

/// Prefixes of the same kind: per-package metadata of the outer build, per-target
/// linker/runner/rustflags overrides, and cargo's private variables.
const INHERITED_PREFIXES: &[&str] = &[
    "CARGO_PKG_",
    "CARGO_MANIFEST_",
    "CARGO_CFG_",
    "CARGO_TARGET_",
    "CARGO_PROFILE_",
    "__CARGO",
];

/// `$CARGO_HOME`, defaulting to `~/.cargo` like rustup does.
pub fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cargo"))
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
}

fn rustup_home() -> PathBuf {
    std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".rustup"))
}

/// A command for the rustup proxy `tool` (`cargo`, `rustc`, `rustup`) with the outer
/// build's toolchain selection scrubbed, so `+nightly` really means nightly.
///
/// The proxy in `$CARGO_HOME/bin` is used by absolute path when present: inside
/// `cargo run`, `PATH` may start with the stable toolchain's own `bin`, whose `cargo`
/// does not understand `+nightly`. `PATH` gets `$CARGO_HOME/bin` first (for bpf-linker)
/// and loses any rustup toolchain directory.
pub fn clean_command(tool: &str) -> Command {
    let bin = cargo_home().join("bin");
    let proxy = bin.join(tool);
    let mut cmd = Command::new(if proxy.is_file() {
        proxy.into_os_string()
    } else {
        OsString::from(tool)
    });
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if INHERITED_EXACT.contains(&key) || INHERITED_PREFIXES.iter().any(|p| key.starts_with(p)) {
            cmd.env_remove(key);
        }
    }
    cmd.env("PATH", clean_path("PATH", Some(&bin)));
    // `cargo run` also puts the outer toolchain's lib dirs on LD_LIBRARY_PATH.
    let libs = clean_path("LD_LIBRARY_PATH", None);
    if libs.is_empty() {
        cmd.env_remove("LD_LIBRARY_PATH");
    } else {
        cmd.env("LD_LIBRARY_PATH", libs);
    }
    cmd
}

/// The path list in `var` with `first` in front and rustup toolchain directories removed.
fn clean_path(var: &str, first: Option<&Path>) -> OsString {
    let toolchains = rustup_home().join("toolchains");
    let old = std::env::var_os(var).unwrap_or_default();
    let rest = std::env::split_paths(&old)
        .filter(|p| !p.as_os_str().is_empty())
        .filter(|p| Some(p.as_path()) != first && !p.starts_with(&toolchains));
    let all = first.map(Path::to_path_buf).into_iter().chain(rest);
    // Joining only fails for entries containing ':', which split_paths cannot produce.
    std::env::join_paths(all).unwrap_or(old)
}

/// The nightly toolchain's sysroot (`rustc +nightly --print sysroot`).
pub fn nightly_sysroot() -> Result<PathBuf> {
    let out = clean_command("rustc")
        .args(["+nightly", "--print", "sysroot"])
        .output()
        .context("cannot run rustc +nightly (is rustup installed?)")?;
    if !out.status.success() {
        bail!(
            "rustc +nightly --print sysroot failed: {}\n(install it with `rustup toolchain install nightly`)",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Installs nightly's `rust-src` unless present.
pub fn ensure_rust_src(sysroot: &Path) -> Result<()> {
    let core = sysroot.join("lib/rustlib/src/rust/library/core");
    if core.is_dir() {
        return Ok(());
    }
    println!("installing rust-src for nightly (needed to build core for bpfel-unknown-none)...");
    let rustup = |verb: &str| {
        let args = ["component", verb, "rust-src", "--toolchain", "nightly"];
        super::check_status(clean_command("rustup").args(args))
    };
    rustup("add")?;
    if !core.is_dir() {
        // rustup believes it is installed but the files are gone (a cleaned cache, a
        // partial copy): `add` is then a no-op, so reinstall.
        println!(
            "rust-src is registered but {} is missing: reinstalling it...",
            core.display()
        );
        rustup("remove")?;
        rustup("add")?;
    }
    if !core.is_dir() {
        bail!(
            "rust-src is still missing at {} after installing it",
            core.display()
        );
    }
    Ok(())
}

/// Makes sure `bpf-linker` 0.13.0 runs, repairing or installing it as needed.
pub fn ensure_bpf_linker(sysroot: &Path) -> Result<()> {
    if bpf_linker_ok() {
        return Ok(());
    }
    // A built linker whose libLLVM symlinks vanished only needs the symlinks back.
    let prefix = llvm_prefix(sysroot)?;
    if bpf_linker_ok() {
        return Ok(());
    }
    println!(
        "installing bpf-linker {BPF_LINKER_VERSION} against nightly's LLVM (needed to link eBPF; ~1 min, once)..."
    );
    super::check_status(
        clean_command("cargo")
            .args([
                "install",
                &format!("bpf-linker@{BPF_LINKER_VERSION}"),
                "--locked",
            ])
            .args(["--no-default-features", "--features", "llvm-22"])
            .env("LLVM_PREFIX", &prefix),
    )?;
    if !bpf_linker_ok() {
        bail!("bpf-linker {BPF_LINKER_VERSION} was installed but does not run; see TOOLCHAIN.md");
    }
    Ok(())
}

/// Whether `bpf-linker --version` (on the cleaned PATH) reports the pinned version.
fn bpf_linker_ok() -> bool {
    clean_command("bpf-linker")
        .arg("--version")
        .output()
        .is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains(BPF_LINKER_VERSION)
        })
}

/// Creates `~/.local/share/redirector/llvm/lib` with the symlinks to nightly's libLLVM
/// that bpf-linker is built against and finds at run time (its RPATH points there).
fn llvm_prefix(sysroot: &Path) -> Result<PathBuf> {
    let prefix = home().join(".local/share/redirector/llvm");
    let lib_dir = prefix.join("lib");
    let sys_lib = sysroot.join("lib");
    let soname = std::fs::read_dir(&sys_lib)
        .with_context(|| format!("cannot list {}", sys_lib.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find(|n| n.starts_with("libLLVM.so.") && n.contains("-rust-"))
        .with_context(|| format!("no libLLVM.so.*-rust-* in {}", sys_lib.display()))?;
    let target = sys_lib.join(&soname);
    std::fs::create_dir_all(&lib_dir)
        .with_context(|| format!("cannot create {}", lib_dir.display()))?;
    let mut names = vec!["libLLVM.so".to_owned(), soname.clone()];
    names.extend(versioned_name(&soname));
    for name in names {
        let link = lib_dir.join(name);
        if std::fs::read_link(&link).is_ok_and(|t| t == target) {
            continue;
        }
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link)
            .with_context(|| format!("cannot link {} -> {}", link.display(), target.display()))?;
    }
    Ok(prefix)
}

/// `libLLVM.so.22.1-rust-1.97.0-nightly` -> `libLLVM-22-rust-1.97.0-nightly.so`, the name
/// llvm-sys looks for.
fn versioned_name(soname: &str) -> Option<String> {
    let rest = soname.strip_prefix("libLLVM.so.")?;
    let (version, suffix) = rest.split_once("-rust-")?;
    let major = version.split('.').next()?;
    Some(format!("libLLVM-{major}-rust-{suffix}.so"))
}

/// Makes sure `cargo fmt` and `cargo clippy` run on the stable toolchain that runs us,
/// adding the rustup components when they do not.
pub fn ensure_lint_components() -> Result<()> {
    let runs = |tool: &str| {
        super::cargo()
            .args([tool, "--version"])
            .output()
            .is_ok_and(|out| out.status.success())
    };
    if runs("fmt") && runs("clippy") {
        return Ok(());
    }
    println!("installing the rustfmt and clippy components (cargo xtask lint needs them)...");
    let status = Command::new("rustup")
        .args(["component", "add", "rustfmt", "clippy"])
        .status()
        .context("cannot run rustup (is the toolchain installed with rustup?)")?;
    if !(status.success() && runs("fmt") && runs("clippy")) {
        bail!("rustup component add rustfmt clippy failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_llvm_name() {
        assert_eq!(
            versioned_name("libLLVM.so.22.1-rust-1.97.0-nightly").as_deref(),
            Some("libLLVM-22-rust-1.97.0-nightly.so")
        );
        assert_eq!(versioned_name("libfoo.so"), None);
    }
}
