//! The ceilings the results are read against, measured in the same run: how fast the
//! kernel copies one TCP stream over the bench's own path (iperf3), and how fast one core
//! encrypts AES-128-GCM (OpenSSL's `speed`, and the agent's rustls provider through
//! `examples/tls_speed`). A proxy cannot move bytes faster than the copy ceiling, nor
//! originate TLS faster than the crypto ceiling of the cores it has.

use std::fmt::Write as _;

use super::cases::Case;
use super::format::{escape, fmt_num, fmt_rate};
use super::ratios::mib;
use super::results::Results;
use super::wrk::Workload;

/// Everything measured for the ceilings; a part that failed holds its reason.
#[derive(Debug, Clone)]
pub struct Ceilings {
    pub copy: Result<CopyCeiling, String>,
    pub openssl: Result<OpensslSpeed, String>,
    pub rustls: Result<TlsSpeed, String>,
}

/// iperf3, one stream from ext to the pod (the direction of the bulk workload's bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct CopyCeiling {
    pub seconds: u64,
    pub mib_per_s: f64,
    pub retransmits: Option<u64>,
    /// CPU use of the receiving (pod) and sending (ext) iperf3, in percent of one CPU.
    pub receiver_cpu_pct: Option<f64>,
    pub sender_cpu_pct: Option<f64>,
}

/// `openssl speed -evp aes-128-gcm`, one process.
#[derive(Debug, Clone, PartialEq)]
pub struct OpensslSpeed {
    pub version: String,
    pub seconds: u64,
    pub mib_16k: f64,
    pub mib_1k: Option<f64>,
}

/// The JSON line of `examples/tls_speed`.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsSpeed {
    pub provider: String,
    pub suite: String,
    pub record_bytes: u64,
    pub bytes: u64,
    pub seal_mib_s: f64,
    pub open_mib_s: f64,
    /// Full handshakes per CPU second, client and server together, and client side only.
    pub handshakes_per_s: Option<f64>,
    pub client_handshakes_per_s: Option<f64>,
}

impl Ceilings {
    /// The provider the agent's TLS is built with, as tls_speed reported it.
    pub fn provider(&self) -> String {
        match &self.rustls {
            Ok(speed) => speed.provider.clone(),
            Err(why) => format!("unknown (tls_speed: {})", escape(why)),
        }
    }

    /// One line for the history: the three ceilings.
    pub fn summary(&self) -> String {
        let copy = match &self.copy {
            Ok(c) => format!("copy {} MiB/s", fmt_num(Some(c.mib_per_s), 0)),
            Err(_) => "copy failed".to_owned(),
        };
        let openssl = match &self.openssl {
            Ok(o) => format!("OpenSSL AES-128-GCM {} MiB/s", fmt_num(Some(o.mib_16k), 0)),
            Err(_) => "OpenSSL failed".to_owned(),
        };
        let rustls = match &self.rustls {
            Ok(t) => format!(
                "rustls ({}) seal {} / open {} MiB/s",
                t.provider,
                fmt_num(Some(t.seal_mib_s), 0),
                fmt_num(Some(t.open_mib_s), 0)
            ),
            Err(_) => "rustls failed".to_owned(),
        };
        format!("{copy}, {openssl}, {rustls}")
    }
}

/// The "Ceilings" section: the table, and the bulk medians of the run as a share of the
/// copy ceiling.
pub fn section(ceilings: &Ceilings, results: &Results) -> String {
    let mut md = String::from(
        "\n## Ceilings (same run)\n\n| ceiling | value | how | notes |\n|---|---:|---|---|\n",
    );
    let failed = |what: &str, how: &str, why: &str| {
        format!("| {what} | failed | {how} | {} |\n", escape(why))
    };
    let iperf = "`iperf3 -c 10.200.2.2 -R` in the pod, `iperf3 -s` in ext, no program attached";
    md.push_str(&match &ceilings.copy {
        Ok(c) => {
            let mut notes = Vec::new();
            if let Some(n) = c.retransmits {
                notes.push(format!("{n} retransmits"));
            }
            if let (Some(r), Some(s)) = (c.receiver_cpu_pct, c.sender_cpu_pct) {
                notes.push(format!("CPU: receiver {r:.0}%, sender {s:.0}%"));
            }
            format!(
                "| copy: TCP, 1 stream, ext → node → pod, {} s | {} MiB/s | {iperf} | {} |\n",
                c.seconds,
                fmt_num(Some(c.mib_per_s), 1),
                notes.join("; ")
            )
        }
        Err(why) => failed("copy: TCP, 1 stream", iperf, why),
    });
    let speed = "`openssl speed -evp aes-128-gcm -bytes 16384`, one process";
    md.push_str(&match &ceilings.openssl {
        Ok(o) => format!(
            "| crypto: OpenSSL AES-128-GCM, 16 KiB blocks, 1 core | {} MiB/s | {speed} (`-seconds {}`) | {}{} |\n",
            fmt_num(Some(o.mib_16k), 1),
            o.seconds,
            escape(&o.version),
            o.mib_1k.map_or_else(String::new, |v| format!(
                "; 1 KiB blocks: {} MiB/s",
                fmt_num(Some(v), 1)
            ))
        ),
        Err(why) => failed("crypto: OpenSSL AES-128-GCM", speed, why),
    });
    let example = "`examples/tls_speed` (this work tree's `redirector::crypto_provider()`), in-memory client and server, one thread, thread CPU time";
    match &ceilings.rustls {
        Ok(t) => {
            let what = format!("{} in {} KiB records", t.suite, t.record_bytes / 1024);
            let _ = writeln!(
                md,
                "| crypto: rustls ({}) seal, 1 core | {} MiB/s | {example} | {what}, {} MiB |",
                t.provider,
                fmt_num(Some(t.seal_mib_s), 1),
                t.bytes >> 20
            );
            let _ = writeln!(
                md,
                "| crypto: rustls ({}) open, 1 core | {} MiB/s | the same run | read_tls + process_new_packets + reader().read |",
                t.provider,
                fmt_num(Some(t.open_mib_s), 1)
            );
            if let Some(client) = t.client_handshakes_per_s {
                let both = t.handshakes_per_s.map_or_else(String::new, |both| {
                    format!("; client and server together: {}/s", fmt_rate(Some(both)))
                });
                let _ = writeln!(
                    md,
                    "| handshakes: rustls ({}) full TLS 1.3, client side, 1 core | {}/s | the same run | ECDSA P-256 server certificate, X25519, no resumption{both} |",
                    t.provider,
                    fmt_rate(Some(client)),
                );
            }
        }
        Err(why) => md.push_str(&failed("crypto: rustls", example, why)),
    }
    if let Ok(copy) = &ceilings.copy {
        let shares: Vec<String> = results
            .cases
            .iter()
            .filter_map(|&case| {
                let bulk = results.median(case, Workload::Bulk, mib)?;
                Some(format!(
                    "{} {:.0}%",
                    short(case),
                    bulk / copy.mib_per_s * 100.0
                ))
            })
            .collect();
        if !shares.is_empty() {
            let _ = writeln!(
                md,
                "\nBulk medians of this run as a share of the copy ceiling: {}.",
                shares.join(", ")
            );
        }
    }
    md
}

/// A case's name in running text.
fn short(case: Case) -> &'static str {
    match case {
        Case::Direct => "direct TLS",
        Case::HaproxyTcp => "HAProxy mode tcp",
        Case::RedirectorTcp => "redirector TCP",
        Case::RedirectorTcpDeny => "redirector TCP (deny)",
        Case::HaproxyHttp => "HAProxy mode http",
        Case::RedirectorHttp => "redirector HTTP",
        Case::RedirectorHttpPolicy => "redirector HTTP (policy)",
        Case::DirectPlain => "direct plaintext",
        Case::HaproxyPlain => "HAProxy plaintext",
        Case::RedirectorPlain => "redirector plaintext",
    }
}
