//! The wire: no plaintext of a TLS Backend's connection is seen between the node and
//! the server.

use super::TlsBed;
use crate::support::{
    ECHO_BACKEND,
    capture::{self, Capture},
    tls::{API_HOST, API_PORT, API_TARGET, ApiBackend, Ca},
};

#[test]
fn no_plaintext_reaches_the_wire_for_a_tls_backend() {
    const SECRET: &str = "GET /secret-plaintext HTTP/1.1";
    let ca = Ca::new("test CA");
    // demo/echo (plain, :8080) shows that the capture does see plaintext where there is.
    let yaml = format!("{ECHO_BACKEND}---\n{}", ApiBackend::server_only(&ca).yaml());
    let mut t = TlsBed::with_yaml(&yaml, &ca.server(&[API_HOST]), None);
    let wire = Capture::start(&t.bed.topo.ext, &t.bed.topo.ext_link.remote);

    let reply = t.bed.connect_sending(API_TARGET, SECRET, &["-4"]);
    assert!(
        reply.reply().ends_with(&format!("got={SECRET}")),
        "{:?}",
        reply.json
    );
    t.server.wait_closed();
    let plain = t
        .bed
        .connect_sending("echo.redirector.test:8080", SECRET, &["-4"]);
    assert!(
        plain.reply().ends_with(&format!("got={SECRET}")),
        "{:?}",
        plain.json
    );
    // Last: everything before the fence is in the capture once it is.
    let segments = capture::segments(&wire.stop_after(capture::send_fence(&t.bed.topo.node)));

    let to_server = capture::stream(&segments, API_PORT, true);
    let from_server = capture::stream(&segments, API_PORT, false);
    assert!(
        to_server.starts_with(&[0x16, 0x03]),
        "the first bytes towards the server must be a TLS handshake record: {:02x?}",
        &to_server[..to_server.len().min(16)]
    );
    assert!(
        capture::contains(&to_server, &[0x17, 0x03, 0x03]),
        "the request must travel as TLS application data"
    );
    for (direction, bytes) in [("to", &to_server), ("from", &from_server)] {
        for needle in [SECRET.as_bytes(), b"secret-plaintext", b"got="] {
            assert!(
                !capture::contains(bytes, needle),
                "plaintext {:?} on the wire {direction} {API_HOST}:{API_PORT}",
                String::from_utf8_lossy(needle)
            );
        }
    }
    let to_echo = capture::stream(&segments, 8080, true);
    assert!(
        capture::contains(&to_echo, SECRET.as_bytes()),
        "the capture must see the plain Backend's plaintext (else it proves nothing)"
    );
}
