//! Library side of the `xtask` crate.
//!
//! The `cargo xtask` binary lives in `main.rs`; this library only holds [`netlab`], the
//! disposable network test bed shared by the end-to-end tests of the workspace and by
//! `cargo xtask demo`, so both exercise the agent in exactly the same topology.

pub mod netlab;
