//! The shared libraries a binary links, as `ldd` lists them: what an image from scratch
//! must hold beside it (distroless/cc holds glibc and libgcc_s for the same reason).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

/// The files the dynamic loader opens for `binary`, the loader itself included, at the
/// paths it looks for them; empty for a statically linked binary.
pub fn linked(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .context("cannot run ldd")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if stdout.contains("statically linked") || stdout.contains("not a dynamic executable") {
        return Ok(Vec::new());
    }
    if !out.status.success() {
        bail!(
            "ldd {} failed ({}): {}",
            binary.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_ldd(&stdout)
}

/// `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x..)` gives the path after `=>`,
/// `/lib64/ld-linux-x86-64.so.2 (0x..)` the loader; the vDSO has no file.
fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let path = match line.split_once("=>") {
            Some((name, target)) => {
                let target = target.split_whitespace().next().unwrap_or_default();
                if target == "not" {
                    bail!("ldd: {} not found", name.trim());
                }
                target
            }
            None => line.split_whitespace().next().unwrap_or_default(),
        };
        if path.starts_with('/') {
            files.push(PathBuf::from(path));
        } else if !path.starts_with("linux-vdso") && !path.starts_with("linux-gate") {
            bail!("ldd: cannot read the line {line:?}");
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ldd_output() -> Result<()> {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(text)?,
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(parse_ldd("\tlibfoo.so => not found\n").is_err());
        Ok(())
    }
}
