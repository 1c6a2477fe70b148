//! Finding the YAML files under the directories given on the command line.
//!
//! Order is deterministic (command-line order, then byte order of names, depth first) so
//! that "first definition wins" for duplicates means the same thing on every run.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::{DirectoryError, Problem};

/// Every YAML file under `roots`, each once, plus problems met on the way (an unreadable
/// subdirectory is a problem, not a failure: the rest still loads).
///
/// A root may also be a single file, which is read whatever its extension: naming a file
/// explicitly is a clear enough statement of intent.
pub(super) fn yaml_files(
    roots: &[PathBuf],
) -> Result<(Vec<PathBuf>, Vec<Problem>), DirectoryError> {
    let mut walk = Walk::default();
    for root in roots {
        let meta = fs::metadata(root).map_err(|source| DirectoryError::Unreadable {
            path: root.clone(),
            source,
        })?;
        if meta.is_file() {
            walk.add_file(root.clone());
            continue;
        }
        if !meta.is_dir() {
            return Err(DirectoryError::NotADirectory { path: root.clone() });
        }
        let entries = read_dir_sorted(root).map_err(|source| DirectoryError::Unreadable {
            path: root.clone(),
            source,
        })?;
        if walk.enter(root) {
            walk.entries(entries);
        }
    }
    Ok((walk.files, walk.problems))
}

#[derive(Default)]
struct Walk {
    files: Vec<PathBuf>,
    problems: Vec<Problem>,
    /// Canonical paths already taken, so overlapping roots or symlinks neither load a
    /// file twice (which would report it as its own duplicate) nor loop.
    seen: BTreeSet<PathBuf>,
}

impl Walk {
    /// Marks a directory as visited; `false` if it already was (symlink loop or overlap).
    fn enter(&mut self, dir: &Path) -> bool {
        let canonical = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        self.seen.insert(canonical)
    }

    fn add_file(&mut self, file: PathBuf) {
        let canonical = fs::canonicalize(&file).unwrap_or_else(|_| file.clone());
        if self.seen.insert(canonical) {
            self.files.push(file);
        }
    }

    fn entries(&mut self, entries: Vec<PathBuf>) {
        for path in entries {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                tracing::debug!(path = %path.display(), "skipping non-UTF-8 file name");
                continue;
            };
            if is_ignored_name(name) {
                continue;
            }
            // `metadata` follows symlinks: a linked file or directory counts as what it
            // points to, which is how ConfigMap volume mounts present their files.
            match fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => self.directory(path),
                Ok(meta) if meta.is_file() && is_yaml_name(name) => self.add_file(path),
                Ok(_) => {}
                Err(e) if is_yaml_name(name) => self
                    .problems
                    .push(Problem::file(&path, format!("cannot read: {e}"))),
                Err(_) => {}
            }
        }
    }

    fn directory(&mut self, dir: PathBuf) {
        if !self.enter(&dir) {
            return;
        }
        match read_dir_sorted(&dir) {
            Ok(entries) => self.entries(entries),
            Err(e) => self
                .problems
                .push(Problem::file(&dir, format!("cannot read directory: {e}"))),
        }
    }
}

fn read_dir_sorted(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut entries = fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()?;
    entries.sort();
    Ok(entries)
}

/// Hidden entries (`.git`, editor swap files like `.x.yaml.swp`, and the `..data` /
/// `..2024_01_01` entries of Kubernetes ConfigMap volumes, whose real files are reached
/// through the visible symlinks) and editor backups (`x.yaml~`, `#x.yaml#`).
fn is_ignored_name(name: &str) -> bool {
    name.starts_with('.') || name.ends_with('~') || (name.starts_with('#') && name.ends_with('#'))
}

fn is_yaml_name(name: &str) -> bool {
    Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}
