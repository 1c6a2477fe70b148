//! Opening many connections at once, naming what went wrong, and asking the kernel
//! whether a connection is still up without reading from it.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::stats::{Samples, Tally, ms};

/// Connects in flight at once while opening: a burst of 10,000 SYNs would overflow the
/// proxy's accept queue and turn into 1 s retransmissions, measuring the burst instead of
/// the proxy.
pub const PARALLEL_CONNECTS: usize = 256;
/// Longest wait for one connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Soft RLIMIT_NOFILE up to the hard limit: one descriptor per connection.
pub fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct we own.
    let ok = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) == 0 && {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit) == 0
        }
    };
    if !ok {
        eprintln!(
            "loadgen: cannot raise the open file limit: {}",
            io::Error::last_os_error()
        );
    }
}

/// Opens `n` connections to `target`, at most [`PARALLEL_CONNECTS`] in flight; returns
/// the ones that opened and `{wall_ms, ok, failed: {kind: count}, connect: dist}`.
pub async fn open_all(target: SocketAddr, n: usize) -> (Vec<TcpStream>, Value) {
    let gate = Arc::new(Semaphore::new(PARALLEL_CONNECTS));
    let started = Instant::now();
    let mut set = JoinSet::new();
    for _ in 0..n {
        let gate = gate.clone();
        set.spawn(async move {
            // The semaphore is never closed, so acquiring only waits.
            let _permit = gate.acquire_owned().await.ok();
            let t = Instant::now();
            (connect(target).await, t.elapsed())
        });
    }
    let mut streams = Vec::with_capacity(n);
    let (mut failed, mut times) = (Tally::default(), Samples::default());
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((Ok(stream), took)) => {
                times.push(took);
                streams.push(stream);
            }
            Ok((Err(kind), _)) => failed.add(kind),
            Err(_) => failed.add("task-failed"),
        }
    }
    let report = json!({
        "wall_ms": ms(started.elapsed()),
        "ok": streams.len(),
        "failed": failed.json(),
        "connect": times.summary(),
    });
    (streams, report)
}

/// One connect with [`CONNECT_TIMEOUT`], Nagle off (every exchange is one small write
/// awaiting an answer).
pub async fn connect(target: SocketAddr) -> Result<TcpStream, String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(e)) => Err(kind(&e)),
        Err(_) => Err("connect-timeout".into()),
    }
}

/// A short name for an I/O error, for counting.
pub fn kind(e: &io::Error) -> String {
    use io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => "refused".into(),
        K::ConnectionReset => "reset".into(),
        K::ConnectionAborted => "aborted".into(),
        K::BrokenPipe => "broken-pipe".into(),
        K::UnexpectedEof => "eof".into(),
        K::TimedOut => "timeout".into(),
        K::PermissionDenied => "denied".into(),
        K::AddrNotAvailable => "no-local-port".into(),
        K::InvalidData => "bad-reply".into(),
        _ => match e.raw_os_error() {
            Some(libc::EMFILE | libc::ENFILE) => "out-of-descriptors".into(),
            Some(code) => format!("errno-{code}"),
            None => format!("{:?}", e.kind()).to_lowercase(),
        },
    }
}

/// Whether the kernel still has the connection ESTABLISHED (TCP_INFO): a peer's FIN
/// moves it to CLOSE_WAIT, a reset to CLOSE. Tells a client that never reads whether the
/// proxy has closed it, without reading.
pub fn established(stream: &impl AsRawFd) -> bool {
    const TCP_ESTABLISHED: u8 = 1;
    // SAFETY: tcp_info is plain integers, for which all-zero bytes are a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = libc::socklen_t::try_from(size_of::<libc::tcp_info>()).unwrap_or(0);
    // SAFETY: getsockopt writes at most `len` bytes into `info`, which we own; the fd is
    // open for as long as `stream` is borrowed.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &raw mut len,
        )
    };
    rc == 0 && info.tcpi_state == TCP_ESTABLISHED
}
