//! Watches the Backend directories: every change (create, modify, delete, rename, an
//! editor's write-then-rename, a ConfigMap volume's `..data` swap) reloads the whole
//! directory set and hands the new [`Catalog`] to the reconciler.
//!
//! Reloading everything keeps the logic trivially right (a Secret changing in one file
//! affects a Backend in another); events are coalesced for a short quiet period so an
//! editor's burst of events costs one reload.

use std::{path::PathBuf, time::Duration};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::backend::{self, Catalog};

/// Quiet time after the last event before reloading.
const SETTLE: Duration = Duration::from_millis(50);

/// Starts watching `dirs`; new catalogs are sent to `catalogs` until `shutdown`.
pub fn spawn(
    dirs: Vec<PathBuf>,
    catalogs: mpsc::Sender<Catalog>,
    shutdown: CancellationToken,
) -> notify::Result<tokio::task::JoinHandle<()>> {
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
    Ok(tokio::spawn(async move {
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
            let loaded = tokio::task::spawn_blocking(move || backend::load(&dirs)).await;
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
    }))
}
