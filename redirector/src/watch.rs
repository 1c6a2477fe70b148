//! Watches the Backend directories: every change (create, modify, delete, rename, an
//! editor's write-then-rename, a ConfigMap volume's `..data` swap) reloads the whole
//! directory set and hands the new [`Catalog`] to the reconciler, if it differs from the
//! last one handed (a reload that finds nothing changed is logged at debug level only).
//!
//! A directory swapped as a whole (a retargeted symlink, one moved over it) is watched
//! anew, and a reload that failed is tried again after a while, changes or not. Of the
//! events in a directory's parent only those of the directory's own entry count
//! ([`Places`]): a busy log file beside it changes nothing.
//!
//! Reloading everything keeps the logic trivially right (a Secret changing in one file
//! affects a Backend in another), and the [`DirectoryLoader`] makes it cheap: only files
//! whose stamp changed are parsed again. Events are coalesced for a short quiet period
//! so an editor's burst of events costs one reload.

mod roots;
#[cfg(test)]
mod tests;

use std::{path::PathBuf, time::Duration};

use notify::{RecommendedWatcher, Watcher};
use tokio::{
    sync::mpsc,
    time::{Instant, sleep_until},
};
use tokio_util::sync::CancellationToken;

use crate::backend::{Catalog, DirectoryError, DirectoryLoader};
use roots::{Places, Roots};

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
    let places = Places::new(&dirs);
    let mut watcher = RecommendedWatcher::new(
        {
            let places = places.clone();
            move |event: notify::Result<notify::Event>| {
                if places.matters(&event) {
                    let _ = events_tx.send(());
                }
            }
        },
        notify::Config::default(),
    )?;
    let mut roots = Roots::watch(&mut watcher, dirs, &places)?;
    let mut first = DirectoryLoader::default();
    let catalog = first.load(&roots.dirs)?;
    let mut loader = Some(first);
    // What the reconciler has: a reload that loads the same hands it nothing.
    let mut handed = catalog.clone();
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
                Ok(Ok(catalog)) if catalog == handed => {
                    tracing::debug!("Backend directories reloaded: nothing changed");
                }
                Ok(Ok(catalog)) => {
                    handed = catalog.clone();
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
