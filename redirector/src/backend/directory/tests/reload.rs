//! The [`DirectoryLoader`] cache: after any sequence of edits, a reload gives exactly
//! what a fresh load of the same files gives.

use super::*;

/// Reloads with `loader` and compares with a load that has no cache.
fn reload_matches_fresh(loader: &mut DirectoryLoader, dir: &Path) -> Catalog {
    let reloaded = loader.load(&[dir.to_path_buf()]).unwrap();
    assert_eq!(
        reloaded,
        load_dir(dir),
        "cached reload differs from a fresh load"
    );
    reloaded
}

#[test]
fn edits_renames_and_deletes_are_seen_and_unchanged_files_reused() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(
        dir.path(),
        "a.yaml",
        &xbackend("demo", "a", "a.example.com", "443"),
    );
    let b = write(
        dir.path(),
        "b.yaml",
        &xbackend("demo", "b", "b.example.com", "443"),
    );
    let mut loader = DirectoryLoader::default();
    let first = reload_matches_fresh(&mut loader, dir.path());
    assert_eq!(names(&first), ["demo/a", "demo/b"]);

    // An edit in place with the same length: only the stamp's times tell.
    write(
        dir.path(),
        "a.yaml",
        &xbackend("demo", "a", "a.example.com", "444"),
    );
    let edited = reload_matches_fresh(&mut loader, dir.path());
    assert_eq!(edited.backends[0].port, 444);

    // An editor's write-then-rename over b.yaml, defining a duplicate of `a`: the
    // duplicate is still found across a cached file and a fresh one.
    let staged = write(
        dir.path(),
        ".b.yaml.tmp",
        &xbackend("demo", "a", "x.example.com", "1"),
    );
    fs::rename(&staged, &b).unwrap();
    let replaced = reload_matches_fresh(&mut loader, dir.path());
    assert_eq!(names(&replaced), ["demo/a"]);
    assert_eq!(replaced.problems.len(), 1, "{:?}", replaced.problems);
    assert!(replaced.problems[0].message.starts_with("duplicate:"));

    // Deleting the first definition makes the other one count.
    fs::remove_file(&a).unwrap();
    let deleted = reload_matches_fresh(&mut loader, dir.path());
    assert_eq!(names(&deleted), ["demo/a"]);
    assert_eq!(deleted.backends[0].hostname, "x.example.com");
    assert_eq!(
        loader.parsed.len(),
        1,
        "only files of the latest walk are kept"
    );

    // A YAML file that turns into a directory leaves no stale parse behind.
    fs::remove_file(&b).unwrap();
    let b_dir = dir.path().join("b.yaml");
    fs::create_dir(&b_dir).unwrap();
    let gone = reload_matches_fresh(&mut loader, dir.path());
    assert!(gone.backends.is_empty() && gone.problems.is_empty());
    assert!(loader.parsed.is_empty());
}

#[test]
fn unchanged_file_is_not_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "a.yaml",
        &xbackend("demo", "a", "a.example.com", "443"),
    );
    let mut loader = DirectoryLoader::default();
    loader.load(&[dir.path().to_path_buf()]).unwrap();
    // Swap the cached parse for a marker: a reload that used the cache returns it.
    let stamp = loader.parsed[&path].0;
    loader
        .parsed
        .insert(path.clone(), (stamp, Err("from the cache".to_owned())));
    let reloaded = loader.load(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(
        rendered(&reloaded),
        [format!("{}: from the cache", path.display())]
    );
    // Touching the file (same content) invalidates the entry.
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text).unwrap();
    let touched = loader.load(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(names(&touched), ["demo/a"]);
}
