//! The runtime stage of `deploy/Dockerfile`, read: what the image built without a
//! registry must match (entrypoint, command, user, working directory, the files copied
//! in). Instructions this reader does not know are refused, so that a change to the
//! Dockerfile cannot silently make the two images differ.

use anyhow::{Context, Result, bail, ensure};

/// A `COPY [--from=STAGE] SOURCE.. DEST` of the runtime stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    pub from: Option<String>,
    pub sources: Vec<String>,
    pub dest: String,
}

/// The last stage of a Dockerfile: what ends up in the image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeStage {
    /// What `FROM` names (unexpanded: `${RUNTIME_IMAGE}`).
    pub base: String,
    pub copies: Vec<Copy>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
}

/// The last stage of the Dockerfile `text`.
pub fn runtime_stage(text: &str) -> Result<RuntimeStage> {
    let instructions = instructions(text);
    let last_from = (instructions.iter())
        .rposition(|(keyword, _)| keyword == "FROM")
        .context("no FROM instruction")?;
    let mut stage = RuntimeStage::default();
    for (keyword, rest) in &instructions[last_from..] {
        match keyword.as_str() {
            "FROM" => {
                let base = rest.split_whitespace().next().unwrap_or_default();
                stage.base = base.to_owned();
            }
            "COPY" => stage.copies.push(copy(rest)?),
            "USER" => stage.user = Some(rest.clone()),
            "WORKDIR" => stage.workdir = Some(rest.clone()),
            "ENTRYPOINT" => stage.entrypoint = Some(exec_form(keyword, rest)?),
            "CMD" => stage.cmd = Some(exec_form(keyword, rest)?),
            other => bail!(
                "the runtime stage has {other} {rest}, which xtask/src/image/dockerfile.rs \
                 does not reproduce: teach it, or the two images would differ"
            ),
        }
    }
    Ok(stage)
}

/// `(KEYWORD, arguments)` of every instruction: comments dropped, continuation lines
/// joined.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (keyword, rest) = current
                    .split_once(char::is_whitespace)
                    .unwrap_or((&current, ""));
                out.push((keyword.to_ascii_uppercase(), rest.trim().to_owned()));
                current.clear();
            }
        }
    }
    out
}

fn copy(rest: &str) -> Result<Copy> {
    let mut from = None;
    let mut paths = Vec::new();
    for word in rest.split_whitespace() {
        match word.strip_prefix("--") {
            Some(flag) => match flag.split_once('=') {
                Some(("from", stage)) => from = Some(stage.to_owned()),
                _ => bail!("COPY {rest}: the flag --{flag} is not supported"),
            },
            None => paths.push(word.to_owned()),
        }
    }
    let dest = paths.pop().context("COPY without a destination")?;
    ensure!(!paths.is_empty(), "COPY {rest}: no source");
    Ok(Copy {
        from,
        sources: paths,
        dest,
    })
}

/// The JSON (exec) form of ENTRYPOINT or CMD; the shell form would need a shell, which
/// the image does not have.
fn exec_form(keyword: &str, rest: &str) -> Result<Vec<String>> {
    serde_json::from_str(rest)
        .with_context(|| format!("{keyword} {rest}: only the JSON form is supported"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_last_stage() -> Result<()> {
        let text = "# syntax=docker/dockerfile:1\nARG X=1\nFROM rust AS builder\n\
                    RUN a \\\n    b\nFROM ${BASE}\n# comment\n\
                    COPY --from=builder /out/x /usr/bin/x\nUSER 0:0\n\
                    ENTRYPOINT [\"/usr/bin/x\"]\nCMD [\"--help\"]\n";
        let stage = runtime_stage(text)?;
        assert_eq!(stage.base, "${BASE}");
        assert_eq!(
            stage.copies,
            [Copy {
                from: Some("builder".into()),
                sources: vec!["/out/x".into()],
                dest: "/usr/bin/x".into()
            }]
        );
        assert_eq!(stage.user.as_deref(), Some("0:0"));
        assert_eq!(stage.entrypoint, Some(vec!["/usr/bin/x".to_owned()]));
        assert_eq!(stage.cmd, Some(vec!["--help".to_owned()]));
        assert!(runtime_stage("FROM a\nRUN x\n").is_err());
        assert!(runtime_stage("FROM a\nCMD x\n").is_err());
        Ok(())
    }

    #[test]
    fn reads_deploy_dockerfile() -> Result<()> {
        let path = crate::manifest::deploy_dir().join("Dockerfile");
        let stage = runtime_stage(&std::fs::read_to_string(path)?)?;
        assert_eq!(stage.copies.len(), 1);
        assert!(stage.entrypoint.is_some());
        Ok(())
    }
}
