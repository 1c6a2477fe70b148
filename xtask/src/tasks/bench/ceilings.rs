//! Measuring the ceilings, once per run after the repetitions, with no agent attached:
//! iperf3 over the pod → node → ext path (the copy ceiling), `openssl speed` and
//! `examples/tls_speed` on one core (the crypto ceilings). Each part that fails is
//! reported failed; the run goes on.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use xtask::netlab::{ChildGuard, EXT_V4};

use super::{
    Plan,
    case::Bed,
    report::{Ceilings, CopyCeiling, OpensslSpeed, TlsSpeed},
    servers::Iperf3Server,
    tools,
};

/// iperf3's port in ext.
const IPERF3_PORT: u16 = 5201;
/// How long `openssl speed` runs per block size (at most; never longer than a wrk run).
const OPENSSL_SECONDS: u64 = 3;
/// What tls_speed is asked to do: 1 GiB sealed and opened, 2 s of full handshakes.
pub(super) const TLS_SPEED_ARGS: [&str; 4] = ["--bytes", "1073741824", "--handshake-secs", "2"];

/// `-seconds` of `openssl speed` for a run of wrk runs of `duration_s`.
pub(super) fn openssl_seconds(duration_s: u64) -> u64 {
    OPENSSL_SECONDS.min(duration_s)
}

/// The three ceilings.
pub(super) fn measure(plan: &Plan, bed: &Bed) -> Ceilings {
    println!("\n==> ceilings: iperf3, openssl speed, tls_speed");
    let text = |e: anyhow::Error| format!("{e:#}");
    Ceilings {
        copy: copy(plan, bed).map_err(text),
        openssl: openssl(plan).map_err(text),
        rustls: match &plan.tls_speed {
            Ok(bin) => rustls(bin).map_err(text),
            Err(why) => Err(why.clone()),
        },
    }
}

/// The iperf3 client command line (in the pod), as run and as the report shows it.
pub(super) fn iperf3_args(seconds: u64) -> Vec<String> {
    [
        "-c",
        &EXT_V4.to_string(),
        "-p",
        &IPERF3_PORT.to_string(),
        "-t",
        &seconds.to_string(),
        "-R",
        "-J",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `openssl speed` for one block size.
pub(super) fn openssl_args(seconds: u64, block: u32) -> Vec<String> {
    [
        "speed",
        "-evp",
        "aes-128-gcm",
        "-seconds",
        &seconds.to_string(),
        "-bytes",
        &block.to_string(),
        "-mr",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// One iperf3 stream, ext sending to the pod (`-R`: the bulk workload's direction), with
/// nothing attached to the pod cgroup, as for the direct cases.
fn copy(plan: &Plan, bed: &Bed) -> Result<CopyCeiling> {
    bed.ensure_detached()?;
    let listen = SocketAddr::new(EXT_V4.into(), IPERF3_PORT);
    let _server = Iperf3Server::start(&plan.tools.iperf3, &bed.topology.ext, listen)?;
    let mut command = bed
        .topology
        .spawn_in_pod(&plan.tools.iperf3, iperf3_args(plan.duration_s));
    let mut child = ChildGuard::spawn("iperf3", &mut command)?;
    let finished = child.finish(plan.wrk_timeout())?;
    let out = finished.stdout.join("\n");
    if !finished.status.success() {
        bail!(
            "iperf3 exited with {}: {}",
            finished.status,
            iperf3_error(&out).unwrap_or_else(|| finished.stderr.join(" "))
        );
    }
    parse_iperf3(&out, plan.duration_s)
}

/// The `error` of iperf3's JSON output, if it has one.
fn iperf3_error(json: &str) -> Option<String> {
    let value: Value = serde_json::from_str(json).ok()?;
    Some(value.get("error")?.as_str()?.to_owned())
}

/// Reads `iperf3 -R -J`: the client received, so `sum_received` is the stream's rate.
pub(super) fn parse_iperf3(json: &str, seconds: u64) -> Result<CopyCeiling> {
    let value: Value = serde_json::from_str(json).context("iperf3 printed no JSON")?;
    if let Some(error) = value.get("error").and_then(Value::as_str) {
        bail!("iperf3: {error}");
    }
    let end = &value["end"];
    let bits = end["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3's JSON has no end.sum_received.bits_per_second")?;
    let cpu = &end["cpu_utilization_percent"];
    Ok(CopyCeiling {
        seconds,
        mib_per_s: bits / 8.0 / (1024.0 * 1024.0),
        retransmits: end["sum_sent"]["retransmits"].as_u64(),
        receiver_cpu_pct: cpu["host_total"].as_f64(),
        sender_cpu_pct: cpu["remote_total"].as_f64(),
    })
}

/// `openssl speed -evp aes-128-gcm` with 16 KiB and 1 KiB blocks, one process each.
fn openssl(plan: &Plan) -> Result<OpensslSpeed> {
    let seconds = openssl_seconds(plan.duration_s);
    let run = |block: u32| -> Result<f64> {
        let out = Command::new(&plan.tools.openssl)
            .args(openssl_args(seconds, block))
            .output()
            .context("cannot run openssl")?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "openssl speed exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        parse_openssl(&text).map(|bytes_per_s| bytes_per_s / (1024.0 * 1024.0))
    };
    Ok(OpensslSpeed {
        version: tools::version(&plan.tools.openssl, "version"),
        seconds,
        mib_16k: run(16384)?,
        mib_1k: run(1024).ok(),
    })
}

/// The bytes per second of `openssl speed -mr`'s `+F:<n>:<name>:<bytes/s>` line.
pub(super) fn parse_openssl(text: &str) -> Result<f64> {
    let line = text
        .lines()
        .find(|l| l.starts_with("+F:"))
        .with_context(|| format!("openssl speed printed no +F: line:\n{text}"))?;
    let value = line.rsplit(':').next().unwrap_or("");
    value
        .trim()
        .parse()
        .with_context(|| format!("openssl speed: {line:?} does not end in a number"))
}

/// `examples/tls_speed` with [`TLS_SPEED_ARGS`].
fn rustls(bin: &Path) -> Result<TlsSpeed> {
    let mut command = Command::new(bin);
    command.args(TLS_SPEED_ARGS);
    let mut child = ChildGuard::spawn("tls_speed", &mut command)?;
    let finished = child.finish(Duration::from_secs(120))?;
    if !finished.status.success() {
        bail!(
            "tls_speed exited with {}: {}",
            finished.status,
            finished.stderr.join(" ")
        );
    }
    let line = finished
        .stdout
        .iter()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("tls_speed printed no JSON line")?;
    parse_tls_speed(line)
}

pub(super) fn parse_tls_speed(line: &str) -> Result<TlsSpeed> {
    let value: Value = serde_json::from_str(line).context("tls_speed: not JSON")?;
    let text = |key: &str| -> Result<String> {
        Ok(value[key]
            .as_str()
            .with_context(|| format!("tls_speed: no {key}"))?
            .to_owned())
    };
    let number = |key: &str| -> Result<f64> {
        value[key]
            .as_f64()
            .with_context(|| format!("tls_speed: no {key}"))
    };
    Ok(TlsSpeed {
        provider: text("provider")?,
        suite: text("suite")?,
        record_bytes: value["record_bytes"].as_u64().unwrap_or(0),
        bytes: value["bytes"].as_u64().unwrap_or(0),
        seal_mib_s: number("seal_mib_s")?,
        open_mib_s: number("open_mib_s")?,
        handshakes_per_s: value["handshakes_per_s"].as_f64(),
        client_handshakes_per_s: value["client_handshakes_per_s"].as_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_machine_readable() {
        let text = "+DT:AES-128-GCM:2:16384\n+R:334313:AES-128-GCM:1.230000\n+H:16384\n\
                    +F:25:AES-128-GCM:4453157879.67\n";
        assert!((parse_openssl(text).unwrap() - 4_453_157_879.67).abs() < 1e-3);
        assert!(parse_openssl("+H:16384\n").is_err());
    }

    #[test]
    fn iperf3_json() {
        let json = r#"{"start":{},"intervals":[],"end":{
            "sum_sent":{"bytes":1,"bits_per_second":8.5e9,"retransmits":3},
            "sum_received":{"bytes":1,"bits_per_second":8388608000.0},
            "cpu_utilization_percent":{"host_total":41.5,"remote_total":77.25}}}"#;
        let c = parse_iperf3(json, 10).unwrap();
        assert!((c.mib_per_s - 1000.0).abs() < 1e-9);
        assert_eq!(c.retransmits, Some(3));
        assert_eq!(c.receiver_cpu_pct, Some(41.5));
        assert!(parse_iperf3(r#"{"error":"unable to connect"}"#, 10).is_err());
        assert_eq!(iperf3_error(r#"{"error":"busy"}"#).as_deref(), Some("busy"));
    }

    #[test]
    fn tls_speed_line() {
        let line = r#"{"bytes":1073741824,"handshakes_per_s":3562.4,"client_handshakes_per_s":5346.9,"open_mib_s":2150.6,"provider":"ring","record_bytes":16384,"seal_mib_s":6065.0,"suite":"TLS13_AES_128_GCM_SHA256"}"#;
        let t = parse_tls_speed(line).unwrap();
        assert_eq!(t.provider, "ring");
        assert_eq!(t.record_bytes, 16384);
        assert_eq!(t.client_handshakes_per_s, Some(5346.9));
        assert!(parse_tls_speed(r#"{"provider":"ring"}"#).is_err());
    }
}
