//! Metric handles by (Backend, source namespace), found without allocating.
//!
//! prometheus-client's `Family` takes an owned label set for every look-up and cannot be
//! listed, so handles that are looked up per connection, or read back per Backend for
//! `/backends`, are also kept here: a hit is two hash look-ups by `&str` under a read
//! lock. The handles are the family's own (they share their value), so what is counted
//! here is what `/metrics` shows.

use std::{collections::HashMap, sync::RwLock};

/// Backend -> source namespace -> handle.
#[derive(Debug)]
pub struct BySource<T>(RwLock<HashMap<String, HashMap<String, T>>>);

impl<T> Default for BySource<T> {
    fn default() -> Self {
        Self(RwLock::default())
    }
}

impl<T: Clone> BySource<T> {
    /// The handle of (`backend`, `source_namespace`), made by `make` the first time.
    pub fn get(&self, backend: &str, source_namespace: &str, make: impl FnOnce() -> T) -> T {
        let found = (self.0.read().unwrap_or_else(|p| p.into_inner()))
            .get(backend)
            .and_then(|sources| sources.get(source_namespace).cloned());
        if let Some(found) = found {
            return found;
        }
        let mut map = self.0.write().unwrap_or_else(|p| p.into_inner());
        let sources = map.entry(backend.to_owned()).or_default();
        (sources.entry(source_namespace.to_owned()))
            .or_insert_with(make)
            .clone()
    }

    /// `backend`'s handles by source namespace, read with `read`.
    pub fn each<V>(&self, backend: &str, mut read: impl FnMut(&T) -> V) -> Vec<(String, V)> {
        let map = self.0.read().unwrap_or_else(|p| p.into_inner());
        let Some(sources) = map.get(backend) else {
            return Vec::new();
        };
        (sources.iter())
            .map(|(source, handle)| (source.clone(), read(handle)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    };

    use super::*;

    #[test]
    fn a_handle_is_made_once_and_read_back_per_backend() {
        let handles: BySource<Arc<AtomicI64>> = BySource::default();
        let mut made = 0;
        for _ in 0..3 {
            let handle = handles.get("demo/a", "team-a", || {
                made += 1;
                Arc::default()
            });
            handle.fetch_add(1, Ordering::Relaxed);
        }
        handles.get("demo/a", "", Arc::default);
        assert_eq!(made, 1);
        let mut read = handles.each("demo/a", |h| h.load(Ordering::Relaxed));
        read.sort();
        assert_eq!(read, [("".to_owned(), 0), ("team-a".to_owned(), 3)]);
        assert!(handles.each("demo/b", |_| ()).is_empty());
    }
}
