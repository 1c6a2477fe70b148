//! `redirector uninstall`: what `run` pinned and set, removed and put back.

use std::path::Path;

use anyhow::Context;

use super::host;
use crate::datapath::{self, PinLayout};

/// `redirector uninstall`.
pub fn uninstall(bpffs: &Path) -> anyhow::Result<()> {
    let layout = PinLayout::new(bpffs);
    // Read before the markers that hold it go with the pins.
    let migrate_req = datapath::recorded_migrate_req(&layout)
        .with_context(|| format!("listing {}", bpffs.display()))?;
    let removed = datapath::uninstall(&layout)?;
    if removed.is_empty() {
        println!("nothing installed under {}", bpffs.display());
    } else {
        for path in &removed {
            println!("removed {}", path.display());
        }
        println!("detached and unpinned: {} pins removed", removed.len());
    }
    host::restore_request_migration(&migrate_req)
}
