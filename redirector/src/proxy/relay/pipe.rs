//! One direction of a relay between two plain TCP sockets through splice(2): bytes go
//! socket -> pipe -> socket inside the kernel and never enter userspace.
//!
//! The pipe is made on the direction's first readable data, so held idle connections
//! cost no descriptors beyond their sockets. Where no pipe can be made (the descriptor
//! limit), the caller copies through a buffer instead.

use std::{
    io,
    net::Shutdown,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    sync::atomic::{AtomicU64, Ordering},
};

use tokio::{io::Interest, net::TcpStream};

use super::Activity;

/// The most one splice into the pipe asks for: a default pipe's capacity (16 pages).
const CHUNK: usize = 64 * 1024;

/// A pipe that splice(2) moves one direction's bytes through.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    pub fn new() -> io::Result<Self> {
        let mut fds: [RawFd; 2] = [-1; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(Self { read, write })
    }
}

/// Moves up to `len` bytes from `from` to `to` (one of them is the pipe).
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: plain descriptors and null offsets (both ends are a pipe or a socket, which
    // have no file position); the kernel reads and writes no userspace memory.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Moves bytes from `from` to `to` until EOF, then shuts `to` down for writing. Counts
/// what it moves in `moved` and touches `activity` on every read.
pub async fn splice_until_eof(
    from: &TcpStream,
    to: &TcpStream,
    pipe: Pipe,
    moved: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    loop {
        // The pipe is empty here: a would-block can only be the socket's.
        let filled = from
            .async_io(Interest::READABLE, || {
                splice(from.as_raw_fd(), pipe.write.as_raw_fd(), CHUNK)
            })
            .await?;
        if filled == 0 {
            return socket2::SockRef::from(to).shutdown(Shutdown::Write);
        }
        moved.fetch_add(filled as u64, Ordering::Relaxed);
        activity.touch();
        let mut left = filled;
        while left > 0 {
            // The pipe holds `left` bytes: a would-block can only be the socket's.
            left -= to
                .async_io(Interest::WRITABLE, || {
                    splice(pipe.read.as_raw_fd(), to.as_raw_fd(), left)
                })
                .await?;
        }
    }
}
