//! The eBPF datapath as the agent sees it: load the embedded object, attach its programs
//! to the cgroup, pin everything, and adopt what a previous agent pinned.
//!
//! Restarts never open a gap: links stay pinned (so the programs stay attached and keep
//! redirecting to the proxy address) while no agent runs, and a new agent reuses the
//! pinned maps and links as they are and then brings the Backend map up to date by diff.

mod dns;
mod egress;
pub mod endpoint;
mod id_key;
mod install;
mod link_update;
mod maps;
mod pins;
mod writer;

use std::{
    fs, io,
    os::fd::{AsFd, BorrowedFd},
    path::PathBuf,
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData},
    programs::{
        CgroupAttachMode, CgroupSkbAttachType, Program,
        links::{FdLink, PinnedLink},
    },
};
pub use dns::{DnsMaps, DnsPending, Heartbeat, VirtualHostPins};
pub use egress::{EgressEvents, EgressMaps, MAX_ALLOWED_NETS, NetPrefix, exempt_agent_cgroup};
pub use id_key::id_key;
pub use install::{MigrateReqWas, record_migrate_req, recorded_migrate_req, uninstall};
use install::{ensure_layout, ensure_same_cgroup};
pub use maps::{AgentSockets, BackendMap, OwnedExemption, PendingRecords, ScopeMap, SyncStats};
pub use pins::PinLayout;
use redirector_common::{DnsConfig, ProxyConfig, map_names, program_names};
use writer::MapWriter;

/// The eBPF object built by `cargo xtask build-ebpf`, embedded at build time.
static OBJECT: &[u8] = aya::include_bytes_aligned!(env!("REDIRECTOR_BPF_OBJECT"));

/// The programs, in the order they are attached: the trackers before the hooks that
/// redirect, so no socket is redirected before its record can be followed and restored.
const PROGRAMS: [&str; 10] = [
    program_names::SOCK_OPS,
    program_names::GETPEERNAME4,
    program_names::GETPEERNAME6,
    program_names::DNS_EGRESS,
    program_names::RECVMSG4,
    program_names::RECVMSG6,
    program_names::CONNECT4,
    program_names::CONNECT6,
    program_names::SENDMSG4,
    program_names::SENDMSG6,
];

const MAPS: [&str; 18] = [
    map_names::BACKENDS,
    map_names::ENDPOINTS,
    map_names::SCOPES,
    map_names::SOCKETS,
    map_names::PENDING,
    map_names::AGENT_SOCKETS,
    map_names::CONFIG,
    map_names::DNS_CONFIG,
    map_names::HEARTBEAT,
    map_names::DNS_SOCKETS,
    map_names::DNS_PENDING,
    map_names::VIRTUAL_HOSTS,
    map_names::EGRESS_CONFIG,
    map_names::ALLOWED_NETS,
    map_names::CGROUP_MODES,
    map_names::AGENT_CGROUPS,
    map_names::EGRESS_EVENTS,
    map_names::EGRESS_LOST,
];

#[derive(Debug, thiserror::Error)]
pub enum DatapathError {
    #[error(
        "{path} is not on a bpf filesystem ({found}); mount one with \
         `mount -t bpf bpf /sys/fs/bpf` or pass --bpffs DIR on a bpffs"
    )]
    NotBpffs { path: PathBuf, found: String },
    #[error("cannot {what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot load the eBPF object")]
    Load(#[from] aya::EbpfError),
    #[error("eBPF program {name}")]
    Program {
        name: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("eBPF map {name}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("pinned link {path}")]
    Link {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(
        "an agent is running on the pins under {pins} with other settings ({running}) than \
         this one's ({ours}): start this one with the same --proxy-addr and \
         --backend-scope, or stop that one first (a DaemonSet changing them rolls with \
         maxSurge 0)"
    )]
    OtherSettings {
        pins: PathBuf,
        running: String,
        ours: String,
    },
    #[error("the eBPF object has no {0} (built from another version?)")]
    Missing(&'static str),
    #[error(
        "the programs pinned under {pins} are attached to another cgroup than {cgroup}; \
         run `redirector uninstall --bpffs {pins}` first, or pass the same --cgroup"
    )]
    OtherCgroup { pins: PathBuf, cgroup: PathBuf },
    #[error(
        "the maps pinned under {pins} have another layout ({found}) than this agent's \
         (layout-{LAYOUT_VERSION}): run `redirector uninstall --bpffs {pins}` first (connects \
         to Backends go direct until the agent is running again)"
    )]
    OtherLayout { pins: PathBuf, found: String },
}

/// Version of the pinned maps' layout (names, key and value types). Bumped when a map an
/// older agent pinned can no longer be used as it is; adding maps needs no bump (pins
/// without a marker, from before markers, are layout 2 too). Layout 3: the connection
/// and DNS records carry the caller's cgroup id.
const LAYOUT_VERSION: u32 = 3;

/// Sizes of the maps (see `--max-*` in `redirector run --help`).
#[derive(Debug, Clone, Copy)]
pub struct MapSizes {
    pub backend_addresses: u32,
    pub connections: u32,
    /// Pod cgroups with a scope (only used when Backends are scoped).
    pub scoped_cgroups: u32,
}

/// How a program came to be attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attachment {
    /// A pinned link from an earlier run was found and kept.
    Adopted,
    /// Attached now and pinned.
    Attached,
}

/// The maps of an installed datapath.
pub struct Datapath {
    pub backends: BackendMap,
    pub scopes: ScopeMap,
    pub pending: PendingRecords,
    pub agent_sockets: AgentSockets,
    pub dns: DnsMaps,
    pub egress: EgressMaps,
    pub attachments: Vec<(&'static str, Attachment)>,
}

impl Datapath {
    /// Loads, attaches (or adopts) and pins, and writes the proxy addresses.
    pub fn install(
        layout: &PinLayout,
        cgroup: &std::path::Path,
        sizes: MapSizes,
        proxy: &ProxyConfig,
        dns: &DnsConfig,
    ) -> Result<Datapath, DatapathError> {
        layout.prepare()?;
        ensure_layout(layout)?;
        let mut loader = EbpfLoader::new();
        let pin_paths: Vec<(&str, PathBuf)> = MAPS.iter().map(|n| (*n, layout.map(n))).collect();
        for (name, path) in &pin_paths {
            loader.map_pin_path(name, path.as_path());
        }
        loader
            .map_max_entries(map_names::BACKENDS, sizes.backend_addresses)
            .map_max_entries(map_names::ENDPOINTS, sizes.backend_addresses)
            .map_max_entries(map_names::SCOPES, sizes.scoped_cgroups)
            .map_max_entries(map_names::SOCKETS, sizes.connections)
            .map_max_entries(map_names::PENDING, sizes.connections)
            .map_max_entries(map_names::AGENT_SOCKETS, sizes.connections)
            .map_max_entries(map_names::DNS_SOCKETS, sizes.connections)
            .map_max_entries(map_names::DNS_PENDING, sizes.connections)
            .map_max_entries(map_names::VIRTUAL_HOSTS, sizes.backend_addresses)
            .map_max_entries(map_names::ALLOWED_NETS, MAX_ALLOWED_NETS)
            .map_max_entries(map_names::CGROUP_MODES, sizes.scoped_cgroups)
            .map_max_entries(map_names::AGENT_CGROUPS, egress::MAX_AGENT_CGROUPS);
        let mut ebpf = loader.load(OBJECT)?;
        warn_on_resized_pins(&ebpf, sizes);

        // Before the settings are written: an agent running beside this one (an upgrade)
        // writes the map for the settings it started with, and a lookup under others
        // (another scope, another proxy) would miss its entries and let connects go
        // direct. So joining it takes the same ones.
        let writer = MapWriter::claim(layout.root()).map_err(|source| DatapathError::Io {
            what: format!(
                "lock {} for writing the Backend map",
                layout.root().display()
            ),
            source,
        })?;
        let mut config: Array<MapData, ProxyConfig> = take_map(&mut ebpf, map_names::CONFIG)?;
        if let MapWriter::Waiting(_) = writer {
            let running = config.get(&0, 0).map_err(|source| DatapathError::Map {
                name: map_names::CONFIG,
                source,
            })?;
            if running != *proxy {
                return Err(DatapathError::OtherSettings {
                    pins: layout.root().to_path_buf(),
                    running: maps::describe_config(&running),
                    ours: maps::describe_config(proxy),
                });
            }
        }
        maps::write_config(&mut config, proxy).map_err(|source| DatapathError::Map {
            name: map_names::CONFIG,
            source,
        })?;
        let mut dns_config: Array<MapData, DnsConfig> = take_map(&mut ebpf, map_names::DNS_CONFIG)?;
        dns::write_config(&mut dns_config, dns).map_err(|source| DatapathError::Map {
            name: map_names::DNS_CONFIG,
            source,
        })?;

        let cgroup_dir = fs::File::open(cgroup).map_err(|source| DatapathError::Io {
            what: format!("open cgroup {}", cgroup.display()),
            source,
        })?;
        ensure_same_cgroup(layout, &cgroup_dir, cgroup)?;
        let mut attachments = Vec::with_capacity(PROGRAMS.len());
        for name in PROGRAMS {
            let link_path = layout.link(name);
            let attachment = if link_path.exists() {
                // Opening it proves it is a live link; keeping the pin keeps it attached.
                PinnedLink::from_pin(&link_path).map_err(|source| DatapathError::Link {
                    path: link_path.clone(),
                    source: source.into(),
                })?;
                // The link stays; its program becomes ours, atomically: an upgrade runs
                // the new code from the next connect on, with no gap.
                let program = load(&mut ebpf, name)?;
                link_update::replace_program(&link_path, program).map_err(|source| {
                    DatapathError::Link {
                        path: link_path.clone(),
                        source: format!("replacing its program: {source}").into(),
                    }
                })?;
                Attachment::Adopted
            } else {
                let link = attach(&mut ebpf, name, &cgroup_dir)?;
                link.pin(&link_path).map_err(|source| DatapathError::Link {
                    path: link_path.clone(),
                    source: source.into(),
                })?;
                Attachment::Attached
            };
            attachments.push((name, attachment));
        }

        Ok(Datapath {
            backends: BackendMap::new(
                writer,
                take_map(&mut ebpf, map_names::BACKENDS)?,
                take_map(&mut ebpf, map_names::ENDPOINTS)?,
            ),
            scopes: ScopeMap::new(take_map(&mut ebpf, map_names::SCOPES)?),
            pending: PendingRecords::new(take_map(&mut ebpf, map_names::PENDING)?),
            agent_sockets: AgentSockets::new(take_map(&mut ebpf, map_names::AGENT_SOCKETS)?),
            dns: DnsMaps {
                heartbeat: Heartbeat::new(take_map(&mut ebpf, map_names::HEARTBEAT)?),
                pending: DnsPending::new(take_map(&mut ebpf, map_names::DNS_PENDING)?),
                virtual_hosts: VirtualHostPins::new(take_map(&mut ebpf, map_names::VIRTUAL_HOSTS)?),
            },
            egress: EgressMaps::new(
                take_map(&mut ebpf, map_names::EGRESS_CONFIG)?,
                take_map(&mut ebpf, map_names::ALLOWED_NETS)?,
                take_map(&mut ebpf, map_names::CGROUP_MODES)?,
                take_map(&mut ebpf, map_names::AGENT_CGROUPS)?,
                take_map(&mut ebpf, map_names::EGRESS_EVENTS)?,
                take_map(&mut ebpf, map_names::EGRESS_LOST)?,
            ),
            attachments,
        })
    }
}

/// Loads (verifies) the program `name` and returns its fd.
fn load<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<BorrowedFd<'a>, DatapathError> {
    let program = ebpf.program_mut(name).ok_or(DatapathError::Missing(name))?;
    let loaded = match program {
        Program::SockOps(program) => program.load(),
        Program::CgroupSkb(program) => program.load(),
        Program::CgroupSockAddr(program) => program.load(),
        _ => return Err(DatapathError::Missing(name)),
    };
    loaded.map_err(|source| DatapathError::Program {
        name,
        source: source.into(),
    })?;
    let fd = program.fd().map_err(|source| DatapathError::Program {
        name,
        source: source.into(),
    })?;
    Ok(fd.as_fd())
}

fn attach(ebpf: &mut Ebpf, name: &'static str, cgroup: &fs::File) -> Result<FdLink, DatapathError> {
    load(ebpf, name)?;
    let program = ebpf.program_mut(name).ok_or(DatapathError::Missing(name))?;
    let mut attached = || -> Result<FdLink, Box<dyn std::error::Error + Send + Sync>> {
        // bpf_link attachments take no flags (`Single` is "none") and always let other
        // programs, a CNI's say, run beside ours.
        let mode = CgroupAttachMode::Single;
        match program {
            Program::SockOps(program) => {
                let id = program.attach(cgroup, mode)?;
                Ok(FdLink::try_from(program.take_link(id)?)?)
            }
            Program::CgroupSkb(program) => {
                let id = program.attach(cgroup, CgroupSkbAttachType::Egress, mode)?;
                Ok(FdLink::try_from(program.take_link(id)?)?)
            }
            Program::CgroupSockAddr(program) => {
                let id = program.attach(cgroup, mode)?;
                Ok(FdLink::try_from(program.take_link(id)?)?)
            }
            _ => Err("unexpected program type".into()),
        }
    };
    attached().map_err(|source| DatapathError::Program { name, source })
}

fn take_map<M>(ebpf: &mut Ebpf, name: &'static str) -> Result<M, DatapathError>
where
    M: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf.take_map(name).ok_or(DatapathError::Missing(name))?;
    M::try_from(map).map_err(|source| DatapathError::Map { name, source })
}

/// A pinned map keeps the size it was created with; say so when the flags ask for
/// another size, since the only way to resize is `redirector uninstall`.
fn warn_on_resized_pins(ebpf: &Ebpf, sizes: MapSizes) {
    let wanted = [
        (map_names::BACKENDS, sizes.backend_addresses),
        (map_names::SOCKETS, sizes.connections),
        (map_names::PENDING, sizes.connections),
    ];
    for (name, want) in wanted {
        let actual = ebpf.map(name).and_then(|map| match map {
            aya::maps::Map::HashMap(data) | aya::maps::Map::LruHashMap(data) => {
                data.info().ok().map(|info| info.max_entries())
            }
            _ => None,
        });
        if let Some(actual) = actual.filter(|actual| *actual != want) {
            tracing::warn!(
                map = name,
                pinned = actual,
                requested = want,
                "pinned map keeps its size; run `redirector uninstall` to resize"
            );
        }
    }
}
