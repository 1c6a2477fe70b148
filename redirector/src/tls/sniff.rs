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
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

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

/// What a Backend allows the client to open with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpeningRule {
    /// The proxy originates TLS: the client must send plaintext.
    Plaintext,
    /// Bytes pass unchanged; a ClientHello must carry this SNI.
    SniMustBe(String),
}

/// Why the opening was refused; carried inside the `io::Error` the guard returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OpeningRefused(pub String);

impl OpeningRule {
    fn judge(&self, opening: &Opening) -> Result<(), OpeningRefused> {
        match (self, opening) {
            (_, Opening::Plain) => Ok(()),
            (OpeningRule::Plaintext, Opening::ClientHello { .. }) => Err(OpeningRefused(
                "the client started TLS itself, but this Backend's spec.tls.mode originates \
                 TLS: send plaintext and let the proxy do TLS"
                    .into(),
            )),
            (OpeningRule::SniMustBe(wanted), Opening::ClientHello { sni }) => match sni {
                Some(sni) if sni.eq_ignore_ascii_case(wanted) => Ok(()),
                Some(sni) => Err(OpeningRefused(format!(
                    "ClientHello SNI {sni:?} is not the Backend hostname {wanted:?}"
                ))),
                None => Err(OpeningRefused(format!(
                    "ClientHello without SNI; the Backend hostname {wanted:?} is required"
                ))),
            },
        }
    }
}

/// Reads `prefix` as far as it goes: `Ok(None)` means more bytes are needed.
pub fn inspect(prefix: &[u8]) -> Result<Option<Opening>, OpeningRefused> {
    match prefix {
        [] => return Ok(None),
        [first, ..] if *first != TLS_HANDSHAKE_RECORD => return Ok(Some(Opening::Plain)),
        [_] => return Ok(None),
        [_, major, ..] if *major != TLS_MAJOR_VERSION => return Ok(Some(Opening::Plain)),
        _ => {}
    }
    if prefix.len() > MAX_CLIENT_HELLO {
        return Err(OpeningRefused(format!(
            "ClientHello larger than {MAX_CLIENT_HELLO} bytes"
        )));
    }
    let mut acceptor = Acceptor::default();
    let mut rest = prefix;
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) => return Err(OpeningRefused(format!("malformed TLS record: {error}"))),
        }
    }
    match acceptor.accept() {
        Ok(Some(accepted)) => Ok(Some(Opening::ClientHello {
            sni: accepted.client_hello().server_name().map(str::to_owned),
        })),
        Ok(None) => Ok(None),
        Err((error, _)) => Err(OpeningRefused(format!("malformed ClientHello: {error}"))),
    }
}

enum State {
    /// Collecting the opening bytes.
    Inspecting(Vec<u8>),
    /// Verdict given; handing the held bytes on.
    Releasing(Vec<u8>, usize),
    Passing,
}

/// The client stream, held back until its opening passed the rule.
pub struct FirstBytesGuard<S> {
    inner: S,
    rule: OpeningRule,
    state: State,
}

impl<S> FirstBytesGuard<S> {
    pub fn new(inner: S, rule: OpeningRule) -> Self {
        Self {
            inner,
            rule,
            state: State::Inspecting(Vec::new()),
        }
    }
}

impl<S: AsyncRead + Unpin> FirstBytesGuard<S> {
    /// Reads until the opening is judged; `Ok(())` once the held bytes may be released.
    fn poll_verdict(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let State::Inspecting(held) = &mut self.state else {
                return Poll::Ready(Ok(()));
            };
            let mut chunk = [0u8; 4096];
            let mut buf = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut self.inner).poll_read(cx, &mut buf))?;
            let eof = buf.filled().is_empty();
            held.extend_from_slice(buf.filled());
            let verdict = match inspect(held) {
                Ok(Some(opening)) => self.rule.judge(&opening),
                // The client stopped before the opening was complete: nothing to judge,
                // the bytes are passed on as they are.
                Ok(None) if eof => Ok(()),
                Ok(None) => continue,
                Err(refused) => Err(refused),
            };
            verdict.map_err(|refused| io::Error::new(io::ErrorKind::PermissionDenied, refused))?;
            let held = std::mem::take(held);
            self.state = State::Releasing(held, 0);
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

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstBytesGuard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The refusal inside an error returned by a guarded stream, if that is what it is.
pub fn refusal(error: &io::Error) -> Option<&OpeningRefused> {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<OpeningRefused>())
}

#[cfg(test)]
mod tests;
