//! Library side of the `xtask` crate.
//!
//! The `cargo xtask` binary lives in `main.rs`; this library only holds [`netlab`], the
//! disposable network test bed shared by the end-to-end tests of the workspace and by
//! `cargo xtask demo`, so both exercise the agent in exactly the same topology;
//! [`guest`], a kernel booted under qemu for what the host kernel lacks; and the
//! container side: [`manifest`] (the DaemonSets of deploy/ as data), [`image`] (the agent
//! image, built without a registry) and [`pod`] (the DaemonSet's pod under podman).

pub mod examples;
pub mod guest;
pub mod image;
pub mod manifest;
pub mod netlab;
pub mod pod;
pub mod search_path;
