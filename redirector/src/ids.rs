//! The hash behind every id the datapath stores: Backend and group ids, namespace
//! scopes, virtual-address offsets. They are hashes of names, so they stay the same
//! across restarts with no registry to keep; keyed with a secret of the node's (SipHash
//! 1-3, key pinned beside the maps), so no tenant can pick a name that hashes like
//! another's. Without a key (pins of an agent from before keys, unit tests, offline
//! commands) the hash is the unkeyed FNV-1a those agents used, so their ids still hold.

use std::{hash::Hasher, sync::OnceLock};

use siphasher::sip::SipHasher13;

/// A node's id key.
pub type IdKey = [u8; 16];

static KEY: OnceLock<Option<IdKey>> = OnceLock::new();

/// Sets the key for the life of the process, before the first id is made (the agent
/// does once, at start; a second call keeps the first key).
pub fn install(key: Option<IdKey>) {
    let _ = KEY.set(key);
}

/// Hashes the parts of a name into an id.
pub enum IdHasher {
    Keyed(SipHasher13),
    Unkeyed(fnv::FnvHasher),
}

impl IdHasher {
    /// With the installed key, if any.
    pub fn new() -> Self {
        Self::with(KEY.get().copied().flatten().as_ref())
    }

    fn with(key: Option<&IdKey>) -> Self {
        match key {
            Some(key) => Self::Keyed(SipHasher13::new_with_key(key)),
            None => Self::Unkeyed(fnv::FnvHasher::default()),
        }
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        match self {
            Self::Keyed(hasher) => hasher.write(bytes),
            Self::Unkeyed(hasher) => hasher.write(bytes),
        }
    }

    fn finish(&self) -> u64 {
        match self {
            Self::Keyed(hasher) => hasher.finish(),
            Self::Unkeyed(hasher) => hasher.finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(key: Option<&IdKey>, name: &str) -> u64 {
        let mut hasher = IdHasher::with(key);
        hasher.write(name.as_bytes());
        hasher.finish()
    }

    #[test]
    fn keys_give_their_own_ids_and_no_key_gives_the_old_ones() {
        let (a, b) = ([1; 16], [2; 16]);
        let name = "team-a/api";
        assert_eq!(hash(Some(&a), name), hash(Some(&a), name), "stable");
        assert_ne!(hash(Some(&a), name), hash(Some(&b), name));
        let mut fnv = fnv::FnvHasher::default();
        fnv.write(name.as_bytes());
        assert_eq!(hash(None, name), fnv.finish(), "as agents before keys");
        assert_ne!(hash(Some(&a), name), hash(None, name));
    }
}
