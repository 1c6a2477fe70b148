//! The watch on real directories (inotify): what reloads and hands a catalog on, what
//! does not. Each test has a root of its own; the Backend directory is `root/backends`
//! (or what a path there leads to), so its parent is the root.

use std::{
    fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    time::Duration,
};

use notify::{
    Event, EventKind,
    event::{AccessKind, CreateKind, DataChange, ModifyKind, RenameMode},
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Catalog, Places, spawn};

fn xbackend(name: &str) -> String {
    format!(
        "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\n\
         metadata: {{name: {name}, namespace: demo}}\n\
         spec:\n  type: ExternalHostname\n  externalHostname: {{hostname: {name}.example.com}}\n  \
         port: {{port: 443}}\n"
    )
}

fn names(catalog: &Catalog) -> Vec<String> {
    catalog.backends.iter().map(|b| b.key.to_string()).collect()
}

/// A directory at `path` holding `backends.yaml` with Backend `demo/{name}`.
fn version(path: &Path, name: &str) -> PathBuf {
    fs::create_dir_all(path).unwrap();
    fs::write(path.join("backends.yaml"), xbackend(name)).unwrap();
    path.to_path_buf()
}

/// Replaces `path` by renaming something over it, as editors, git-sync and the kubelet do.
fn swap(path: &Path, make: impl FnOnce(&Path)) {
    let temporary = path.with_file_name(".swap.tmp");
    make(&temporary);
    fs::rename(&temporary, path).unwrap();
}

/// The watch of `dir`: what it loaded first, and where later catalogs arrive.
struct Watching {
    catalogs: mpsc::Receiver<Catalog>,
    stop: CancellationToken,
}

impl Watching {
    fn start(dir: &Path, first: &str) -> Watching {
        let (catalogs_tx, catalogs) = mpsc::channel(16);
        let stop = CancellationToken::new();
        let catalog = spawn(vec![dir.to_path_buf()], catalogs_tx, stop.clone()).unwrap();
        assert_eq!(names(&catalog), [format!("demo/{first}")]);
        Watching { catalogs, stop }
    }

    /// The next catalog handed on (5 s at most).
    async fn next(&mut self) -> Vec<String> {
        let next = tokio::time::timeout(Duration::from_secs(5), self.catalogs.recv()).await;
        names(&next.expect("a catalog within 5 s").expect("the watch runs"))
    }

    /// Fails if a catalog is handed on within a few settle periods.
    async fn none(&mut self, after: &str) {
        let next = tokio::time::timeout(Duration::from_millis(400), self.catalogs.recv()).await;
        if let Ok(Some(catalog)) = next {
            panic!("{after}: a catalog was handed on: {:?}", names(&catalog));
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[tokio::test]
async fn files_written_beside_the_directory_reload_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = version(&root.path().join("backends"), "a");
    let mut watch = Watching::start(&dir, "a");
    // An agent logging into the parent of its Backend directory; its access log there;
    // anything else coming and going there.
    for i in 0..50 {
        fs::write(root.path().join("agent.log"), format!("line {i}\n")).unwrap();
        fs::write(root.path().join("access.log"), format!("request {i}\n")).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fs::create_dir(root.path().join("other")).unwrap();
    fs::rename(root.path().join("other"), root.path().join("other2")).unwrap();
    fs::remove_dir(root.path().join("other2")).unwrap();
    watch.none("files beside the directory").await;
    // The watch still works.
    fs::write(dir.join("more.yaml"), xbackend("b")).unwrap();
    assert_eq!(watch.next().await, ["demo/a", "demo/b"]);
}

#[tokio::test]
async fn a_reload_that_finds_nothing_changed_hands_nothing_on() {
    let root = tempfile::tempdir().unwrap();
    let dir = version(&root.path().join("backends"), "a");
    let mut watch = Watching::start(&dir, "a");
    // Written again with the same text, an unrelated file, a file read.
    fs::write(dir.join("backends.yaml"), xbackend("a")).unwrap();
    fs::write(dir.join("notes.txt"), "hello").unwrap();
    let _ = fs::read(dir.join("backends.yaml")).unwrap();
    watch.none("the same Backends").await;
}

#[tokio::test]
async fn an_editors_write_then_rename_is_applied() {
    let root = tempfile::tempdir().unwrap();
    let dir = version(&root.path().join("backends"), "a");
    let mut watch = Watching::start(&dir, "a");
    swap(&dir.join("backends.yaml"), |tmp| {
        fs::write(tmp, xbackend("b")).unwrap();
    });
    assert_eq!(watch.next().await, ["demo/b"]);
}

#[tokio::test]
async fn a_configmap_volume_data_swap_is_applied() {
    // The kubelet's layout: the files are symlinks through `..data` to a timestamped
    // directory, and an update retargets `..data` by renaming a new symlink over it.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("backends");
    version(&dir.join("..2026_11_27_1"), "a");
    symlink("..2026_11_27_1", dir.join("..data")).unwrap();
    symlink("..data/backends.yaml", dir.join("backends.yaml")).unwrap();
    let mut watch = Watching::start(&dir, "a");
    version(&dir.join("..2026_11_27_2"), "b");
    swap(&dir.join("..data"), |tmp| {
        symlink("..2026_11_27_2", tmp).unwrap();
    });
    fs::remove_dir_all(dir.join("..2026_11_27_1")).unwrap();
    assert_eq!(watch.next().await, ["demo/b"]);

    // Also when the path given is `..data` itself, whose swap is in the parent.
    let mut data = Watching::start(&dir.join("..data"), "b");
    version(&dir.join("..2026_11_27_3"), "c");
    swap(&dir.join("..data"), |tmp| {
        symlink("..2026_11_27_3", tmp).unwrap();
    });
    assert_eq!(data.next().await, ["demo/c"]);
}

#[tokio::test]
async fn a_directory_renamed_over_the_path_is_applied_and_watched() {
    let root = tempfile::tempdir().unwrap();
    let dir = version(&root.path().join("backends"), "a");
    let mut watch = Watching::start(&dir, "a");
    let new = version(&root.path().join("backends.new"), "b");
    fs::rename(&dir, root.path().join("backends.old")).unwrap();
    fs::rename(&new, &dir).unwrap();
    assert_eq!(watch.next().await, ["demo/b"]);
    // The new directory's own watch: an edit inside it is seen.
    fs::write(dir.join("more.yaml"), xbackend("c")).unwrap();
    assert_eq!(watch.next().await, ["demo/b", "demo/c"]);
}

#[tokio::test]
async fn a_retargeted_symlink_is_applied_and_followed() {
    // As git-sync does: the path given is a symlink renamed over with a new one.
    let root = tempfile::tempdir().unwrap();
    let link = root.path().join("current");
    symlink(version(&root.path().join("v1"), "a"), &link).unwrap();
    let mut watch = Watching::start(&link, "a");
    let v2 = version(&root.path().join("v2"), "b");
    swap(&link, |tmp| symlink(&v2, tmp).unwrap());
    assert_eq!(watch.next().await, ["demo/b"]);
    fs::write(link.join("more.yaml"), xbackend("c")).unwrap();
    assert_eq!(watch.next().await, ["demo/b", "demo/c"]);
    // The old version, still beside it, is none of its business.
    fs::write(root.path().join("v1/more.yaml"), xbackend("d")).unwrap();
    watch.none("an edit in the old version").await;
}

fn event(kind: EventKind, paths: &[&str]) -> notify::Result<Event> {
    let mut event = Event::new(kind);
    for path in paths {
        event = event.add_path(PathBuf::from(path));
    }
    Ok(event)
}

#[test]
fn only_the_directory_and_its_entry_in_the_parent_matter() {
    let places = Places::new(&[PathBuf::from("/srv/rd/backends")]);
    let write = EventKind::Modify(ModifyKind::Data(DataChange::Any));
    let renamed = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
    let created = EventKind::Create(CreateKind::File);
    for (kind, paths, matters) in [
        (write, &["/srv/rd/backends/a.yaml"][..], true),
        (write, &["/srv/rd/backends/sub/b.yaml"], true),
        (created, &["/srv/rd/backends"], true),
        (
            renamed,
            &["/srv/rd/.backends.tmp", "/srv/rd/backends"],
            true,
        ),
        (renamed, &["/srv/rd/backends", "/srv/rd/backends.old"], true),
        (write, &["/srv/rd/agent.log"], false),
        (created, &["/srv/rd/backends.new"], false),
        (renamed, &["/srv/rd/a.tmp", "/srv/rd/a"], false),
        // Reading changes nothing, wherever.
        (
            EventKind::Access(AccessKind::Any),
            &["/srv/rd/backends/a.yaml"],
            false,
        ),
        // Notify lost events (rescan), or a path of no watch set here: reload.
        (EventKind::Other, &[], true),
        (write, &["/elsewhere/x"], true),
    ] {
        assert_eq!(
            places.matters(&event(kind, paths)),
            matters,
            "{kind:?} {paths:?}"
        );
    }
    assert!(places.matters(&Err(notify::Error::generic("queue overflow"))));
}

#[test]
fn a_relative_directory_is_matched_as_given_and_as_absolute() {
    let cwd = std::env::current_dir().unwrap();
    let places = Places::new(&[PathBuf::from("backends")]);
    let write = EventKind::Modify(ModifyKind::Data(DataChange::Any));
    assert!(places.matters(&event(write, &["backends/a.yaml"])));
    let beside = cwd.join("agent.log");
    let entry = cwd.join("backends");
    assert!(!places.matters(&event(write, &[beside.to_str().unwrap()])));
    assert!(places.matters(&event(write, &[entry.to_str().unwrap()])));
}
