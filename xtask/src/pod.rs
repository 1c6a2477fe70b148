//! The DaemonSet's pod under a real OCI runtime: podman with runc, the container set up
//! from the manifest's pod spec ([`spec::run_spec`]), on a node of the test bed.
//!
//! Used by the container test (`xtask/tests/container.rs`) and `cargo xtask demo
//! --container`.

pub mod agent;
mod container;
mod podman;
pub mod spec;

pub use agent::{AgentPod, CgroupParent, test_bed_node, uninstall};
pub use container::RunningContainer;
pub use podman::Podman;
pub use spec::{Node, RunSpec, run_spec};
