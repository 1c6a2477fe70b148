//! redirector: transparent egress to declared external services (the agent as a
//! library; `main.rs` is the command line around it).
//!
//! Where things happen:
//! - `run.rs`            the agent wired together (load, resolve, listen, attach, serve)
//! - `backend/`          XBackend YAML -> validated `Backend`s
//! - `watch.rs`          Backend directories -> new catalogs on every change
//! - `kubernetes/`       the Kubernetes API -> new catalogs, and this node's pods
//! - `reconcile.rs`      catalogs + DNS -> the proxy's table and the datapath map, by diff
//! - `scopes.rs`         pod cgroups -> namespace scopes (Backends per namespace)
//! - `workload.rs`       cgroup ids -> workloads (pod, namespace, service account, cgroup)
//! - `egress.rs`         the egress policy (allow, audit, deny): written, and its events read
//! - `resolved_names.rs` the names each workload resolved, for refusal logs
//! - `resolver.rs`       hostnames -> addresses
//! - `table.rs`          which Backend owns which (address, port)
//! - `datapath/`         the eBPF side: load, attach, pin, adopt, sync maps
//! - `proxy/`            accept (`proxy.rs`), match (`connection.rs`), forward (`tcp.rs`, `http/`)
//! - `tls/`              TLS origination per Backend, ClientHello sniffing
//! - `nameserver/`       captured DNS: Backend names answered with virtual addresses
//! - `virtual_hosts.rs`  one virtual IPv4 and IPv6 address per Backend hostname
//! - `admin.rs`          /healthz, /readyz, /metrics

#[macro_use]
mod write_through;

mod admin;
mod backend;
mod backend_policy;
pub mod check;
pub mod cli;
pub mod crd;
mod datapath;
mod egress;
mod file_stamp;
pub mod fuzzing;
mod ids;
mod kubernetes;
mod nameserver;
mod proxy;
mod reconcile;
mod resolved_names;
mod resolver;
pub mod run;
mod scopes;
pub mod status;
mod table;
mod tls;
mod virtual_hosts;
mod watch;
mod workload;

/// The rustls crypto provider the agent uses, for benchmarks that measure it.
pub use tls::{CRYPTO_PROVIDER_NAME, crypto_provider};
