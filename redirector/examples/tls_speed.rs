//! The crypto ceiling of the agent's TLS: what its rustls crypto provider does on one
//! core, with no network and no other work in the way.
//!
//! A rustls client and server, both built with [`redirector::crypto_provider`] (whatever
//! provider the agent uses, so a change of provider is measured here without touching
//! this file), talk through in-memory buffers on one thread: TLS 1.3 with
//! `TLS13_AES_128_GCM_SHA256` (looked up by name in the provider's suites), X25519, a
//! self-signed ECDSA P-256 server certificate made with rcgen at start.
//!
//! 1. Bulk: the client sends `--bytes` (default 1 GiB) in `--record`-byte writes (default
//!    16 KiB, one full TLS record each), 1 MiB at a time. The client's `writer().write` +
//!    `write_tls` into a buffer is timed as seal, the server's `read_tls` +
//!    `process_new_packets` + `reader().read` as open.
//! 2. Handshakes: full handshakes (no resumption) for `--handshake-secs` (default 2 s; 0
//!    skips them), the client's and the server's work timed apart: the client side is what
//!    a TLS-originating proxy pays per new upstream connection.
//!
//! Times are the thread's CPU time, not wall time, so other work on a shared machine
//! does not count (wall-clock deadlines bound the run).
//!
//! Prints one JSON line on stdout (provider, suite, bytes, seal and open MiB/s,
//! handshakes/s). `cargo xtask bench` builds it with
//! `cargo build --release -p redirector --example tls_speed` and reads that line.

use std::io::{ErrorKind, Read as _, Write as _};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::NoServerSessionStorage;
use rustls::{
    ClientConfig, ClientConnection, Connection, HandshakeKind, NamedGroup, RootCertStore,
    ServerConfig, ServerConnection,
};

const SERVER_NAME: &str = "tls-speed.redirector.test";
const MIB: f64 = 1024.0 * 1024.0;
/// Plaintext sealed before the server opens it: few clock reads, and wire bytes that fit
/// in the caches of most machines.
const BATCH: usize = 1024 * 1024;

/// What to measure (command-line options).
struct Options {
    bytes: u64,
    record: usize,
    handshake_secs: f64,
    suite: String,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tls_speed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let options = options()?;
    let (client, server) = configs(&options.suite)?;

    let (mut c, mut s) = connect(&client, &server)?;
    let (seal, open) = bulk(&mut c, &mut s, options.bytes, options.record)?;

    let handshakes = if options.handshake_secs > 0.0 {
        Some(handshakes(&client, &server, options.handshake_secs)?)
    } else {
        None
    };

    let bytes = options.bytes as f64;
    let mut line = serde_json::json!({
        "provider": redirector::CRYPTO_PROVIDER_NAME,
        "suite": options.suite,
        "kx": "X25519",
        "cert": "ECDSA P-256",
        "clock": "thread CPU time",
        "record_bytes": options.record,
        "bytes": options.bytes,
        "seal_s": seal.as_secs_f64(),
        "open_s": open.as_secs_f64(),
        "seal_mib_s": bytes / MIB / seal.as_secs_f64(),
        "open_mib_s": bytes / MIB / open.as_secs_f64(),
    });
    if let (Some(h), Some(map)) = (handshakes, line.as_object_mut()) {
        let n = h.count as f64;
        map.insert("handshakes".into(), h.count.into());
        map.insert(
            "handshakes_per_s".into(),
            (n / (h.client + h.server).as_secs_f64()).into(),
        );
        map.insert(
            "client_handshakes_per_s".into(),
            (n / h.client.as_secs_f64()).into(),
        );
        map.insert(
            "server_handshakes_per_s".into(),
            (n / h.server.as_secs_f64()).into(),
        );
    }
    println!("{line}");
    Ok(())
}

/// `--bytes N`, `--record N`, `--handshake-secs S`, `--suite NAME`.
fn options() -> Result<Options> {
    let mut options = Options {
        bytes: 1 << 30,
        record: 16 * 1024,
        handshake_secs: 2.0,
        suite: "TLS13_AES_128_GCM_SHA256".to_owned(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        let bad = || format!("{flag} {value}: not a valid value");
        match flag.as_str() {
            "--bytes" => options.bytes = value.parse().with_context(bad)?,
            "--record" => options.record = value.parse().with_context(bad)?,
            "--handshake-secs" => options.handshake_secs = value.parse().with_context(bad)?,
            "--suite" => options.suite = value,
            _ => {
                bail!("unknown option {flag} (known: --bytes, --record, --handshake-secs, --suite)")
            }
        }
    }
    if options.record == 0 || options.record > 16 * 1024 {
        bail!("--record must be 1..=16384 (one TLS record per write)");
    }
    Ok(options)
}

/// The agent's provider cut down to one suite (by name) and X25519, and client and server
/// configurations with resumption off (every handshake is a full one).
fn configs(suite_name: &str) -> Result<(Arc<ClientConfig>, Arc<ServerConfig>)> {
    let base = redirector::crypto_provider();
    let suite = base
        .cipher_suites
        .iter()
        .find(|s| format!("{:?}", s.suite()) == suite_name)
        .copied()
        .with_context(|| {
            format!(
                "the {} provider has no cipher suite {suite_name}",
                redirector::CRYPTO_PROVIDER_NAME
            )
        })?;
    let x25519 = base
        .kx_groups
        .iter()
        .find(|g| g.name() == NamedGroup::X25519)
        .copied()
        .context("the provider has no X25519")?;
    let provider = Arc::new(CryptoProvider {
        cipher_suites: vec![suite],
        kx_groups: vec![x25519],
        ..(*base).clone()
    });

    // rcgen's default key is ECDSA P-256.
    let certified = rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_owned()])?;
    let cert = CertificateDer::from(certified.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));

    let mut roots = RootCertStore::empty();
    roots.add(cert.clone())?;
    let mut client = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.resumption = Resumption::disabled();

    let mut server = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)?;
    server.session_storage = Arc::new(NoServerSessionStorage {});
    server.send_tls13_tickets = 0;
    Ok((Arc::new(client), Arc::new(server)))
}

/// A new client and server connection, handshaken.
fn connect(
    client: &Arc<ClientConfig>,
    server: &Arc<ServerConfig>,
) -> Result<(Connection, Connection)> {
    let name = ServerName::try_from(SERVER_NAME)?;
    let mut c = Connection::Client(ClientConnection::new(client.clone(), name)?);
    let mut s = Connection::Server(ServerConnection::new(server.clone())?);
    let mut wire = Vec::new();
    let mut spent = [Duration::ZERO; 2];
    handshake(&mut c, &mut s, &mut wire, &mut spent)?;
    Ok((c, s))
}

/// Shuttles handshake bytes between `c` and `s` until both are done, adding each side's
/// time to `spent` ([client, server]).
fn handshake(
    c: &mut Connection,
    s: &mut Connection,
    wire: &mut Vec<u8>,
    spent: &mut [Duration; 2],
) -> Result<()> {
    let mut rounds = 0;
    while c.is_handshaking() || s.is_handshaking() {
        rounds += 1;
        if rounds > 20 {
            bail!("the handshake did not finish in 20 rounds");
        }
        // Client: flush what it has (its first flight, or its Finished).
        let start = cpu_time()?;
        wire.clear();
        while c.wants_write() {
            c.write_tls(wire)?;
        }
        spent[0] += cpu_time()? - start;
        // Server: take it in, answer.
        let start = cpu_time()?;
        feed(s, wire)?;
        wire.clear();
        while s.wants_write() {
            s.write_tls(wire)?;
        }
        spent[1] += cpu_time()? - start;
        // Client: take the answer in.
        let start = cpu_time()?;
        feed(c, wire)?;
        spent[0] += cpu_time()? - start;
    }
    Ok(())
}

/// Hands `bytes` to `conn` and processes them.
fn feed(conn: &mut Connection, bytes: &[u8]) -> Result<()> {
    let mut rest = bytes;
    while !rest.is_empty() {
        conn.read_tls(&mut rest)?;
        conn.process_new_packets()?;
    }
    Ok(())
}

/// Sends `total` bytes from `c` to `s` in `record`-byte writes, [`BATCH`] bytes at a
/// time; returns the time spent sealing (client) and opening (server).
fn bulk(
    c: &mut Connection,
    s: &mut Connection,
    total: u64,
    record: usize,
) -> Result<(Duration, Duration)> {
    let chunk = vec![0x5a_u8; record];
    let per_batch = (BATCH / record).max(1) as u64;
    let mut wire = Vec::with_capacity(BATCH + BATCH / 8);
    let mut plain = vec![0_u8; 64 * 1024];
    let (mut seal, mut open) = (Duration::ZERO, Duration::ZERO);
    let (mut sent, mut received) = (0_u64, 0_u64);
    while sent < total {
        let start = cpu_time()?;
        wire.clear();
        for _ in 0..per_batch.min((total - sent).div_ceil(record as u64)) {
            c.writer().write_all(&chunk)?;
            while c.wants_write() {
                c.write_tls(&mut wire)?;
            }
            sent += record as u64;
        }
        seal += cpu_time()? - start;

        let start = cpu_time()?;
        let mut rest = &wire[..];
        while !rest.is_empty() {
            s.read_tls(&mut rest)?;
            s.process_new_packets()?;
            loop {
                match s.reader().read(&mut plain) {
                    Ok(0) => bail!("the server saw the end of the stream"),
                    Ok(n) => received += n as u64,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        open += cpu_time()? - start;
    }
    if received != sent {
        bail!("sent {sent} bytes, the server read {received}");
    }
    Ok((seal, open))
}

/// This thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`): what the work cost, whatever else
/// the machine's CPUs are doing meanwhile.
fn cpu_time() -> Result<Duration> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one timespec through a valid pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return Err(std::io::Error::last_os_error()).context("clock_gettime");
    }
    Ok(Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    ))
}

/// Full handshakes done and each side's time.
struct Handshakes {
    count: u64,
    client: Duration,
    server: Duration,
}

/// Full handshakes, one after the other, for about `secs` seconds.
fn handshakes(
    client: &Arc<ClientConfig>,
    server: &Arc<ServerConfig>,
    secs: f64,
) -> Result<Handshakes> {
    let name = ServerName::try_from(SERVER_NAME)?;
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut wire = Vec::new();
    let mut spent = [Duration::ZERO; 2];
    let mut count = 0;
    while count == 0 || Instant::now() < deadline {
        let start = cpu_time()?;
        let mut c = Connection::Client(ClientConnection::new(client.clone(), name.clone())?);
        spent[0] += cpu_time()? - start;
        let start = cpu_time()?;
        let mut s = Connection::Server(ServerConnection::new(server.clone())?);
        spent[1] += cpu_time()? - start;
        handshake(&mut c, &mut s, &mut wire, &mut spent)?;
        if c.handshake_kind() != Some(HandshakeKind::Full) {
            bail!(
                "handshake {count} was not a full one: {:?}",
                c.handshake_kind()
            );
        }
        count += 1;
    }
    Ok(Handshakes {
        count,
        client: spent[0],
        server: spent[1],
    })
}
