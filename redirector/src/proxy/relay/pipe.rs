//! One direction of a relay between two plain TCP sockets through splice(2): bytes go
//! socket -> pipe -> socket inside the kernel and never enter userspace.
//!
//! A direction borrows a pipe from [`Pipes`] only while it moves a chunk and gives it
//! back empty, so held idle connections cost no descriptors beyond their sockets, and at
//! most `max` pipes (two descriptors each) ever exist and at most 64 wait idle: pipes
//! never take the descriptors that accepting connections needs. When none can be lent, the chunk goes through a
//! buffer instead.

use std::{
    io,
    net::Shutdown,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    sync::{
        Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use tokio::{io::Interest, net::TcpStream};

use super::Activity;

/// The most one splice into a pipe asks for: a default pipe's capacity (16 pages).
const CHUNK: usize = 64 * 1024;

/// Empty pipes kept for the next chunk; more are closed when given back. A pipe is lent
/// only while a chunk moves, so few are in use at any instant.
const IDLE_MAX: usize = 64;

/// A pipe that splice(2) moves bytes through.
#[derive(Debug)]
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Self> {
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

/// The agent's pipes: empty ones wait here to be lent again.
#[derive(Debug)]
pub struct Pipes {
    idle: Mutex<Vec<Pipe>>,
    /// Pipes that exist, lent or idle.
    live: AtomicUsize,
    max: usize,
}

impl Pipes {
    pub fn new(max: usize) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            live: AtomicUsize::new(0),
            max,
        }
    }

    /// An empty pipe: an idle one, else a new one while fewer than `max` exist. `None`
    /// at the limit or when the system gives no more descriptors.
    fn lend(&self) -> Option<Lent<'_>> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let pipe = match idle {
            Some(pipe) => pipe,
            None => {
                if self.live.fetch_add(1, Ordering::Relaxed) >= self.max {
                    self.live.fetch_sub(1, Ordering::Relaxed);
                    return None;
                }
                match Pipe::new() {
                    Ok(pipe) => pipe,
                    Err(error) => {
                        self.live.fetch_sub(1, Ordering::Relaxed);
                        tracing::debug!(%error, "no pipe for splice(2): copying through a buffer");
                        return None;
                    }
                }
            }
        };
        Some(Lent {
            pipe: Some(pipe),
            pipes: self,
            holding: 0,
        })
    }

    /// Pipes that exist now (for tests).
    #[cfg(test)]
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Pipes lent out now (for tests).
    #[cfg(test)]
    pub fn lent(&self) -> usize {
        self.live() - self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A pipe on loan: back to the pool when dropped empty, closed if dropped holding bytes
/// (its direction was cut short).
struct Lent<'a> {
    pipe: Option<Pipe>,
    pipes: &'a Pipes,
    /// Bytes in the pipe.
    holding: usize,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let Some(pipe) = self.pipe.take() else { return };
        if self.holding == 0 {
            let mut idle = self.pipes.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < IDLE_MAX {
                idle.push(pipe);
                return;
            }
        }
        drop(pipe);
        self.pipes.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Moves up to `len` bytes from `from` to `to` (one of them is a pipe).
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

/// `ioctl` request asking whether a socket's next byte is the TCP urgent mark. Not in the
/// libc crate for Linux; this is the asm-generic value (x86, arm, riscv, among others;
/// alpha, mips, sh, sparc and xtensa use another).
const SIOCATMARK: libc::Ioctl = 0x8905;

/// Whether the next byte `socket` would read is the TCP urgent mark.
fn at_urgent_mark(socket: &TcpStream) -> io::Result<bool> {
    let mut at_mark: libc::c_int = 0;
    // SAFETY: SIOCATMARK writes one int through the pointer, which points to `at_mark`
    // and is valid for the whole call.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCATMARK, &mut at_mark) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(at_mark != 0)
}

/// Moves bytes from `from` to `to` until EOF, then shuts `to` down for writing. Counts
/// what it moves in `moved` and touches `activity` on every read; `buffer_size` bounds a
/// chunk that goes through a buffer for want of a pipe. `from` should deliver urgent
/// data in line (`SO_OOBINLINE`, set at accept and dial in `connection.rs`), else a read
/// at the mark skips the urgent byte.
pub async fn splice_until_eof(
    from: &TcpStream,
    to: &TcpStream,
    pipes: &Pipes,
    buffer_size: usize,
    moved: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    loop {
        from.readable().await?;
        // A destination that takes nothing (a client that stopped reading) keeps the
        // bytes in the source socket, not in a pipe.
        to.writable().await?;
        // Neither a pipe nor a buffer is held while waiting for data: readiness can be
        // stale, and a chunk that finds nothing gives them back and waits again.
        let moved_now = match pipes.lend() {
            Some(mut lent) => match spliced_chunk(from, to, &mut lent).await? {
                Spliced::Chunk(moved_now) => moved_now,
                // A plain read takes the urgent byte (in line) and what follows, and
                // clears the mark: splicing goes on from the next chunk.
                Spliced::UrgentMark => {
                    drop(lent);
                    buffered_chunk(from, to, buffer_size).await?
                }
            },
            None => buffered_chunk(from, to, buffer_size).await?,
        };
        let Some(moved_now) = moved_now else { continue };
        if moved_now == 0 {
            return socket2::SockRef::from(to).shutdown(Shutdown::Write);
        }
        moved.fetch_add(moved_now as u64, Ordering::Relaxed);
        activity.touch();
    }
}

/// What [`spliced_chunk`] did.
enum Spliced {
    /// Moved a chunk, as [`buffered_chunk`] answers.
    Chunk(Option<usize>),
    /// Found `from` at the TCP urgent mark, which splice(2) does not pass.
    UrgentMark,
}

/// One chunk through `lent`: what `from` has (0 at EOF), all of it written to `to`;
/// `Chunk(None)` if `from` had nothing after all.
async fn spliced_chunk(
    from: &TcpStream,
    to: &TcpStream,
    lent: &mut Lent<'_>,
) -> io::Result<Spliced> {
    let (pipe_read, pipe_write) = match &lent.pipe {
        Some(pipe) => (pipe.read.as_raw_fd(), pipe.write.as_raw_fd()),
        None => return Err(io::Error::other("the lent pipe was given back already")),
    };
    // The pipe is empty here: a would-block can only be the socket's.
    let filled = from.try_io(Interest::READABLE, || {
        let filled = splice(from.as_raw_fd(), pipe_write, CHUNK);
        let nothing = match &filled {
            Ok(filled) => *filled == 0,
            Err(error) => error.kind() == io::ErrorKind::WouldBlock,
        };
        // splice(2) stops at TCP urgent data: at the mark it moves nothing (0, as at
        // EOF, once the peer closed too) while the socket stays readable. Asked in
        // here: a would-block out of try_io would clear the readiness that the read
        // passing the mark needs. Off the mark, nothing is nothing: wait again.
        if nothing && at_urgent_mark(from)? {
            return Ok(None);
        }
        filled.map(Some)
    });
    let filled = match filled {
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
            return Ok(Spliced::Chunk(None));
        }
        Err(error) => return Err(error),
        Ok(None) => return Ok(Spliced::UrgentMark),
        Ok(Some(filled)) => filled,
    };
    lent.holding = filled;
    while lent.holding > 0 {
        // The pipe holds bytes: a would-block can only be the socket's.
        let left = lent.holding;
        lent.holding -= to
            .async_io(Interest::WRITABLE, || {
                splice(pipe_read, to.as_raw_fd(), left)
            })
            .await?;
    }
    Ok(Spliced::Chunk(Some(filled)))
}

/// One chunk through a buffer: what `from` has (0 at EOF), all of it written to `to`;
/// `None` if `from` had nothing after all.
async fn buffered_chunk(
    from: &TcpStream,
    to: &TcpStream,
    size: usize,
) -> io::Result<Option<usize>> {
    // try_read and try_write do not count against tokio's cooperative budget (the
    // splice path's async_io does): without this a source that always has data and a
    // destination that always takes it would never let the thread run anything else.
    tokio::task::consume_budget().await;
    let mut buf = vec![0u8; size.max(1)];
    let read = match from.try_read(&mut buf) {
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(None),
        read => read?,
    };
    let mut written = 0;
    while written < read {
        match to.try_write(&buf[written..read]) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => to.writable().await?,
            n => written += n?,
        }
    }
    Ok(Some(read))
}
