//! The agent image without a registry: the release binary built on the host and exactly
//! the libraries it links (plus the loader), in an image `FROM scratch`, with the
//! entrypoint, command, user and paths of `deploy/Dockerfile`'s runtime stage, tagged
//! with the image reference the DaemonSet names.
//!
//! The Dockerfile's multi-stage build stays what users with a registry run; this is the
//! same runtime stage with the builder stage replaced by the host's build and the
//! distroless base replaced by the files the binary needs from it.

pub mod dockerfile;
mod libraries;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::{manifest, pod::Podman};
pub use dockerfile::{RuntimeStage, runtime_stage};

/// The builder stage's output that the runtime stage copies: the agent binary.
const BUILT_BINARY: (&str, &str) = ("builder", "/out/redirector");

/// The image reference `deploy/` names: the agent DaemonSet's container image.
pub fn reference() -> Result<String> {
    let daemon_set = manifest::daemon_set(manifest::AGENT)?;
    let spec = manifest::pod_spec(&daemon_set)?;
    (manifest::container(spec, "agent")?.image.clone())
        .context("the agent container names no image")
}

/// The runtime stage of `deploy/Dockerfile`.
pub fn dockerfile_stage() -> Result<RuntimeStage> {
    let path = manifest::deploy_dir().join("Dockerfile");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    runtime_stage(&text).with_context(|| path.display().to_string())
}

/// A built image.
#[derive(Debug, Clone)]
pub struct Built {
    pub reference: String,
    /// Its size as podman reports it (uncompressed layers).
    pub size: u64,
    /// The libraries copied in beside the binary.
    pub libraries: Vec<PathBuf>,
}

/// Builds the image from `binary` (the release build of the agent) into `podman`'s
/// storage, tagged [`reference`].
pub fn build(podman: &Podman, binary: &Path) -> Result<Built> {
    let stage = dockerfile_stage()?;
    let reference = reference()?;
    let context = tempfile::tempdir().context("cannot make the build context")?;
    let rootfs = context.path().join("rootfs");
    for copy in &stage.copies {
        let built = (copy.from.as_deref(), copy.sources.as_slice());
        ensure!(
            built == (Some(BUILT_BINARY.0), &[BUILT_BINARY.1.to_owned()][..]),
            "deploy/Dockerfile copies {copy:?} into the runtime stage; only the agent \
             binary ({} from stage {}) is known here",
            BUILT_BINARY.1,
            BUILT_BINARY.0
        );
        place(binary, &rootfs, Path::new(&copy.dest))?;
    }
    let libraries = libraries::linked(binary)?;
    for library in &libraries {
        place(library, &rootfs, library)?;
    }
    let containerfile = context.path().join("Containerfile");
    std::fs::write(&containerfile, containerfile_text(&stage)?)
        .context("cannot write the Containerfile")?;
    let mut command = podman.command();
    command
        .args(["build", "--quiet", "--tag", &reference, "--file"])
        .arg(&containerfile)
        .arg(context.path());
    crate::netlab::run(&mut command)?;
    // The previous build under the same tag, now untagged.
    podman.run(&["image", "prune", "--force"])?;
    let size = inspect(podman, &reference)?["Size"]
        .as_u64()
        .context("podman image inspect: no Size")?;
    Ok(Built {
        reference,
        size,
        libraries,
    })
}

/// Copies `file` (following symlinks) to `rootfs/at`, executable.
fn place(file: &Path, rootfs: &Path, at: &Path) -> Result<()> {
    let relative = at.strip_prefix("/").unwrap_or(at);
    let target = rootfs.join(relative);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::copy(file, &target)
        .with_context(|| format!("cannot copy {} to {}", file.display(), target.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot chmod {}", target.display()))
}

/// `FROM scratch`, the files, then the runtime stage's settings as it writes them.
fn containerfile_text(stage: &RuntimeStage) -> Result<String> {
    let mut text = String::from("FROM scratch\nCOPY rootfs/ /\n");
    if let Some(dir) = &stage.workdir {
        text.push_str(&format!("WORKDIR {dir}\n"));
    }
    if let Some(user) = &stage.user {
        text.push_str(&format!("USER {user}\n"));
    }
    if let Some(entrypoint) = &stage.entrypoint {
        text.push_str(&format!(
            "ENTRYPOINT {}\n",
            serde_json::to_string(entrypoint)?
        ));
    }
    if let Some(cmd) = &stage.cmd {
        text.push_str(&format!("CMD {}\n", serde_json::to_string(cmd)?));
    }
    Ok(text)
}

/// `podman image inspect REFERENCE`, the one image's JSON.
pub fn inspect(podman: &Podman, reference: &str) -> Result<Value> {
    let out = podman.run(&["image", "inspect", reference])?;
    let mut images: Vec<Value> =
        serde_json::from_str(&out).context("podman image inspect: not a JSON list")?;
    if images.len() != 1 {
        bail!("podman image inspect {reference}: {} images", images.len());
    }
    Ok(images.remove(0))
}

/// Every path in the image (`podman export` of a container created from it, listed).
pub fn files(podman: &Podman, reference: &str) -> Result<Vec<String>> {
    let name = crate::netlab::unique_name("files");
    podman.run(&["create", "--name", &name, reference])?;
    let listed = (|| {
        let dir = tempfile::tempdir()?;
        let tar = dir.path().join("rootfs.tar");
        let tar_path = tar.display().to_string();
        podman.run(&["export", "--output", &tar_path, &name])?;
        crate::netlab::run(std::process::Command::new("tar").arg("-tf").arg(&tar))
    })();
    podman.remove_container(&name)?;
    Ok(listed?
        .lines()
        .map(|l| format!("/{}", l.trim_start_matches("./").trim_end_matches('/')))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_containerfile_repeats_the_runtime_stage() -> Result<()> {
        let stage = RuntimeStage {
            user: Some("0:0".into()),
            entrypoint: Some(vec!["/usr/local/bin/redirector".into()]),
            cmd: Some(vec!["--help".into()]),
            ..RuntimeStage::default()
        };
        assert_eq!(
            containerfile_text(&stage)?,
            "FROM scratch\nCOPY rootfs/ /\nUSER 0:0\n\
             ENTRYPOINT [\"/usr/local/bin/redirector\"]\nCMD [\"--help\"]\n"
        );
        Ok(())
    }
}
