//! The agent's eBPF programs as the kernel reports them: which are attached to a cgroup.

use std::path::Path;

/// The programs the agent attaches (their names in the kernel).
pub const PROGRAMS: [&str; 10] = [
    "connect4",
    "connect6",
    "sock_ops",
    "getpeername4",
    "getpeername6",
    "sendmsg4",
    "sendmsg6",
    "recvmsg4",
    "recvmsg6",
    "dns_egress",
];
/// Names of the programs attached to `cgroup`, asked from the kernel: `BPF_PROG_QUERY`
/// on the cgroup for each attach type the agent uses, names from the loaded programs.
pub fn attached_programs(cgroup: &Path) -> Vec<String> {
    let dir = std::fs::File::open(cgroup).expect("cgroup directory");
    let mut ids = Vec::new();
    for attach_type in ATTACH_TYPES {
        ids.extend(query(&dir, attach_type));
    }
    let mut names: Vec<String> = aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|program| ids.contains(&program.id()))
        .filter_map(|program| program.name_as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// `enum bpf_attach_type` values of the agent's programs: INET_EGRESS, SOCK_OPS,
/// INET4/6_CONNECT, UDP4/6_SENDMSG, UDP4/6_RECVMSG, INET4/6_GETPEERNAME.
const ATTACH_TYPES: [u32; 10] = [1, 3, 10, 11, 14, 15, 19, 20, 29, 30];

/// `union bpf_attr` for `BPF_PROG_QUERY`.
#[repr(C)]
#[derive(Default)]
struct ProgQuery {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
}

/// Ids of the programs attached to the cgroup `dir` for `attach_type`.
fn query(dir: &std::fs::File, attach_type: u32) -> Vec<u32> {
    use std::os::fd::AsRawFd;
    const BPF_PROG_QUERY: libc::c_long = 16;
    let mut ids = [0u32; 64];
    let mut attr = ProgQuery {
        target_fd: u32::try_from(dir.as_raw_fd()).expect("fd"),
        attach_type,
        prog_ids: ids.as_mut_ptr() as u64,
        prog_cnt: ids.len() as u32,
        ..ProgQuery::default()
    };
    // SAFETY: `attr` is a BPF_PROG_QUERY attribute of the size passed; the kernel writes
    // at most `prog_cnt` ids into `ids`, which outlives the call, and the count back.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_QUERY,
            &raw mut attr,
            size_of::<ProgQuery>(),
        )
    };
    assert!(
        rc == 0,
        "BPF_PROG_QUERY: {}",
        std::io::Error::last_os_error()
    );
    ids[..attr.prog_cnt as usize].to_vec()
}
