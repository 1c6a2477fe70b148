//! `cargo xtask image`: the agent image, built with podman and no registry (see
//! `xtask::image`), into xtask's own podman storage.

use std::{path::PathBuf, process::ExitCode, time::Instant};

use anyhow::{Context, Result};
use xtask::{image, pod::Podman};

use super::{cargo, check_status, ebpf, packages, target_dir, workspace_root};

/// The programs the image build and the container test drive, and their Debian packages.
pub const CONTAINER_PROGRAMS: [(&str, &str); 2] = [("podman", "podman"), ("runc", "runc")];

pub fn image() -> Result<ExitCode> {
    let built = build()?;
    println!(
        "image: {} ({:.1} MB; libraries {})",
        built.reference,
        built.size as f64 / 1e6,
        (built.libraries.iter())
            .map(|l| l.display().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(ExitCode::SUCCESS)
}

/// Installs podman and runc if missing, builds the release agent and the image from it;
/// `cargo xtask test` runs this before the container test.
pub fn build() -> Result<image::Built> {
    super::require_root("podman stores the image in xtask's root-owned storage")?;
    packages::install_missing("image", missing_programs).context("installing podman and runc")?;
    let started = Instant::now();
    ebpf::build_ebpf()?;
    check_status(cargo().args(["build", "--release", "-p", "redirector"]))?;
    let binary: PathBuf = target_dir().join("release/redirector");
    let podman = Podman::for_workspace(&workspace_root())?;
    let built = image::build(&podman, &binary)?;
    println!(
        "image: built {} from {} in {:.1?}",
        built.reference,
        binary.display(),
        started.elapsed()
    );
    Ok(built)
}

/// The Debian packages of [`CONTAINER_PROGRAMS`] that `PATH` lacks.
pub fn missing_programs() -> Vec<&'static str> {
    (CONTAINER_PROGRAMS.iter())
        .filter(|(program, _)| packages::which(program).is_none())
        .map(|(_, package)| *package)
        .collect()
}
