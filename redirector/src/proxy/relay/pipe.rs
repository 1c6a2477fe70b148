//! One direction of a relay through splice(2): bytes go socket -> pipe -> socket inside
//! the kernel and never enter userspace. The sockets are plain TCP, or TCP whose TLS
//! records the kernel seals and opens (`ends.rs` says what each needs).
//!
//! A direction borrows a pipe from [`Pipes`] only while it moves a chunk and gives it
//! back empty, so held idle connections cost no descriptors beyond their sockets, and at
//! most `max` pipes (two descriptors each) ever exist and at most 64 wait idle: pipes
//! never take the descriptors that accepting connections needs. When none can be lent,
//! the chunk goes through a buffer instead.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    sync::{
        Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use tokio::io::Interest;

use super::{
    Activity,
    ends::{self, SpliceSink, SpliceSource, Spliced},
};

/// The most one splice into a pipe asks for: a default pipe's capacity.
const CHUNK: usize = DEFAULT_PIPE_SIZE;

/// A chunk shorter than this is taken for a whole message (a request, a response), and
/// the look after it is a read through a buffer of this size (at most `buffer_size`):
/// what arrived since is copied. Splicing goes on once a read fills the buffer or finds
/// nothing; a stream that trickles in pieces this small is copied throughout, which
/// costs no more than splicing them.
const PROBE: usize = 4 * 1024;

/// Empty pipes kept for the next chunk; more are closed when given back. A pipe is lent
/// only while a chunk moves, so few are in use at any instant.
const IDLE_MAX: usize = 64;

/// The size the kernel gives a new pipe (16 pages), unless its user holds more than
/// `pipe-user-pages-soft` in pipes (then 2 pages).
pub const DEFAULT_PIPE_SIZE: usize = 64 * 1024;

/// A pipe that splice(2) moves bytes through.
#[derive(Debug)]
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Its capacity in bytes (`F_GETPIPE_SZ`; 0 if that failed).
    size: usize,
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
        // SAFETY: F_GETPIPE_SZ takes no argument and only reads the descriptor's pipe.
        let size = unsafe { libc::fcntl(read.as_raw_fd(), libc::F_GETPIPE_SZ) };
        let size = usize::try_from(size).unwrap_or_else(|_| {
            let error = io::Error::last_os_error();
            tracing::debug!(%error, "F_GETPIPE_SZ failed: the pipe is taken for the smallest");
            0
        });
        Ok(Self { read, write, size })
    }

    /// Sets the pipe's capacity (for tests: pipes as a uid over its soft limit gets).
    #[cfg(test)]
    fn resize(&mut self, size: usize) -> io::Result<()> {
        // SAFETY: F_SETPIPE_SZ takes an int and changes only the descriptor's pipe.
        let set = unsafe {
            libc::fcntl(
                self.read.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                size as libc::c_int,
            )
        };
        self.size = usize::try_from(set).map_err(|_| io::Error::last_os_error())?;
        Ok(())
    }
}

/// The agent's pipes: empty ones wait here to be lent again.
#[derive(Debug)]
pub struct Pipes {
    idle: Mutex<Vec<Pipe>>,
    /// Pipes that exist, lent or idle.
    live: AtomicUsize,
    max: usize,
    /// Bytes splice(2) moved through the pipes (for tests: which path bytes took).
    #[cfg(test)]
    spliced: AtomicU64,
    /// Splices out of a socket that found nothing (for tests: system calls spent).
    #[cfg(test)]
    empty_splices: AtomicU64,
    /// The capacity new pipes are given (for tests).
    #[cfg(test)]
    resize: Option<usize>,
}

impl Pipes {
    pub fn new(max: usize) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            live: AtomicUsize::new(0),
            max,
            #[cfg(test)]
            spliced: AtomicU64::new(0),
            #[cfg(test)]
            empty_splices: AtomicU64::new(0),
            #[cfg(test)]
            resize: None,
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
                    #[cfg(test)]
                    Ok(mut pipe) if self.resize.is_some() => {
                        let size = self.resize.unwrap_or_default();
                        pipe.resize(size).expect("F_SETPIPE_SZ");
                        pipe
                    }
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

    /// A pool whose pipes hold `size` bytes (for tests).
    #[cfg(test)]
    pub fn of_size(max: usize, size: usize) -> Self {
        Self {
            resize: Some(size),
            ..Self::new(max)
        }
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

    /// Bytes splice(2) moved through the pipes so far (for tests).
    #[cfg(test)]
    pub fn spliced(&self) -> u64 {
        self.spliced.load(Ordering::Relaxed)
    }

    /// Splices out of a socket that found nothing so far (for tests).
    #[cfg(test)]
    pub fn empty_splices(&self) -> u64 {
        self.empty_splices.load(Ordering::Relaxed)
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

impl Lent<'_> {
    fn size(&self) -> usize {
        self.pipe.as_ref().map_or(0, |pipe| pipe.size)
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let Some(pipe) = self.pipe.take() else { return };
        // A pipe smaller than the default (made while the uid was over its soft limit)
        // is not kept: it would be lent again before the full ones beneath it.
        if self.holding == 0 && pipe.size >= DEFAULT_PIPE_SIZE {
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

/// Moves bytes from `from` to `to` until EOF, then finishes `to` (FIN). Counts what it
/// moves in `moved` and touches `activity` on every read; `buffer_size` bounds a chunk
/// that goes through a buffer, for want of a pipe or where splice(2) cannot pass.
pub async fn splice_until_eof(
    mut from: impl SpliceSource,
    mut to: impl SpliceSink,
    pipes: &Pipes,
    buffer_size: usize,
    moved: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    // Whether the last chunk out of `from` was a short message: then the socket was most
    // likely drained, and the next look at it is a read. A read that finds nothing
    // costs what a splice that finds nothing costs, but that splice needs an ioctl after
    // it to tell an empty socket from one stopped at the TCP urgent mark, where splice(2)
    // stops the same way (a read goes past the mark): 3 system calls per request or
    // response instead of 4. Longer chunks are followed by a splice, as a stream that
    // paused is likely to go on: a read there would copy what a splice moves.
    let probe = PROBE.min(buffer_size).max(1);
    let mut read_next = false;
    loop {
        from.socket().readable().await?;
        // A destination that takes nothing (a client that stopped reading) keeps the
        // bytes in the source socket, not in a pipe.
        to.socket().writable().await?;
        let moved_now = if read_next {
            let read = buffered_chunk(&mut from, &mut to, probe).await?;
            read_next = read.is_some_and(|read| read < probe);
            read
        } else {
            // Neither a pipe nor a buffer is held while waiting for data: readiness can
            // be stale, and a chunk that finds nothing gives them back and waits again.
            let lent = pipes
                .lend()
                .filter(|lent| lent.size() >= from.pipe_needed());
            match lent {
                Some(mut lent) => match spliced_chunk(&from, &mut to, &mut lent).await? {
                    Some(Spliced::Moved(moved_now)) => {
                        read_next = moved_now < probe && from.read_after_short_chunk();
                        Some(moved_now)
                    }
                    None => None,
                    // A plain read takes what splice(2) does not (the urgent byte in
                    // line, a TLS record that is not data) and what follows: splicing
                    // goes on from the next chunk.
                    Some(Spliced::ReadInstead) => {
                        drop(lent);
                        buffered_chunk(&mut from, &mut to, buffer_size).await?
                    }
                },
                None => buffered_chunk(&mut from, &mut to, buffer_size).await?,
            }
        };
        let Some(moved_now) = moved_now else { continue };
        if moved_now == 0 {
            return to.finish().await;
        }
        moved.fetch_add(moved_now as u64, Ordering::Relaxed);
        activity.touch();
    }
}

/// One chunk through `lent`: what `from` has, all of it written to `to`; `None` if
/// `from` had nothing after all.
async fn spliced_chunk(
    from: &impl SpliceSource,
    to: &mut impl SpliceSink,
    lent: &mut Lent<'_>,
) -> io::Result<Option<Spliced>> {
    let (pipe_read, pipe_write) = match &lent.pipe {
        Some(pipe) => (pipe.read.as_raw_fd(), pipe.write.as_raw_fd()),
        None => return Err(io::Error::other("the lent pipe was given back already")),
    };
    let socket = from.socket();
    // The pipe is empty here: a would-block can only be the socket's. Classified in
    // here: a would-block out of try_io clears the readiness, which a read instead needs.
    let filled = socket.try_io(Interest::READABLE, || {
        from.classify(splice(socket.as_raw_fd(), pipe_write, CHUNK))
    });
    let filled = match filled {
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
            #[cfg(test)]
            lent.pipes.empty_splices.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        Err(error) => return Err(error),
        Ok(Spliced::Moved(filled)) => filled,
        Ok(Spliced::ReadInstead) => return Ok(Some(Spliced::ReadInstead)),
    };
    lent.holding = filled;
    #[cfg(test)]
    lent.pipes
        .spliced
        .fetch_add(filled as u64, Ordering::Relaxed);
    while lent.holding > 0 {
        // The pipe holds bytes: a would-block can only be the socket's.
        let left = lent.holding;
        to.admit(left)?;
        let socket = to.socket();
        let written = socket
            .async_io(Interest::WRITABLE, || {
                splice(pipe_read, socket.as_raw_fd(), left)
            })
            .await?;
        to.wrote(written);
        lent.holding -= written;
    }
    Ok(Some(Spliced::Moved(filled)))
}

/// One chunk through a buffer: what `from` has (0 at EOF), all of it written to `to`;
/// `None` if `from` had nothing after all.
async fn buffered_chunk(
    from: &mut impl SpliceSource,
    to: &mut impl SpliceSink,
    size: usize,
) -> io::Result<Option<usize>> {
    let mut buf = vec![0u8; size.max(1)];
    let Some(read) = from.read_chunk(&mut buf).await? else {
        return Ok(None);
    };
    ends::write_all(to, &buf[..read]).await?;
    Ok(Some(read))
}
