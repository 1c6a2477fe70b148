//! The client's first bytes: plaintext, or a TLS ClientHello (and its SNI)?
//!
//! [`FirstBytesGuard`] wraps the client stream. It holds back what the client sends until
//! it can tell, without ever letting a byte through before the verdict; a ClientHello
//! split over several TCP segments is simply waited for. The other direction (upstream
//! to client) is untouched, so protocols where the server speaks first still work.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll, ready},
};

use rustls::server::Acceptor;
use tokio::io::{AsyncRead, ReadBuf};

/// A ClientHello larger than this is refused (real ones are a few KiB at most).
const MAX_CLIENT_HELLO: usize = 64 * 1024;
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
const TLS_MAJOR_VERSION: u8 = 0x03;

/// What the opening bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opening {
    Plain,
    ClientHello { sni: Option<String> },
}

/// What the Backends of the dialed address and port allow the client to open with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpeningRule {
    /// The hostnames declared there, each with whether the proxy originates TLS for it.
    pub names: Vec<(String, bool)>,
    /// What a plaintext opening gets: allowed, or refused with this reason.
    pub plaintext: Result<(), OpeningRefused>,
}

/// How an opening that passed the rule goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Plaintext, or a ClientHello naming a declared name whose Backend passes bytes.
    Declared { sni: Option<String> },
    /// A ClientHello for a name no Backend here declares (or none): it is not ours, and
    /// goes to the address the client dialed, unchanged.
    Passthrough { sni: Option<String> },
}

/// Why an opening was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedKind {
    /// The client's own TLS towards a TLS-originating Backend, or a malformed opening.
    ClientOpening,
    /// Plaintext on an address shared by Backends that differ in TLS: no name to tell
    /// which one the client means.
    Ambiguous,
}

/// Why the opening was refused; carried inside the `io::Error` the guard returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct OpeningRefused {
    pub kind: RefusedKind,
    pub message: String,
}

impl OpeningRefused {
    pub fn new(kind: RefusedKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    fn malformed(message: String) -> Self {
        Self::new(RefusedKind::ClientOpening, message)
    }
}

impl OpeningRule {
    pub fn judge(&self, opening: &Opening) -> Result<Verdict, OpeningRefused> {
        let sni = match opening {
            Opening::Plain => {
                return (self.plaintext.clone()).map(|()| Verdict::Declared { sni: None });
            }
            Opening::ClientHello { sni } => sni.clone(),
        };
        let declared = (sni.as_deref())
            .and_then(|sni| self.names.iter().find(|(n, _)| n.eq_ignore_ascii_case(sni)));
        match declared {
            Some((name, true)) => Err(OpeningRefused::new(
                RefusedKind::ClientOpening,
                format!(
                    "the client started TLS itself for {name}, but that Backend's \
                     spec.tls.mode originates TLS: send plaintext and let the proxy do TLS"
                ),
            )),
            Some(_) => Ok(Verdict::Declared { sni }),
            None => Ok(Verdict::Passthrough { sni }),
        }
    }
}

/// Why a guarded stream stopped before releasing a passthrough opening: the upstream
/// was set up for a Backend (TLS originated) and the client's name is not that
/// Backend's. The caller connects to the dialed address afresh; the guard then
/// replays the held bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the client's TLS names no Backend here: reconnecting to the address it dialed")]
pub struct Reroute;

/// Reads `prefix` as far as it goes: `Ok(None)` means more bytes are needed.
pub fn inspect(prefix: &[u8]) -> Result<Option<Opening>, OpeningRefused> {
    OpeningReader::default().read(prefix)
}

/// Judges an opening as its bytes arrive. Each byte is given to rustls once, however
/// finely the client splits its ClientHello: parsing everything held again at every read
/// would cost a client trickling 64 KiB a byte at a time some 2 GiB of copying.
#[derive(Default)]
pub struct OpeningReader {
    /// Made once the bytes look like TLS (boxed: 1.2 KiB that plaintext openings, the
    /// common case, never need).
    acceptor: Option<Box<Acceptor>>,
    /// How much of the held bytes the acceptor has taken in.
    fed: usize,
}

impl OpeningReader {
    /// `held`: every byte read so far, those of earlier calls first.
    pub fn read(&mut self, held: &[u8]) -> Result<Option<Opening>, OpeningRefused> {
        match held {
            [] => return Ok(None),
            [first, ..] if *first != TLS_HANDSHAKE_RECORD => return Ok(Some(Opening::Plain)),
            [_] => return Ok(None),
            [_, major, ..] if *major != TLS_MAJOR_VERSION => return Ok(Some(Opening::Plain)),
            _ => {}
        }
        if held.len() > MAX_CLIENT_HELLO {
            return Err(OpeningRefused::malformed(format!(
                "ClientHello larger than {MAX_CLIENT_HELLO} bytes"
            )));
        }
        let acceptor = self.acceptor.get_or_insert_default();
        let mut rest = held.get(self.fed..).unwrap_or_default();
        while !rest.is_empty() {
            match acceptor.read_tls(&mut rest) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) => {
                    return Err(OpeningRefused::malformed(format!(
                        "malformed TLS record: {error}"
                    )));
                }
            }
        }
        self.fed = held.len() - rest.len();
        match acceptor.accept() {
            Ok(Some(accepted)) => Ok(Some(Opening::ClientHello {
                sni: accepted.client_hello().server_name().map(str::to_owned),
            })),
            Ok(None) => Ok(None),
            Err((error, _)) => Err(OpeningRefused::malformed(format!(
                "malformed ClientHello: {error}"
            ))),
        }
    }
}

enum State {
    /// Collecting the opening bytes.
    Inspecting(Vec<u8>, OpeningReader),
    /// Verdict given; handing the held bytes on.
    Releasing(Vec<u8>, usize),
    Passing,
}

/// The client stream, held back until its opening passed the rule.
pub struct FirstBytesGuard<S> {
    inner: S,
    rule: OpeningRule,
    state: State,
    verdict: Option<Verdict>,
    /// Stop with [`Reroute`] on a passthrough opening instead of releasing it.
    reroute_passthrough: bool,
}

impl<S> FirstBytesGuard<S> {
    /// `reroute_passthrough`: the upstream is not the dialed address as it is (TLS is
    /// originated on it), so a passthrough opening must not be released into it.
    pub fn new(inner: S, rule: OpeningRule, reroute_passthrough: bool) -> Self {
        Self {
            inner,
            rule,
            state: State::Inspecting(Vec::new(), OpeningReader::default()),
            verdict: None,
            reroute_passthrough,
        }
    }

    /// A stream whose opening was judged already: replays `held`, then reads `inner`.
    pub fn released(inner: S, held: Vec<u8>) -> Self {
        Self {
            inner,
            rule: OpeningRule {
                names: Vec::new(),
                plaintext: Ok(()),
            },
            // Nothing held: passing at once (an empty release would read as EOF).
            state: if held.is_empty() {
                State::Passing
            } else {
                State::Releasing(held, 0)
            },
            verdict: None,
            reroute_passthrough: false,
        }
    }

    /// The verdict, once the opening was judged (`None` if the client sent too little
    /// to judge, or the stream was made [`released`](Self::released)).
    pub fn verdict(&self) -> Option<&Verdict> {
        self.verdict.as_ref()
    }

    /// Whether the opening was judged and handed on in full: from here on, reads are the
    /// inner stream's own.
    pub fn is_passing(&self) -> bool {
        matches!(self.state, State::Passing)
    }

    /// The inner stream; read from it directly only once [`is_passing`](Self::is_passing).
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> FirstBytesGuard<S> {
    /// Reads until the opening is judged; `Ok(())` once the held bytes may be released.
    fn poll_verdict(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let State::Inspecting(held, reader) = &mut self.state else {
                return Poll::Ready(Ok(()));
            };
            let mut chunk = [0u8; 4096];
            let mut buf = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut self.inner).poll_read(cx, &mut buf))?;
            let eof = buf.filled().is_empty();
            held.extend_from_slice(buf.filled());
            let verdict = match reader.read(held) {
                Ok(Some(opening)) => self.rule.judge(&opening).map(Some),
                // The client stopped before the opening was complete: nothing to judge,
                // the bytes are passed on as they are.
                Ok(None) if eof => Ok(None),
                Ok(None) => continue,
                Err(refused) => Err(refused),
            };
            let verdict = verdict
                .map_err(|refused| io::Error::new(io::ErrorKind::PermissionDenied, refused))?;
            let held = std::mem::take(held);
            self.state = State::Releasing(held, 0);
            let reroute =
                self.reroute_passthrough && matches!(verdict, Some(Verdict::Passthrough { .. }));
            self.verdict = verdict;
            if reroute {
                // Once: the caller reconnects and reads on, getting the held bytes.
                self.reroute_passthrough = false;
                return Poll::Ready(Err(io::Error::other(Reroute)));
            }
        }
    }
}

/// Reads the client's opening without consuming it: what it is (`None`: the client
/// closed before it could be told) and the bytes read, to be replayed with
/// [`FirstBytesGuard::released`].
pub async fn read_opening<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> io::Result<(Result<Option<Opening>, OpeningRefused>, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut held = Vec::with_capacity(1024);
    let mut reader = OpeningReader::default();
    loop {
        held.reserve(4096);
        if stream.read_buf(&mut held).await? == 0 {
            return Ok((Ok(None), held));
        }
        match reader.read(&held) {
            Ok(None) => continue,
            judged => return Ok((judged, held)),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstBytesGuard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_verdict(cx))?;
        match &mut this.state {
            State::Releasing(held, at) => {
                let n = buf.remaining().min(held.len() - *at);
                buf.put_slice(&held[*at..*at + n]);
                *at += n;
                if *at == held.len() {
                    this.state = State::Passing;
                }
                Poll::Ready(Ok(()))
            }
            _ => Pin::new(&mut this.inner).poll_read(cx, buf),
        }
    }
}

write_through!(FirstBytesGuard);

/// The refusal inside an error returned by a guarded stream, if that is what it is.
pub fn refusal(error: &io::Error) -> Option<&OpeningRefused> {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<OpeningRefused>())
}

/// Whether a guarded stream stopped for a [`Reroute`].
pub fn is_reroute(error: &io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.downcast_ref::<Reroute>().is_some())
}

#[cfg(test)]
mod tests;
