//! Watches the Backend directories: every change (create, modify, delete, rename, an
//! editor's write-then-rename, a ConfigMap volume's `..data` swap) reloads the whole
//! directory set and hands the new [`Catalog`] to the reconciler.
//!
//! A directory swapped as a whole (a retargeted symlink, one moved over it) is watched
//! anew, and a reload that failed is tried again after a while, changes or not.
//!
//! Reloading everything keeps the logic trivially right (a Secret changing in one file
//! affects a Backend in another), and the [`DirectoryLoader`] makes it cheap: only files
//! whose stamp changed are parsed again. Events are coalesced for a short quiet period
//! so an editor's burst of events costs one reload.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::{
    sync::mpsc,
    time::{Instant, sleep_until},
};
use tokio_util::sync::CancellationToken;

use crate::backend::{Catalog, DirectoryError, DirectoryLoader};

/// Quiet time after the last event before reloading.
const SETTLE: Duration = Duration::from_millis(50);
/// After a failed reload (a directory half swapped, say), the next try.
const RETRY: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot watch the Backend directories: {0}")]
    Notify(#[from] notify::Error),
    #[error(transparent)]
    Load(#[from] DirectoryError),
}

/// Starts watching `dirs`, then loads them: a change made in between is reloaded, never
/// missed. Returns the first catalog; later ones are sent to `catalogs` until `shutdown`.
pub fn spawn(
    dirs: Vec<PathBuf>,
    catalogs: mpsc::Sender<Catalog>,
    shutdown: CancellationToken,
) -> Result<Catalog, WatchError> {
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let mut watcher = RecommendedWatcher::new(
        move |event: notify::Result<notify::Event>| {
            // Access events (open, close-nowrite) change nothing; everything else may.
            if !matches!(&event, Ok(e) if e.kind.is_access()) {
                let _ = events_tx.send(());
            }
        },
        notify::Config::default(),
    )?;
    let mut roots = Roots::watch(&mut watcher, dirs)?;
    let mut first = DirectoryLoader::default();
    let catalog = first.load(&roots.dirs)?;
    let mut loader = Some(first);
    tokio::spawn(async move {
        // Owned by the task: dropping it stops the watch.
        let mut watcher = watcher;
        // Set after a failed reload: try again then, events or not.
        let mut retry: Option<Instant> = None;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                event = events.recv() => if event.is_none() { return },
                () = sleep_until(retry.unwrap_or_else(Instant::now)), if retry.is_some() => {}
            }
            // Coalesce the burst.
            loop {
                match tokio::time::timeout(SETTLE, events.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            roots.follow(&mut watcher);
            let dirs = roots.dirs.clone();
            // The loader travels to the blocking thread and back; after a panic there
            // the next reload starts with an empty cache.
            let mut taken = loader.take().unwrap_or_default();
            let loaded = tokio::task::spawn_blocking(move || {
                let catalog = taken.load(&dirs);
                (taken, catalog)
            })
            .await
            .map(|(taken, catalog)| {
                loader = Some(taken);
                catalog
            });
            retry = None;
            match loaded {
                Ok(Ok(catalog)) => {
                    if catalogs.send(catalog).await.is_err() {
                        return;
                    }
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, retry_in = ?RETRY, "reloading Backends failed; keeping the current ones");
                    retry = Some(Instant::now() + RETRY);
                }
                Err(error) => tracing::error!(%error, "Backend reload task"),
            }
        }
    });
    Ok(catalog)
}

/// The watched directories, and what each was when its watch was set: a directory
/// swapped as a whole (a retargeted symlink, as git-sync makes; a directory moved or
/// made anew over it) is another inode, whose watch must be set again. The parent of
/// each is watched too (not recursively), so such a swap is seen at all.
struct Roots {
    dirs: Vec<PathBuf>,
    watched: Vec<Option<(u64, u64, Option<SystemTime>)>>,
}

impl Roots {
    fn watch(watcher: &mut RecommendedWatcher, dirs: Vec<PathBuf>) -> Result<Self, WatchError> {
        let mut watched = Vec::with_capacity(dirs.len());
        for dir in &dirs {
            watcher.watch(dir, RecursiveMode::Recursive)?;
            watched.push(identity(dir));
            // Absolute: `backends` alone has an empty parent.
            let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
            if let Some(parent) = absolute.parent() {
                watcher.watch(parent, RecursiveMode::NonRecursive)?;
            }
        }
        Ok(Self { dirs, watched })
    }

    /// Sets the watch again on every directory that is not the one watched any more.
    fn follow(&mut self, watcher: &mut RecommendedWatcher) {
        for (dir, watched) in self.dirs.iter().zip(&mut self.watched) {
            let now = identity(dir);
            if now == *watched || now.is_none() {
                continue;
            }
            // The old inode's watch may be gone with it already.
            let _ = watcher.unwatch(dir);
            match watcher.watch(dir, RecursiveMode::Recursive) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "the Backend directory was swapped; watching the new one");
                    *watched = now;
                }
                Err(error) => {
                    tracing::warn!(dir = %dir.display(), %error, "cannot watch the swapped Backend directory; trying again at the next change")
                }
            }
        }
    }
}

/// The directory `path` leads to (symlinks followed): device, inode and birth time (a
/// directory made anew may get the inode number of the one it replaced).
fn identity(path: &Path) -> Option<(u64, u64, Option<SystemTime>)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino(), meta.created().ok()))
}
