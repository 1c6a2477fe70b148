//! The client's opening: its first bytes, read before anything is dialed where they
//! must be judged first, and the rule the Backends of the dialed address set for them
//! (its own TLS, and with which SNI; plaintext; see [`crate::tls::sniff`]). Both the bytes
//! path ([`super::tcp`]) and the HTTP path ([`super::http`]) judge a client by it.

use std::{net::SocketAddr, time::Duration};

use tokio::net::TcpStream;

use super::{
    Refusal,
    connection::{Refused, Routed},
};
use crate::{
    table::{Candidates, join},
    tls::sniff::{self, Opening, OpeningRefused, OpeningRule, RefusedKind},
};

/// How long a client may take to send its first bytes where they are read before
/// anything is dialed.
const OPENING_TIMEOUT: Duration = Duration::from_secs(30);

/// The client's opening, read before anything is dialed, with the bytes read (to be
/// replayed). `None` if the client failed or sent nothing in time (logged at debug).
pub(super) async fn first_bytes(
    routed: &Routed,
    client: &mut TcpStream,
) -> Option<(Result<Option<Opening>, OpeningRefused>, Vec<u8>)> {
    match tokio::time::timeout(OPENING_TIMEOUT, sniff::read_opening(client)).await {
        Ok(Ok(read)) => Some(read),
        Ok(Err(error)) => {
            tracing::debug!(peer = %routed.peer, %error, "client failed before its first bytes");
            None
        }
        Err(_) => {
            tracing::debug!(peer = %routed.peer, "client sent nothing within {OPENING_TIMEOUT:?}");
            None
        }
    }
}

/// The refusal of an opening, as the proxy counts it.
pub(super) fn opening_refusal(refused: OpeningRefused) -> Refused {
    let reason = match refused.kind {
        RefusedKind::ClientOpening => Refusal::ClientOpening,
        RefusedKind::Ambiguous => Refusal::Ambiguous,
    };
    Refused::new(reason, refused.message)
}

/// What the Backends of the dialed address allow the client to open with.
pub(super) fn opening_rule(candidates: &Candidates, original: SocketAddr) -> OpeningRule {
    let names = (candidates.iter())
        .map(|e| (e.backend.hostname.clone(), e.originates_tls()))
        .collect();
    let plaintext = match &**candidates {
        [_] => Ok(()),
        several if several.iter().all(|e| !e.originates_tls()) => Ok(()),
        several => Err(OpeningRefused::new(
            RefusedKind::Ambiguous,
            format!(
                "plaintext to {original}, which Backends {} share while they differ in TLS: \
                 nothing in the bytes names one of them (only an HTTP Host or a TLS SNI does)",
                join(several)
            ),
        )),
    };
    OpeningRule { names, plaintext }
}

/// The Backend whose hostname is `sni`, for counting (the rule has matched it).
pub(super) fn named(candidates: &Candidates, sni: &str, fallback: &str) -> String {
    (candidates.iter())
        .find(|e| e.backend.hostname.eq_ignore_ascii_case(sni))
        .map_or_else(|| fallback.to_owned(), |e| e.backend.key.to_string())
}
