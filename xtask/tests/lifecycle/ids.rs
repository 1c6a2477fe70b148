//! The node's id key beside the pins: made with them, read by every later agent, and
//! absent from pins an agent from before keys made.

use std::{collections::BTreeSet, path::Path};

use super::assert_echo_redirected;
use crate::support::{Bed, ECHO_BACKEND};

/// The Backend ids in the pinned map (the key is 32 bytes: scope, address, port), and
/// the passthrough ids of virtual addresses apart (top bit set).
fn pinned_ids(pins: &Path) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let data = aya::maps::MapData::from_pin(pins.join("maps/BACKENDS")).expect("BACKENDS pin");
    let map: aya::maps::HashMap<_, [u8; 32], u64> =
        aya::maps::HashMap::try_from(aya::maps::Map::HashMap(data)).expect("a hash map");
    (map.iter().map(|entry| entry.expect("entry").1)).partition(|id| id & (1 << 63) == 0)
}

/// `demo/echo`'s id as agents without a key made it (FNV-1a of `namespace/name`).
fn unkeyed_echo_id() -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in b"demo/echo" {
        hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
    }
    (hash & !(1 << 63)).max(1)
}

fn id_key_markers(pins: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(pins).expect("pin directory");
    (entries.map(|entry| entry.expect("entry").file_name()))
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.starts_with("id-key-"))
        .collect()
}

#[test]
fn ids_are_keyed_per_node_and_kept_across_restarts() {
    let bed = Bed::new(ECHO_BACKEND);
    let pins = bed.pin_dir();
    let agent = bed.agent();
    let keys = id_key_markers(&pins);
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ids = pinned_ids(&pins);
    assert_eq!(ids.0.len(), 1, "{ids:?}");
    assert!(
        !ids.0.contains(&unkeyed_echo_id()),
        "the id is not the unkeyed hash"
    );

    // A restarted agent reads the same key: the same ids, nothing to rewrite.
    agent.kill().expect("SIGKILL");
    let agent = bed.agent();
    assert_eq!(id_key_markers(&pins), keys);
    assert_eq!(pinned_ids(&pins), ids);
    assert!(
        !agent
            .logs()
            .iter()
            .any(|l| l.contains("Backend address map updated"))
    );
    assert_echo_redirected(&bed);

    // Pins from an agent that kept no key: ids stay unkeyed, as that agent made them.
    agent.kill().expect("SIGKILL");
    std::fs::remove_dir(pins.join(&keys[0])).expect("remove the key marker");
    let agent = bed.agent();
    let warned = agent
        .logs()
        .into_iter()
        .find(|l| l.contains("kept no id key"));
    assert!(warned.is_some(), "{:?}", agent.logs());
    assert!(id_key_markers(&pins).is_empty(), "no key made for old pins");
    assert_eq!(pinned_ids(&pins).0, BTreeSet::from([unkeyed_echo_id()]));
    assert_echo_redirected(&bed);
}
