//! WebSocket (RFC 6455) for `netprobe serve-http`'s `/ws` echo, and the client:
//!
//! `netprobe ws HOST:PORT PATH [-4|-6] [--send TEXT]...` sends the upgrade request,
//! checks `Sec-WebSocket-Accept`, sends each TEXT as a masked text frame and reads one
//! frame back per TEXT, then closes. One JSON line:
//! `{"ok":true,"status":101,"accept_ok":..,"echo":[..],"close_answered":..}` or
//! `{"ok":false,..}` (exit 2).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use base64::{Engine as _, engine::general_purpose::STANDARD};
use serde_json::json;

use super::{http::invalid, say, usage};

const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Answers an upgrade request carrying `key` with 101, then echoes every frame until a
/// close (answered with a close).
pub fn echo(
    key: &str,
    mut reader: impl Read,
    mut out: TcpStream,
    peer: &str,
) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
         sec-websocket-accept: {}\r\n\r\n",
        accept_key(key)
    )?;
    out.flush()?;
    loop {
        let (opcode, payload) = read_frame(&mut reader)?;
        say(&format!(
            "ws-frame {peer} opcode={opcode} {}",
            String::from_utf8_lossy(&payload)
        ));
        match opcode {
            // Close: answer with a close and end.
            0x8 => return write_frame(&mut out, 0x8, &payload, None),
            // Ping: pong.
            0x9 => write_frame(&mut out, 0xA, &payload, None)?,
            _ => write_frame(&mut out, opcode, &payload, None)?,
        }
    }
}

/// One frame (no fragmentation): its opcode and unmasked payload.
fn read_frame(reader: &mut impl Read) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    reader.read_exact(&mut head)?;
    let opcode = head[0] & 0x0f;
    let masked = head[1] & 0x80 != 0;
    let length = match head[1] & 0x7f {
        126 => {
            let mut n = [0u8; 2];
            reader.read_exact(&mut n)?;
            u64::from(u16::from_be_bytes(n))
        }
        127 => {
            let mut n = [0u8; 8];
            reader.read_exact(&mut n)?;
            u64::from_be_bytes(n)
        }
        n => u64::from(n),
    };
    let mut mask = [0u8; 4];
    if masked {
        reader.read_exact(&mut mask)?;
    }
    let mut payload = vec![0u8; usize::try_from(length).map_err(|_| invalid("huge".into()))?];
    reader.read_exact(&mut payload)?;
    if masked {
        for (i, byte) in payload.iter_mut().enumerate() {
            *byte ^= mask[i % 4];
        }
    }
    Ok((opcode, payload))
}

/// One final frame; masked with `mask` (clients must mask, servers must not).
fn write_frame(
    out: &mut impl Write,
    opcode: u8,
    payload: &[u8],
    mask: Option<[u8; 4]>,
) -> std::io::Result<()> {
    let mut frame = vec![0x80 | opcode];
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => frame.push(mask_bit | n as u8),
        n if n <= 0xffff => {
            frame.push(mask_bit | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(mask_bit | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(mask) => {
            frame.extend_from_slice(&mask);
            frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        }
        None => frame.extend_from_slice(payload),
    }
    out.write_all(&frame)?;
    out.flush()
}

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key` (RFC 6455 section 4.2.2).
fn accept_key(key: &str) -> String {
    STANDARD.encode(sha1(format!("{key}{WS_GUID}").as_bytes()))
}

/// SHA-1 (RFC 3174), only for the WebSocket handshake.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut message = data.to_vec();
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in message.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, word) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*word);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (state, value) in h.iter_mut().zip([a, b, c, d, e]) {
            *state = state.wrapping_add(value);
        }
    }
    let mut digest = [0u8; 20];
    for (i, word) in h.iter().enumerate() {
        digest[i * 4..i * 4 + 4].copy_from_slice(&word.to_be_bytes());
    }
    digest
}

/// `netprobe ws HOST:PORT PATH [-4|-6] [--send TEXT]...`
pub fn client(args: &[String]) -> ExitCode {
    let (mut target, mut path, mut family, mut texts) = (None, None, None, Vec::new());
    let mut hold = Duration::ZERO;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-4" => family = Some(true),
            "-6" => family = Some(false),
            "--hold-ms" => match it.next().and_then(|ms| ms.parse().ok()) {
                Some(ms) => hold = Duration::from_millis(ms),
                None => return usage("--hold-ms needs a number"),
            },
            "--send" => match it.next() {
                Some(text) => texts.push(text.clone()),
                None => return usage("--send needs TEXT"),
            },
            _ if target.is_none() => target = Some(arg.clone()),
            _ if path.is_none() => path = Some(arg.clone()),
            _ => return usage(&format!("unexpected argument {arg:?}")),
        }
    }
    let (Some(target), Some(path)) = (target, path) else {
        return usage("ws needs HOST:PORT PATH");
    };
    match ws_exchange(&target, &path, family, &texts, hold) {
        Ok(line) => {
            say(&line.to_string());
            ExitCode::SUCCESS
        }
        Err((stage, e)) => {
            say(&json!({"ok": false, "stage": stage, "error": e.to_string()}).to_string());
            ExitCode::from(2)
        }
    }
}

type Failure = (&'static str, std::io::Error);

/// `hold`: after the echoes, print `{"held": ...}` and keep the WebSocket open this long
/// before closing it (a test looks at the proxy meanwhile).
fn ws_exchange(
    target: &str,
    path: &str,
    v4: Option<bool>,
    texts: &[String],
    hold: Duration,
) -> Result<serde_json::Value, Failure> {
    let addr = (target.to_socket_addrs().map_err(|e| ("resolve", e))?)
        .find(|a| v4.is_none_or(|v4| a.is_ipv4() == v4))
        .ok_or_else(|| ("resolve", invalid(format!("no address for {target}"))))?;
    let timeout = Duration::from_secs(10);
    let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| ("connect", e))?;
    let io = |e| ("io", e);
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    let mut out = stream.try_clone().map_err(io)?;
    let mut reader = BufReader::new(stream);
    let nonce: [u8; 16] = std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0x5a);
    let key = STANDARD.encode(nonce);
    write!(
        out,
        "GET {path} HTTP/1.1\r\nHost: {target}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .map_err(io)?;
    let mut status_line = String::new();
    reader.read_line(&mut status_line).map_err(io)?;
    let status: u16 = (status_line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).map_err(io)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    if status != 101 {
        return Ok(json!({"ok": false, "stage": "upgrade", "status": status,
                         "status_line": status_line.trim_end()}));
    }
    let accept_ok = headers.get("sec-websocket-accept") == Some(&accept_key(&key));
    let mask = [0x12, 0x34, 0x56, 0x78];
    let mut echo = Vec::new();
    for text in texts {
        write_frame(&mut out, 0x1, text.as_bytes(), Some(mask)).map_err(io)?;
        let (_, payload) = read_frame(&mut reader).map_err(io)?;
        echo.push(String::from_utf8_lossy(&payload).into_owned());
    }
    if !hold.is_zero() {
        say(&json!({"held": hold.as_millis() as u64}).to_string());
        std::thread::sleep(hold);
    }
    write_frame(&mut out, 0x8, &1000u16.to_be_bytes(), Some(mask)).map_err(io)?;
    let (close, _) = read_frame(&mut reader).map_err(io)?;
    Ok(json!({
        "ok": true,
        "status": status,
        "accept_ok": accept_ok,
        "echo": echo,
        "close_answered": close == 0x8,
    }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn accept_key_of_rfc_6455() {
        assert_eq!(
            super::accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
