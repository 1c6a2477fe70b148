//! `fakedns ADDR ZONEFILE`: a tiny authoritative DNS server for tests, over UDP and TCP.
//!
//! The zone file is read again for every query, so a test changes the answers (and
//! their TTLs) by rewriting it. Lines: `NAME TTL ADDRESS` (A or AAAA by the address's
//! family), or `NAME SERVFAIL` to make resolution of NAME fail; `#` starts a comment.
//! Unknown names get NXDOMAIN. A UDP answer larger than the client's limit (512 bytes,
//! or its EDNS payload size) is sent truncated (TC, no records), so the client retries
//! over TCP. Prints `listening <addr>` once bound and `query <name> <type> <udp|tcp>`
//! per question, so tests can wait for a refresh instead of sleeping.

use std::{
    io::{Read, Write},
    net::{IpAddr, TcpListener, TcpStream, UdpSocket},
    process::ExitCode,
};

use hickory_proto::{
    op::{Message, MessageType, ResponseCode},
    rr::{
        Name, RData, Record, RecordType,
        rdata::{A, AAAA},
    },
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, zone] = args.as_slice() else {
        eprintln!("usage: fakedns ADDR ZONEFILE");
        return ExitCode::from(64);
    };
    let (socket, listener) = match (UdpSocket::bind(addr), TcpListener::bind(addr)) {
        (Ok(socket), Ok(listener)) => (socket, listener),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("fakedns: cannot bind {addr}: {error}");
            return ExitCode::from(2);
        }
    };
    let tcp_zone = zone.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let zone = tcp_zone.clone();
            std::thread::spawn(move || serve_tcp(stream, &zone));
        }
    });
    say(&format!("listening {addr}"));
    let mut buf = [0u8; 1500];
    loop {
        let Ok((len, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let Ok(request) = Message::from_vec(&buf[..len]) else {
            continue;
        };
        let zone_text = std::fs::read_to_string(zone).unwrap_or_default();
        let mut response = answer(&request, &zone_text, "udp");
        let limit = match request.extensions() {
            Some(edns) => usize::from(edns.max_payload().max(512)),
            None => 512,
        };
        if response.to_vec().is_ok_and(|bytes| bytes.len() > limit) {
            response.take_answers();
            response.set_truncated(true);
        }
        if let Ok(bytes) = response.to_vec() {
            let _ = socket.send_to(&bytes, from);
        }
    }
}

/// Length-prefixed queries on one connection until the client closes it.
fn serve_tcp(mut stream: TcpStream, zone: &str) {
    loop {
        let mut len = [0u8; 2];
        if stream.read_exact(&mut len).is_err() {
            return;
        }
        let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if stream.read_exact(&mut query).is_err() {
            return;
        }
        let Ok(request) = Message::from_vec(&query) else {
            return;
        };
        let zone_text = std::fs::read_to_string(zone).unwrap_or_default();
        let Ok(bytes) = answer(&request, &zone_text, "tcp").to_vec() else {
            return;
        };
        let Ok(len) = u16::try_from(bytes.len()) else {
            return;
        };
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        if stream.write_all(&framed).is_err() {
            return;
        }
    }
}

fn answer(request: &Message, zone: &str, transport: &str) -> Message {
    let mut response = Message::new();
    response
        .set_id(request.id())
        .set_message_type(MessageType::Response)
        .set_op_code(request.op_code())
        .set_authoritative(true)
        .set_recursion_desired(request.recursion_desired());
    let mut code = ResponseCode::NXDomain;
    for query in request.queries() {
        response.add_query(query.clone());
        let wanted = query
            .name()
            .to_ascii()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        say(&format!(
            "query {wanted} {} {transport}",
            query.query_type()
        ));
        for line in zone
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
        {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [name, "SERVFAIL"] if name.eq_ignore_ascii_case(&wanted) => {
                    code = ResponseCode::ServFail
                }
                [name, ttl, address] if name.eq_ignore_ascii_case(&wanted) => {
                    if code == ResponseCode::NXDomain {
                        code = ResponseCode::NoError;
                    }
                    let (Ok(ttl), Ok(address)) = (ttl.parse::<u32>(), address.parse::<IpAddr>())
                    else {
                        continue;
                    };
                    let rdata = match (address, query.query_type()) {
                        (IpAddr::V4(v4), RecordType::A) => RData::A(A(v4)),
                        (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(v6)),
                        _ => continue,
                    };
                    let name: Name = query.name().clone();
                    response.add_answer(Record::from_rdata(name, ttl, rdata));
                }
                _ => {}
            }
        }
    }
    response.set_response_code(code);
    response
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
