//! The figures one agent run produces: start-up ([`Run`]), and for the main run the idle
//! window and the changes after it ([`AfterStart`], [`Change`]). `report` renders them.

use super::inspect::Memory;

/// What one run measured.
#[derive(Debug)]
pub struct Run {
    pub label: String,
    pub backends: usize,
    pub per_name: usize,
    /// Agent spawned -> its ready line seen by us.
    pub ready_ms: f64,
    /// Agent spawned -> the ready line's own timestamp.
    pub ready_log_ms: Option<f64>,
    /// The first `Backends applied` line: `elapsed_ms` and `addresses`.
    pub applied_ms: Option<u64>,
    pub applied_addresses: Option<u64>,
    /// Log lines up to the ready line, as (ms since spawn, message).
    pub timeline: Vec<(f64, String)>,
    pub mem_ready: Memory,
    /// CPU time (user + system) the agent used until ready, seconds.
    pub cpu_ready_s: f64,
    /// Entries in the BACKENDS map after start-up (bpftool), and its capacity.
    pub map_entries: usize,
    pub map_capacity: u64,
    pub after: Option<AfterStart>,
}

/// The main run's figures after start-up.
#[derive(Debug)]
pub struct AfterStart {
    pub idle_s: f64,
    pub idle_cpu_s: f64,
    pub mem_idle: Memory,
    pub changes: Vec<Change>,
    /// Spacing between changes (the pause before each rename), ms.
    pub pauses_ms: (u64, u64),
    pub mem_changes: Memory,
    /// CPU time the agent used between each rename and its `Backends applied`, summed.
    pub changes_cpu_s: f64,
    pub map_entries_changes: usize,
    /// `Backend address map updated` lines seen in the idle window (should be none:
    /// hosts-file answers do not change).
    pub idle_map_updates: usize,
}

/// One change: a new file with one Backend renamed into the directory.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// Rename -> the map-updated line seen by us (bench clock).
    pub seen_ms: f64,
    /// Rename (SystemTime) -> the map-updated line's own timestamp.
    pub log_ms: Option<f64>,
    /// Rename -> the agent's `Backend added` line for it (watch settle + reload, in which
    /// only changed files are parsed and validated).
    pub reload_ms: Option<f64>,
    /// `Backend added` -> map updated (resolve, table, map sync), agent timestamps.
    pub apply_ms: Option<f64>,
    /// `elapsed_ms` of the `Backends applied` line (the reconciler's whole apply).
    pub applied_ms: Option<u64>,
}
