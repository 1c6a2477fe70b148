//! podman as xtask drives it: runc as the runtime, images and containers in storage of
//! xtask's own, and a `containers.conf` of its own (`CONTAINERS_CONF`), so nothing of the
//! machine's container setup is used or changed.

use std::{
    hash::{Hash as _, Hasher as _},
    path::{Path, PathBuf},
    process::{Command, Output},
};

use anyhow::{Context, Result};

/// The runtime: crun (podman's default on Debian) refuses hybrid cgroup hosts (v1
/// controllers plus a v2 mount), runc runs there and on unified hosts alike.
const RUNTIME: &str = "runc";

/// One podman configuration: where its images and containers live, and its conf file.
#[derive(Debug, Clone)]
pub struct Podman {
    /// Image and container storage (`--root`).
    root: PathBuf,
    /// Runtime state: mounts, locks, conmon sockets (`--runroot`, on a tmpfs).
    runroot: PathBuf,
    conf: PathBuf,
}

impl Podman {
    /// The podman of this workspace: storage in `target/podman/storage`, runtime state in
    /// `/run/rdpodman-<hash of the workspace path>` (short: conmon's socket paths under it
    /// must fit in 108 bytes), and `target/podman/containers.conf`, written now.
    pub fn for_workspace(workspace: &Path) -> Result<Podman> {
        let runc = crate::search_path::which("runc").context(
            "runc is not installed (apt-get install runc; `cargo xtask test` installs it)",
        )?;
        // Canonical: `xtask/..` and the workspace root must name the same storage.
        let workspace = workspace
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", workspace.display()))?;
        let dir = workspace.join("target/podman");
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        workspace.hash(&mut hasher);
        let podman = Podman {
            root: dir.join("storage"),
            runroot: PathBuf::from(format!("/run/rdpodman-{:08x}", hasher.finish() as u32)),
            conf: dir.join("containers.conf"),
        };
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // Atomically: tests running in parallel write it too, while podman reads it.
        let temporary = dir.join(crate::netlab::unique_name("conf"));
        std::fs::write(&temporary, conf_text(&runc, &podman.runroot))
            .with_context(|| format!("cannot write {}", temporary.display()))?;
        std::fs::rename(&temporary, &podman.conf)
            .with_context(|| format!("cannot write {}", podman.conf.display()))?;
        Ok(podman)
    }

    /// `podman --root .. --runroot ..` with our `CONTAINERS_CONF`.
    pub fn command(&self) -> Command {
        let mut command = Command::new("podman");
        self.configure(&mut command);
        command
    }

    /// [`Podman::command`] run in the network namespace `netns` (`ip netns` name) and
    /// nothing else of it: `--network host` containers then share that namespace as a
    /// host-network pod shares its node's. (Not `ip netns exec`, which also remounts
    /// `/sys` in a mount namespace of its own, where podman's mounts would then live.)
    pub fn command_in_netns(&self, netns: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{netns}"))
            .arg("podman");
        self.configure(&mut command);
        command
    }

    fn configure(&self, command: &mut Command) {
        command
            .arg("--root")
            .arg(&self.root)
            .arg("--runroot")
            .arg(&self.runroot)
            .env("CONTAINERS_CONF", &self.conf);
    }

    /// Runs `podman ARGS` and returns its stdout; fails with its stderr.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        crate::netlab::run(self.command().args(args))
    }

    /// Whether the image `reference` is in our storage.
    pub fn has_image(&self, reference: &str) -> Result<bool> {
        let out = self.output(&["image", "exists", reference])?;
        Ok(out.status.success())
    }

    /// Removes container `name` (stopping it at once), if it exists.
    pub fn remove_container(&self, name: &str) -> Result<()> {
        self.run(&["rm", "--force", "--ignore", "--time", "0", name])
            .map(|_| ())
    }

    fn output(&self, args: &[&str]) -> Result<Output> {
        let mut command = self.command();
        command.args(args);
        command
            .output()
            .with_context(|| format!("cannot run {command:?}"))
    }
}

/// Our `containers.conf`.
fn conf_text(runc: &Path, runroot: &Path) -> String {
    format!(
        "# Written by cargo xtask (xtask/src/pod/podman.rs) for its own podman storage;\n\
         # the machine's containers.conf is not read (CONTAINERS_CONF points here).\n\
         [containers]\n\
         # Root on these machines lacks CAP_SYS_RESOURCE: podman's default ulimits\n\
         # (raising RLIMIT_NOFILE and RLIMIT_NPROC) would make every container start fail.\n\
         default_ulimits = []\n\
         \n\
         [engine]\n\
         runtime = \"{RUNTIME}\"\n\
         # State of this storage only (the default /run/libpod is shared by every podman\n\
         # configuration of the machine).\n\
         tmp_dir = \"{tmp}\"\n\
         events_logger = \"file\"\n\
         \n\
         [engine.runtimes]\n\
         {RUNTIME} = [\"{runc}\"]\n",
        tmp = runroot.join("libpod").display(),
        runc = runc.display(),
    )
}
