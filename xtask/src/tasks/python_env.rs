//! The Python environment of the end-to-end tests: real third-party clients and servers
//! from PyPI (grpcio, websockets, the official MCP SDK) in a virtual environment of their
//! own under the target directory, made when missing. The system's Python is left alone:
//! Debian's refuses `pip install` outside a virtual environment (PEP 668).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::packages;

/// What the tests import, and the PyPI package of each. The MCP SDK is pinned: its 2.x
/// line renamed the server API (`FastMCP` is `MCPServer` there).
const MODULES: [(&str, &str); 3] = [
    ("grpc", "grpcio"),
    ("websockets", "websockets"),
    (
        "mcp.server.fastmcp, mcp.client.streamable_http, uvicorn",
        "mcp==1.30.0",
    ),
];

/// The variable that tells the tests which interpreter to run.
pub const PYTHON_VAR: &str = "REDIRECTOR_TEST_PYTHON";

/// The interpreter of the environment at `dir`, made (with `python3 -m venv`) and
/// filled (`pip install`) where it lacks a module of [`MODULES`]. `task` prefixes the
/// progress lines.
pub fn ensure(task: &str, dir: &Path) -> Result<PathBuf> {
    let python = dir.join("bin/python");
    if imports_all(&python) {
        return Ok(python);
    }
    if !python.is_file() {
        println!(
            "{task}: making the tests' Python environment in {}",
            dir.display()
        );
        if !make_venv(dir)? {
            // Debian splits `venv` out of its Python (ensurepip is missing without it).
            packages::install_missing(task, || {
                if make_venv_would_work() {
                    Vec::new()
                } else {
                    vec!["python3-venv"]
                }
            })?;
            if !make_venv(dir)? {
                bail!("python3 -m venv {} failed", dir.display());
            }
        }
    }
    let wanted: Vec<&str> = MODULES.iter().map(|(_, package)| *package).collect();
    println!("{task}: pip install {} (PyPI)", wanted.join(" "));
    super::check_status(
        Command::new(&python)
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .args(&wanted),
    )?;
    if !imports_all(&python) {
        bail!(
            "{} still cannot import {:?} after pip install",
            python.display(),
            MODULES.map(|(module, _)| module)
        );
    }
    Ok(python)
}

/// Whether `python` exists and imports every module of [`MODULES`].
fn imports_all(python: &Path) -> bool {
    let modules: Vec<&str> = MODULES.iter().map(|(module, _)| *module).collect();
    python.is_file()
        && Command::new(python)
            .args(["-c", &format!("import {}", modules.join(", "))])
            .output()
            .is_ok_and(|out| out.status.success())
}

/// `python3 -m venv DIR`; `false` if it failed (a half-made directory is removed).
fn make_venv(dir: &Path) -> Result<bool> {
    let python3 = packages::which("python3").context("python3 is not on PATH")?;
    let status = Command::new(python3)
        .args(["-m", "venv"])
        .arg(dir)
        .status()
        .context("cannot run python3 -m venv")?;
    if !status.success() && dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    Ok(status.success())
}

/// Whether `python3` has what `venv` needs (`ensurepip`).
fn make_venv_would_work() -> bool {
    Command::new("python3")
        .args(["-c", "import ensurepip, venv"])
        .output()
        .is_ok_and(|out| out.status.success())
}
