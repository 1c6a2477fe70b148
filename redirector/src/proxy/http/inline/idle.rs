//! A pool's idle HTTP/1 connections, lent to the next client connection that needs one.
//! Nothing polls them while they wait: one the server closed meanwhile is found closed
//! when it is lent (and the next one taken), or swept once it expires.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;

use super::Held;

/// A pool's idle HTTP/1 connections, the most recently used lent first. One idle for
/// the pool's idle timeout is never lent again, and is closed by the next sweep (so
/// between one and two idle timeouts after its last response), or with the pool.
pub struct IdleConnections {
    idle_timeout: Duration,
    held: Mutex<VecDeque<(Instant, Box<Held>)>>,
    /// The pool was retired (its Backend changed): nothing is kept any more.
    retired: CancellationToken,
    /// A task closes expired ones while any wait.
    pub(super) sweeping: AtomicBool,
}

impl IdleConnections {
    pub fn new(idle_timeout: Duration, retired: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            idle_timeout,
            held: Mutex::default(),
            retired,
            sweeping: AtomicBool::new(false),
        })
    }

    pub(super) fn list(&self) -> std::sync::MutexGuard<'_, VecDeque<(Instant, Box<Held>)>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently idled connection that has not expired.
    pub(super) fn take(&self) -> Option<Box<Held>> {
        let mut list = self.list();
        let now = Instant::now();
        while let Some((since, held)) = list.pop_back() {
            if now.duration_since(since) < self.idle_timeout {
                return Some(held);
            }
            // Older ones are older still.
            list.clear();
        }
        None
    }

    /// Closes every idle connection (the pool was retired).
    pub fn clear(&self) {
        self.list().clear();
    }

    /// Keeps `held` for the next request (not once the pool is retired, nor with an
    /// idle timeout of zero), and starts the sweep if none runs.
    pub(super) fn put(self: &Arc<Self>, held: Box<Held>) {
        let mut list = self.list();
        // Under the lock: `Pools::retain` cancels, then clears.
        if self.retired.is_cancelled() || self.idle_timeout.is_zero() {
            return;
        }
        list.push_back((Instant::now(), held));
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                // Dropped outside the runtime (it is shutting down): nothing to keep.
                list.clear();
                self.sweeping.store(false, Ordering::Relaxed);
                return;
            };
            runtime.spawn(sweep(Arc::downgrade(self), self.idle_timeout));
        }
    }
}

/// Closes `idle`'s expired connections every `period` while any wait.
async fn sweep(idle: Weak<IdleConnections>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(idle) = idle.upgrade() else { return };
        let mut list = idle.list();
        let now = Instant::now();
        list.retain(|(since, _)| now.duration_since(*since) < idle.idle_timeout);
        if list.is_empty() {
            // Under the lock: a `put` after this starts a new sweep.
            idle.sweeping.store(false, Ordering::Relaxed);
            return;
        }
    }
}
