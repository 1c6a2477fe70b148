//! The node's id key (see `crate::ids`), kept beside the pins as a directory whose name
//! holds it: a bpf filesystem takes directories, not files. Made with the first pins and
//! removed with them, so every agent on the node, a restarted or an upgrading one,
//! hashes names to the same ids.

use std::{fs, io};

use super::{DatapathError, pins::PinLayout, writer::WriterLock};
use crate::ids::IdKey;
use redirector_common::map_names;

/// The key pinned beside the maps, made if nothing is pinned yet. `None` when maps were
/// pinned by an agent from before keys: their ids are unkeyed, and stay so until
/// `redirector uninstall` (changing them would orphan every record in flight).
pub fn id_key(layout: &PinLayout) -> Result<Option<IdKey>, DatapathError> {
    layout.prepare()?;
    // Two agents starting on a bare node must not each make a key and keep their own:
    // one at a time looks and makes (a lock of its own, not the Backend map writer's).
    let maps = layout.maps_dir();
    let io = |source| DatapathError::Io {
        what: format!("lock {} to read or make the id key", maps.display()),
        source,
    };
    let _one_at_a_time = WriterLock::open(&maps)
        .and_then(WriterLock::take)
        .map_err(io)?;
    if let Some(key) = pinned(layout)? {
        return Ok(Some(key));
    }
    if layout.map(map_names::BACKENDS).exists() {
        tracing::warn!(
            "the pinned maps come from an agent that kept no id key: Backend ids stay \
             unkeyed (FNV-1a), so a Backend name could be made to hash like another's \
             (both are then refused, never merged); run `redirector uninstall` once to \
             get keyed ids"
        );
        return Ok(None);
    }
    let key: IdKey = rand::random();
    let marker = layout.id_key_marker(&hex(&key));
    match fs::create_dir(&marker) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(DatapathError::Io {
                what: format!("create {}", marker.display()),
                source,
            });
        }
    }
    Ok(Some(key))
}

/// The least valid key among the markers.
fn pinned(layout: &PinLayout) -> Result<Option<IdKey>, DatapathError> {
    let markers = layout
        .id_key_markers()
        .map_err(|source| DatapathError::Io {
            what: format!("list {}", layout.root().display()),
            source,
        })?;
    let keys = markers.iter().filter_map(|marker| {
        let name = marker.file_name()?.to_str()?;
        parse(name.strip_prefix(super::pins::ID_KEY_MARKER)?)
    });
    Ok(keys.min())
}

fn hex(key: &IdKey) -> String {
    key.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn parse(hex: &str) -> Option<IdKey> {
    if hex.len() != 32 {
        return None;
    }
    let mut key = [0; 16];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_survive_their_marker_names() {
        let key: IdKey = rand::random();
        assert_eq!(parse(&hex(&key)), Some(key));
        assert_eq!(parse("00"), None);
        assert_eq!(parse(&"zz".repeat(16)), None);
    }
}
