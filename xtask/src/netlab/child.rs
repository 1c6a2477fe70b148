//! A supervised child process: killed on drop, with its output captured line by line.
//!
//! Readiness is signalled by output, never guessed with sleeps: a server prints
//! `listening ...`, the agent logs its ready line, and [`ChildGuard::wait_for_line`] blocks
//! until that line (or a timeout, or the child's exit) arrives.

use anyhow::{Context, Result, bail};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Which output stream of the child to watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn index(self) -> usize {
        match self {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        }
    }
}

/// How a child ended, with everything it printed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
}

/// Output collected by the reader threads, indexed by [`Stream::index`].
#[derive(Default)]
struct Captured {
    lines: [Vec<String>; 2],
    eof: [bool; 2],
}

#[derive(Default)]
struct Shared {
    captured: Mutex<Captured>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Captured> {
        // A reader thread cannot panic while holding the lock; recover anyway.
        self.captured.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A child process that is SIGKILLed and reaped on drop (so also when a test panics).
pub struct ChildGuard {
    label: String,
    child: Child,
    watch: Stream,
    shared: Arc<Shared>,
    /// Per stream: index of the first line not yet returned by `wait_for_line`.
    cursor: [usize; 2],
    status: Option<ExitStatus>,
}

impl ChildGuard {
    /// Spawns `cmd` with stdout and stderr captured; `wait_for_line` watches stdout.
    ///
    /// Every captured line is also forwarded to this process's stderr as `[label] line`
    /// (`[label:err]` for the child's stderr), so a failing test shows what its children said.
    pub fn spawn(label: &str, cmd: &mut Command) -> Result<ChildGuard> {
        ChildGuard::spawn_watching(label, cmd, Stream::Stdout)
    }

    /// Like [`ChildGuard::spawn`], but `wait_for_line` watches `watch` (e.g. the agent's
    /// logs on stderr).
    pub fn spawn_watching(label: &str, cmd: &mut Command, watch: Stream) -> Result<ChildGuard> {
        ChildGuard::spawn_copying(label, cmd, watch, None)
    }

    /// Like [`ChildGuard::spawn_watching`], also appending every line of the watched
    /// stream to `copy` as it arrives (where `command 2>> FILE` would have written it).
    pub fn spawn_copying(
        label: &str,
        cmd: &mut Command,
        watch: Stream,
        copy: Option<File>,
    ) -> Result<ChildGuard> {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot spawn {label}: {cmd:?}"))?;
        let shared = Arc::new(Shared::default());
        let (mut out_copy, mut err_copy) = (None, None);
        match watch {
            Stream::Stdout => out_copy = copy,
            Stream::Stderr => err_copy = copy,
        }
        if let Some(out) = child.stdout.take() {
            let prefix = format!("[{label}]");
            pump(prefix, Stream::Stdout, out, shared.clone(), out_copy);
        }
        if let Some(err) = child.stderr.take() {
            let prefix = format!("[{label}:err]");
            pump(prefix, Stream::Stderr, err, shared.clone(), err_copy);
        }
        Ok(ChildGuard {
            label: label.to_owned(),
            child,
            watch,
            shared,
            cursor: [0; 2],
            status: None,
        })
    }

    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the next line of the watched stream containing `needle` and returns it.
    ///
    /// "Next": each call continues after the line the previous call returned, so calling
    /// it twice with `accepted` waits for two connections. Fails at once if the stream ends
    /// (the child exited) and after `timeout`, with the child's recent output in the error.
    pub fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        self.wait_for_line_on(self.watch, needle, timeout)
    }

    /// [`ChildGuard::wait_for_line`] on an explicitly chosen stream.
    pub fn wait_for_line_on(
        &mut self,
        stream: Stream,
        needle: &str,
        timeout: Duration,
    ) -> Result<String> {
        let i = stream.index();
        let deadline = Instant::now() + timeout;
        let shared = self.shared.clone();
        let mut captured = shared.lock();
        // Lines before `scanned` were already searched during this wait: each wake-up
        // looks only at new lines, so a chatty child cannot make the wait quadratic.
        let mut scanned = self.cursor[i].min(captured.lines[i].len());
        loop {
            if let Some(pos) = captured.lines[i][scanned..]
                .iter()
                .position(|l| l.contains(needle))
            {
                self.cursor[i] = scanned + pos + 1;
                return Ok(captured.lines[i][scanned + pos].clone());
            }
            scanned = captured.lines[i].len();
            let why = if captured.eof[i] {
                "its output ended"
            } else if Instant::now() >= deadline {
                "timed out"
            } else {
                let left = deadline.saturating_duration_since(Instant::now());
                captured = shared
                    .changed
                    .wait_timeout(captured, left)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
                continue;
            };
            bail!(
                "{}: no line containing {needle:?} on {stream:?} ({why} after {:?}); recent output:\n{}",
                self.label,
                timeout.saturating_sub(deadline.saturating_duration_since(Instant::now())),
                tail(&captured)
            );
        }
    }

    /// Everything the child printed on `stream` so far.
    pub fn lines(&self, stream: Stream) -> Vec<String> {
        self.shared.lock().lines[stream.index()].clone()
    }

    /// Sends signal `sig` (e.g. `libc::SIGTERM`) to the child.
    pub fn signal(&mut self, sig: i32) -> Result<()> {
        if self.status.is_some() {
            bail!(
                "{} already exited; not signalling a possibly reused pid",
                self.label
            );
        }
        let pid = libc::pid_t::try_from(self.child.id()).context("pid out of range")?;
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our unreaped
        // child, so it cannot have been reused.
        if unsafe { libc::kill(pid, sig) } != 0 {
            bail!("kill({pid}, {sig}): {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout` for the child to exit; `None` if it is still running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits up to `timeout` for the child to exit and its output to end; fails if it
    /// does not exit in time (the guard still kills it on drop).
    pub fn finish(&mut self, timeout: Duration) -> Result<Finished> {
        let deadline = Instant::now() + timeout;
        let Some(status) = self.wait_timeout(timeout)? else {
            bail!("{} did not exit within {timeout:?}", self.label);
        };
        let mut captured = self.shared.lock();
        // The pipes close right after exit unless a grandchild inherited them; then give
        // up at the deadline and return what arrived.
        while !(captured.eof[0] && captured.eof[1]) && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            captured = self
                .shared
                .changed
                .wait_timeout(captured, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        Ok(Finished {
            status,
            stdout: captured.lines[0].clone(),
            stderr: captured.lines[1].clone(),
        })
    }

    fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self
                .child
                .try_wait()
                .with_context(|| format!("cannot wait for {}", self.label))?;
        }
        Ok(self.status)
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.try_wait(), Ok(Some(_))) {
            return;
        }
        if let Err(e) = self.child.kill() {
            eprintln!("netlab: cannot kill {}: {e}", self.label);
        }
        if let Err(e) = self.child.wait() {
            eprintln!("netlab: cannot reap {}: {e}", self.label);
        }
    }
}

/// Reads `reader` line by line on a background thread into `shared`, echoing to stderr
/// and appending to `copy`.
fn pump(
    prefix: String,
    stream: Stream,
    reader: impl Read + Send + 'static,
    shared: Arc<Shared>,
    mut copy: Option<File>,
) {
    let i = stream.index();
    let spawned = std::thread::Builder::new()
        .name(format!("netlab-pump{prefix}"))
        .spawn({
            let (shared, prefix) = (shared.clone(), prefix.clone());
            move || {
                let mut reader = BufReader::new(reader);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match reader.read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    if let Some(file) = &mut copy
                        && let Err(e) = file.write_all(&buf)
                    {
                        eprintln!("netlab: cannot copy {prefix} output: {e}");
                        copy = None;
                    }
                    let line = String::from_utf8_lossy(&buf)
                        .trim_end_matches(['\n', '\r'])
                        .to_owned();
                    eprintln!("{prefix} {line}");
                    shared.lock().lines[i].push(line);
                    shared.changed.notify_all();
                }
                shared.lock().eof[i] = true;
                shared.changed.notify_all();
            }
        });
    if let Err(e) = spawned {
        // Without a reader the child would block on a full pipe; say so loudly, and mark
        // the stream ended so waiters fail instead of hanging.
        eprintln!("netlab: cannot start output reader {prefix}: {e}");
        shared.lock().eof[i] = true;
    }
}

/// The last lines of both streams, for error messages.
fn tail(captured: &Captured) -> String {
    let mut out = String::new();
    for (name, lines) in ["stdout", "stderr"].iter().zip(&captured.lines) {
        for line in lines.iter().rev().take(20).rev() {
            out.push_str(&format!("  {name}: {line}\n"));
        }
    }
    out
}
