//! One agent at a time writes the Backend map. During an upgrade two agents run on a
//! node with the same pins; both serve connections, but only the holder of this lock
//! (an exclusive `flock` on the pin directory) syncs the map. The old agent lets go when
//! it stops reconciling, at SIGTERM or death, and the new one takes over by diff.

use std::{fs::File, io, os::fd::AsRawFd, path::Path};

/// An open handle on the pin directory, locked or not.
pub struct WriterLock {
    dir: File,
}

impl WriterLock {
    pub fn open(root: &Path) -> io::Result<Self> {
        let dir = File::open(root).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot open {}: {e}", root.display()))
        })?;
        Ok(Self { dir })
    }

    /// Takes the lock if free; `false` if another agent holds it.
    pub fn try_take(&self) -> io::Result<bool> {
        match self.flock(libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => Ok(true),
            Err(error) if error.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Waits (blocking the calling thread) until the lock is ours.
    pub fn take(self) -> io::Result<Self> {
        self.flock(libc::LOCK_EX)?;
        Ok(self)
    }

    fn flock(&self, operation: i32) -> io::Result<()> {
        loop {
            // SAFETY: flock on a file descriptor we own; no memory is passed.
            let rc = unsafe { libc::flock(self.dir.as_raw_fd(), operation) };
            if rc == 0 {
                return Ok(());
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// Whether this agent writes the Backend map now, or waits to take over.
pub enum MapWriter {
    Holding(
        #[expect(
            dead_code,
            reason = "held for its open fd: closing it releases the lock"
        )]
        WriterLock,
    ),
    /// Another agent holds the lock; resolves when it is ours.
    Waiting(tokio::sync::oneshot::Receiver<io::Result<WriterLock>>),
}

impl MapWriter {
    /// Takes the lock of the pins at `root`, or starts waiting for it.
    pub fn claim(root: &Path) -> io::Result<Self> {
        let lock = WriterLock::open(root)?;
        if lock.try_take()? {
            return Ok(MapWriter::Holding(lock));
        }
        tracing::info!(
            pins = %root.display(),
            "another agent on this node writes the Backend map (an upgrade?): serving \
             beside it, and taking over the map when it stops"
        );
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A thread blocked in flock: released by the kernel when the other agent closes
        // its lock, exits or dies.
        std::thread::spawn(move || tx.send(lock.take()));
        Ok(MapWriter::Waiting(rx))
    }
}
