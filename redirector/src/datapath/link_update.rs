//! Atomic program replacement on a pinned cgroup link (`BPF_LINK_UPDATE`), which aya
//! 0.14 does not expose for cgroup links: the attachment stays, only the program it runs
//! changes, so no connect ever sees the cgroup without a program.

use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
        unix::ffi::OsStrExt,
    },
    path::Path,
};

const BPF_OBJ_GET: libc::c_long = 7;
const BPF_LINK_UPDATE: libc::c_long = 29;

/// `union bpf_attr` for `BPF_OBJ_GET`.
#[repr(C)]
#[derive(Default)]
struct ObjGet {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// `union bpf_attr` for `BPF_LINK_UPDATE`.
#[repr(C)]
#[derive(Default)]
struct LinkUpdate {
    link_fd: u32,
    new_prog_fd: u32,
    flags: u32,
    old_prog_fd: u32,
}

/// Makes the link pinned at `path` run `program` from now on.
pub fn replace_program(path: &Path, program: BorrowedFd<'_>) -> io::Result<()> {
    let link = open_pinned(path)?;
    let attr = LinkUpdate {
        link_fd: fd_u32(link.as_raw_fd())?,
        new_prog_fd: fd_u32(program.as_raw_fd())?,
        ..LinkUpdate::default()
    };
    // SAFETY: `attr` is a valid BPF_LINK_UPDATE attribute of the size passed; the kernel
    // only reads it. Both fds are open for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_LINK_UPDATE,
            &raw const attr,
            size_of::<LinkUpdate>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn open_pinned(path: &Path) -> io::Result<OwnedFd> {
    let name = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    let attr = ObjGet {
        pathname: name.as_ptr() as u64,
        ..ObjGet::default()
    };
    // SAFETY: `attr` is a valid BPF_OBJ_GET attribute of the size passed whose pathname
    // points at a NUL-terminated string that outlives the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            &raw const attr,
            size_of::<ObjGet>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("fd out of range"))?;
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fd_u32(fd: i32) -> io::Result<u32> {
    u32::try_from(fd).map_err(|_| io::Error::other("negative fd"))
}
