//! The `cargo xtask` subcommands.

mod bench;
mod demo;
mod dns_bench;
pub mod ebpf;
mod fuzz;
mod hooks;
mod image;
mod load_bench;
mod machine;
mod numbers;
mod packages;
mod python_env;
mod scale;
pub mod toolchain;

pub use bench::{BenchArgs, bench};
pub use demo::demo;
pub use dns_bench::{BenchDnsArgs, bench_dns};
pub use fuzz::{FuzzArgs, fuzz};
pub use hooks::{BenchHooksArgs, bench_hooks};
pub use image::image;
pub use load_bench::{BenchLoadArgs, bench_load};
pub use scale::{BenchScaleArgs, bench_scale};

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::{Command, ExitCode, ExitStatus};

/// The workspace root: xtask lives one level below it.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or(manifest_dir)
}

/// Runs `cmd` with inherited stdio and fails unless it succeeds.
pub fn check_status(cmd: &mut Command) -> Result<()> {
    let status = status(cmd)?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

fn status(cmd: &mut Command) -> Result<ExitStatus> {
    cmd.status().with_context(|| format!("cannot run {cmd:?}"))
}

/// The exit code to hand on for a child's status (signals become 1: no exit code exists).
fn exit_code(status: ExitStatus) -> ExitCode {
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }
}

/// The stable cargo that runs us, for workspace builds, tests and lints.
///
/// Unlike the nightly eBPF build this keeps the user's toolchain choice and flags; only
/// the per-package variables of the `cargo run` that started xtask are dropped.
fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || matches!(
                key,
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
            )
        {
            cmd.env_remove(key);
        }
    }
    cmd.current_dir(workspace_root());
    cmd
}

/// Where stable cargo puts its artefacts (honours `CARGO_TARGET_DIR` like cargo does).
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

/// `cargo xtask test [-- args]`: the whole suite, including the root-only end-to-end tests.
pub fn test(extra: &[String]) -> Result<ExitCode> {
    require_root("the test suite loads eBPF programs and creates network namespaces")?;
    // Everything the suite runs besides cargo: on a fresh machine this command alone
    // sets it up (CI runs nothing else).
    packages::install_missing("test", test_packages)
        .context("installing the programs the end-to-end tests drive")?;
    let python = python_env::ensure("test", &target_dir().join("test-python"))
        .context("making the Python environment of the gRPC, WebSocket and MCP tests")?;
    toolchain::ensure_lint_components()?;
    // Formatting and clippy first.
    let lint = lint()?;
    check_status(cargo().args(["build", "-p", "redirector"]))?;
    let bin = target_dir().join("debug/redirector");
    let unit_tests = unit_test_binary("redirector")?;
    // The container test runs the agent image (release build): built here, as CI would.
    let image = image::build().context("building the agent image for the container test")?;
    let status = status(
        cargo()
            .args(["test", "--workspace"])
            .args(extra)
            .env("REDIRECTOR_BIN", &bin)
            .env("REDIRECTOR_UNIT_TESTS", &unit_tests)
            .env(python_env::PYTHON_VAR, &python)
            .env("REDIRECTOR_IMAGE", &image.reference)
            .env("PATH", packages::path_with_sbin()),
    )?;
    if lint != ExitCode::SUCCESS {
        eprintln!("xtask test: the tests ran, but lint failed (see above)");
        return Ok(lint);
    }
    Ok(exit_code(status))
}

/// Builds the unit tests of library crate `name` and returns their binary, for tests
/// that run it elsewhere (`xtask/tests/kernel_tls_guest.rs` boots it in a guest kernel).
fn unit_test_binary(name: &str) -> Result<PathBuf> {
    let out = cargo()
        .args([
            "test",
            "-p",
            name,
            "--lib",
            "--no-run",
            "--message-format=json",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cargo test --no-run")?;
    if !out.status.success() {
        bail!("building the unit tests of {name} failed ({})", out.status);
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .filter(|m| m["profile"]["test"] == true)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .with_context(|| format!("cargo named no unit-test binary for {name}"))
}

/// The programs the end-to-end tests run, and the Debian package of each: the test bed
/// (`ip`, `nsenter`, `unshare`, `sysctl`), wire captures (`tcpdump`),
/// the test PKI (`openssl`), the HTTP tests' clients and server (curl, nginx and Java:
/// [`test_packages`]), the egress policy's ICMP and raw-socket clients (ping, python3),
/// and the guest kernel of the kernel-TLS tests (qemu, depmod, cpio; `xtask/src/guest.rs`).
/// The container test's podman and runc: [`image::CONTAINER_PROGRAMS`].
const TEST_PROGRAMS: [(&str, &str); 12] = [
    ("ip", "iproute2"),
    ("nsenter", "util-linux"),
    ("unshare", "util-linux"),
    ("sysctl", "procps"),
    ("tcpdump", "tcpdump"),
    ("openssl", "openssl"),
    ("curl", "curl"),
    ("ping", "iputils-ping"),
    ("python3", "python3-minimal"),
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("depmod", "kmod"),
    ("cpio", "cpio"),
];

/// Debian packages the end-to-end tests need and `PATH` lacks.
fn test_packages() -> Vec<&'static str> {
    let mut wanted: Vec<&'static str> = Vec::new();
    for (program, package) in TEST_PROGRAMS {
        if packages::which(program).is_none() && !wanted.contains(&package) {
            wanted.push(package);
        }
    }
    wanted.extend(packages::nginx_package());
    wanted.extend(packages::java_package());
    wanted.extend(image::missing_programs());
    wanted
}

/// `cargo xtask lint`: formatting and clippy over the workspace, as CI runs them.
///
/// The eBPF crate is linted by nightly clippy for `bpfel-unknown-none` (see
/// [`ebpf::clippy_ebpf`]) and excluded from the host clippy. Every check runs even if an
/// earlier one fails, so one invocation reports every problem.
pub fn lint() -> Result<ExitCode> {
    ebpf::build_ebpf()?;
    let fmt = status(cargo().args(["fmt", "--all", "--check"]))?;
    let clippy = status(
        cargo()
            .args(["clippy", "--workspace", "--exclude", "redirector-ebpf"])
            .args(["--all-targets", "--", "-D", "warnings"]),
    )?;
    let clippy_ebpf = ebpf::clippy_ebpf()?;
    let mut code = ExitCode::SUCCESS;
    let checks = [
        ("cargo fmt --all --check", fmt),
        ("cargo clippy", clippy),
        ("cargo +nightly clippy (eBPF)", clippy_ebpf),
    ];
    for (name, st) in checks {
        if !st.success() {
            eprintln!("lint: {name} failed ({st})");
            code = exit_code(st);
        }
    }
    Ok(code)
}

/// Fails with `why` unless we run as root.
fn require_root(why: &str) -> Result<()> {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("{why}: run it as root (sudo -E cargo xtask ...)");
    }
    Ok(())
}
