//! A container started with `podman run` in the foreground, its output watched like a
//! [`ChildGuard`]'s, and removed (`podman rm --force`) on drop, also when a test panics.

use std::{
    process::Output,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use super::{Podman, RunSpec};
use crate::netlab::{ChildGuard, Finished, Stream, unique_name};

/// A running container.
pub struct RunningContainer {
    podman: Podman,
    /// The network namespace podman runs in (`ip netns` name).
    netns: String,
    name: String,
    child: ChildGuard,
}

impl RunningContainer {
    /// `podman run --rm --name <unique> OPTIONS IMAGE ARGS` inside `netns`, attached; the
    /// container's stderr is watched (its log).
    pub fn start(podman: &Podman, netns: &str, label: &str, run: &RunSpec) -> Result<Self> {
        let name = unique_name(label);
        let mut command = podman.command_in_netns(netns);
        command
            .args(["run", "--rm", "--name", &name])
            .args(&run.options)
            .arg(&run.image)
            .args(&run.args);
        let child = ChildGuard::spawn_watching(&name, &mut command, Stream::Stderr)?;
        Ok(RunningContainer {
            podman: podman.clone(),
            netns: netns.to_owned(),
            name,
            child,
        })
    }

    /// The container's name (unique to this process).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits for the next line of the container's stderr containing `needle`.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        self.child
            .wait_for_line(needle, timeout)
            .with_context(|| format!("container {}: waiting for {needle:?}", self.name))
    }

    /// Everything the container logged so far (stderr).
    pub fn logs(&self) -> Vec<String> {
        self.child.lines(Stream::Stderr)
    }

    /// `podman exec NAME COMMAND..`: a process inside the container, as the kubelet runs
    /// exec probes.
    pub fn exec(&self, command: &[String]) -> Result<Output> {
        let mut exec = self.podman.command_in_netns(&self.netns);
        exec.args(["exec", &self.name]).args(command);
        exec.output()
            .with_context(|| format!("cannot run {exec:?}"))
    }

    /// Waits for the container to exit by itself (a run-to-completion container).
    pub fn finish(&mut self, timeout: Duration) -> Result<Finished> {
        self.child.finish(timeout)
    }

    /// `podman stop --time GRACE`: SIGTERM, then SIGKILL after `grace`, as the kubelet
    /// stops a pod with `terminationGracePeriodSeconds`. Returns how the container exited
    /// and how long it took.
    pub fn stop(mut self, grace: Duration) -> Result<(Finished, Duration)> {
        let started = Instant::now();
        let mut stop = self.podman.command_in_netns(&self.netns);
        stop.args(["stop", "--time", &grace.as_secs().to_string(), &self.name]);
        crate::netlab::run(&mut stop)?;
        let finished = self.child.finish(Duration::from_secs(10))?;
        Ok((finished, started.elapsed()))
    }
}

impl Drop for RunningContainer {
    fn drop(&mut self) {
        if let Err(e) = self.podman.remove_container(&self.name) {
            eprintln!("pod: cannot remove container {}: {e:#}", self.name);
        }
    }
}
