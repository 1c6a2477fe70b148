//! Library side of the `xtask` crate.
//!
//! The `cargo xtask` binary lives in `main.rs`; this library only holds [`netlab`], the
//! disposable network test bed shared by the end-to-end tests of the workspace and by
//! `cargo xtask demo`, so both exercise the agent in exactly the same topology, and
//! [`guest`], a kernel booted under qemu for what the host kernel lacks.

pub mod guest;
pub mod netlab;
