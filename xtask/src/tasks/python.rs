//! Python packages from PyPI the end-to-end tests run (the official MCP SDK), installed
//! with pip into a virtual environment of their own under the target directory: the
//! machine's Python stays as it was, and the version the tests were written for is the
//! one they get.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::packages;

/// The MCP Python SDK the MCP tests drive (server and client). Pinned: its 2.x line
/// renamed the server API (`FastMCP` is `MCPServer` there).
const MCP_SDK: &str = "mcp==1.30.0";
/// What the tests import; present only when the pinned SDK installed whole.
const MCP_IMPORTS: &str =
    "import mcp.server.fastmcp, mcp.client.streamable_http, uvicorn; print(mcp.__name__)";

/// The environment's Python with the MCP SDK, set up when missing.
pub fn mcp_python(target: &Path) -> Result<PathBuf> {
    let venv = target.join("python-mcp");
    let python = venv.join("bin/python");
    if imports(&python) {
        return Ok(python);
    }
    if !venv.join("bin/pip").exists() {
        make_venv(&venv)?;
    }
    println!(
        "test: installing the MCP Python SDK ({MCP_SDK}) with pip into {}",
        venv.display()
    );
    super::check_status(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(MCP_SDK),
    )
    .context("pip could not install the MCP Python SDK (is PyPI reachable?)")?;
    if !imports(&python) {
        bail!(
            "pip installed {MCP_SDK} but {} cannot import it",
            python.display()
        );
    }
    Ok(python)
}

fn imports(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", MCP_IMPORTS])
        .output()
        .is_ok_and(|out| out.status.success())
}

/// `python3 -m venv`; Debian splits the venv module (and pip) into python3-venv.
fn make_venv(venv: &Path) -> Result<()> {
    let create = || {
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(venv)
            .env("PATH", packages::path_with_sbin())
            .status()
            .is_ok_and(|status| status.success())
    };
    if create() {
        return Ok(());
    }
    packages::install_missing("test", || match packages::apt_knows("python3-venv") {
        true if !create_probe() => vec!["python3-venv"],
        _ => Vec::new(),
    })?;
    if !create() {
        bail!("python3 -m venv {} failed", venv.display());
    }
    Ok(())
}

/// Whether the venv module works (with pip), tried in a throw-away directory.
fn create_probe() -> bool {
    let Ok(dir) = tempfile::tempdir() else {
        return false;
    };
    Command::new("python3")
        .args(["-m", "venv"])
        .arg(dir.path().join("probe"))
        .status()
        .is_ok_and(|status| status.success())
}
