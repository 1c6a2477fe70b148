//! Watches the Backend directories: every change (create, modify, delete, rename, an
//! editor's write-then-rename, a ConfigMap volume's `..data` swap) reloads the whole
//! directory set and hands the new [`Catalog`] to the reconciler.
//!
//! Reloading everything keeps the logic trivially right (a Secret changing in one file
//! affects a Backend in another), and the [`DirectoryLoader`] makes it cheap: only files
//! whose stamp changed are parsed again. Events are coalesced for a short quiet period
//! so an editor's burst of events costs one reload.

use std::{path::PathBuf, time::Duration};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::backend::{Catalog, DirectoryError, DirectoryLoader};

/// Quiet time after the last event before reloading.
const SETTLE: Duration = Duration::from_millis(50);

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
    for dir in &dirs {
        watcher.watch(dir, RecursiveMode::Recursive)?;
    }
    let mut first = DirectoryLoader::default();
    let catalog = first.load(&dirs)?;
    let mut loader = Some(first);
    tokio::spawn(async move {
        // Owned by the task: dropping it stops the watch.
        let _watcher = watcher;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                event = events.recv() => if event.is_none() { return },
            }
            // Coalesce the burst.
            loop {
                match tokio::time::timeout(SETTLE, events.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            let dirs = dirs.clone();
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
            match loaded {
                Ok(Ok(catalog)) => {
                    if catalogs.send(catalog).await.is_err() {
                        return;
                    }
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "reloading Backends failed; keeping the current ones")
                }
                Err(error) => tracing::error!(%error, "Backend reload task"),
            }
        }
    });
    Ok(catalog)
}
