//! Embeds the eBPF object built by `cargo xtask build-ebpf`.
//!
//! The object is built with nightly for `bpfel-unknown-none`, which a plain stable
//! `cargo build` cannot do, so it is built by the xtask and only picked up here. A
//! missing object is a build error that says which command to run.

use std::{env, path::PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=REDIRECTOR_BPF_OBJECT");
    let object = match env::var_os("REDIRECTOR_BPF_OBJECT") {
        Some(path) => PathBuf::from(path),
        None => {
            let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
            manifest.join("../target/bpf/redirector.bpf.o")
        }
    };
    println!("cargo:rerun-if-changed={}", object.display());
    if !object.is_file() {
        println!(
            "cargo:warning=eBPF object not found at {}: run `cargo xtask build-ebpf` first \
             (or set REDIRECTOR_BPF_OBJECT)",
            object.display()
        );
        eprintln!(
            "error: the eBPF object {} does not exist.\n\
             Build it with `cargo xtask build-ebpf` (installs rust-src for nightly and \
             bpf-linker if missing), then build redirector again.",
            object.display()
        );
        std::process::exit(1);
    }
    println!("cargo:rustc-env=REDIRECTOR_BPF_OBJECT={}", object.display());
}
