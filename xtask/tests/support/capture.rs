//! What crossed the wire: `tcpdump` on an interface of a test namespace, and the TCP
//! payloads of the capture by port.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use xtask::netlab::{ChildGuard, Netns, Stream};

/// The last bytes a test sends: see [`send_fence`].
pub const FENCE: &str = "capture-fence-end-of-test";

/// Sends [`FENCE`] straight from the node (never redirected) to the Bed's plain server
/// on ext:8080. Its arrival in the capture file means everything before it is there
/// too: pass it to [`Capture::stop_after`].
pub fn send_fence(node: &Netns) -> &'static [u8] {
    let fence = node
        .exec(crate::support::PROBE)
        .args([
            "connect",
            &format!("{}:8080", xtask::netlab::EXT_V4),
            "--send",
            FENCE,
        ])
        .output()
        .expect("fence");
    assert!(fence.status.success(), "{fence:?}");
    FENCE.as_bytes()
}

/// A running `tcpdump -w`; killed on drop if not stopped.
pub struct Capture {
    child: ChildGuard,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Capture {
    /// Captures every TCP packet on `interface` of `netns`; returns once tcpdump says it
    /// is listening (from then on, every packet is in the file).
    pub fn start(netns: &Netns, interface: &str) -> Capture {
        Self::start_filtered(netns, interface, "tcp")
    }

    /// Captures the packets on `interface` of `netns` that match the tcpdump `filter`.
    pub fn start_filtered(netns: &Netns, interface: &str, filter: &str) -> Capture {
        let dir = tempfile::tempdir().expect("capture dir");
        let file = dir.path().join("wire.pcap");
        let mut command = netns.exec("tcpdump");
        command
            .args(["-i", interface, "-n", "-s", "0", "-U", "--immediate-mode"])
            // Debian's tcpdump drops to user `tcpdump` before opening the file, which
            // could not write into our 0700 temporary directory.
            .args(["-Z", "root", "-w"])
            .arg(&file)
            .arg(filter);
        let mut child = ChildGuard::spawn_watching("tcpdump", &mut command, Stream::Stderr)
            .expect("tcpdump (apt-get install tcpdump)");
        child
            .wait_for_line("listening on", Duration::from_secs(10))
            .expect("tcpdump listens");
        Capture {
            child,
            file,
            _dir: dir,
        }
    }

    /// Waits until `marker` is in the capture file, then stops tcpdump and returns the
    /// file. Send the marker last, after the traffic under test, over the same interface:
    /// packets are written in order, so once it is there everything before it is too.
    pub fn stop_after(mut self, marker: &[u8]) -> Vec<u8> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let bytes = std::fs::read(&self.file).unwrap_or_default();
            if contains(&bytes, marker) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the marker {:?} never reached the capture",
                String::from_utf8_lossy(marker)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child.signal(libc::SIGINT).expect("SIGINT tcpdump");
        let done = self
            .child
            .finish(Duration::from_secs(10))
            .expect("tcpdump exits");
        assert!(done.status.success(), "tcpdump: {:?}", done.stderr);
        std::fs::read(&self.file).expect("read capture")
    }
}

/// How many IPv4 packets of a pcap file of Ethernet frames go to `to`.
pub fn ipv4_packets_to(pcap: &[u8], to: std::net::Ipv4Addr) -> usize {
    (frames(pcap).into_iter())
        .filter(|frame| {
            frame.len() >= 34 && frame[12..14] == [0x08, 0x00] && frame[30..34] == to.octets()
        })
        .count()
}

/// The Ethernet frames of a classic pcap file (what tcpdump writes for a veth).
fn frames(pcap: &[u8]) -> Vec<&[u8]> {
    assert!(pcap.len() >= 24, "not a pcap file");
    let little = match pcap[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => panic!("not a classic pcap file: {:02x?}", &pcap[..4]),
    };
    let u32_at = |at: usize| {
        let b = [pcap[at], pcap[at + 1], pcap[at + 2], pcap[at + 3]];
        if little {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    assert_eq!(u32_at(20), 1, "link type must be Ethernet");
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let captured = u32_at(at + 8) as usize;
        frames.push(&pcap[at + 16..(at + 16 + captured).min(pcap.len())]);
        at += 16 + captured;
    }
    frames
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// One TCP segment with payload, from a pcap file.
#[derive(Debug)]
pub struct Segment {
    pub src_port: u16,
    pub dst_port: u16,
    pub payload: Vec<u8>,
}

/// The TCP segments carrying data in a classic pcap file of Ethernet frames (what
/// tcpdump writes for a veth), over IPv4 or IPv6 (no extension headers: none are sent).
pub fn segments(pcap: &[u8]) -> Vec<Segment> {
    let u16_be = |b: &[u8], at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    let mut out = Vec::new();
    for frame in frames(pcap) {
        if frame.len() < 14 {
            continue;
        }
        let (ip, ethertype) = (&frame[14..], u16_be(frame, 12));
        let (tcp, ip_payload_len) = match ethertype {
            0x0800 if ip.len() >= 20 && ip[9] == 6 => {
                let header = usize::from(ip[0] & 0x0f) * 4;
                let total = usize::from(u16_be(ip, 2));
                (&ip[header.min(ip.len())..], total.saturating_sub(header))
            }
            0x86dd if ip.len() >= 40 && ip[6] == 6 => (&ip[40..], usize::from(u16_be(ip, 4))),
            _ => continue,
        };
        if tcp.len() < 20 {
            continue;
        }
        let header = usize::from(tcp[12] >> 4) * 4;
        // The IP length, not the frame length: short frames carry Ethernet padding.
        let end = ip_payload_len.min(tcp.len());
        if header >= end {
            continue;
        }
        out.push(Segment {
            src_port: u16_be(tcp, 0),
            dst_port: u16_be(tcp, 2),
            payload: tcp[header..end].to_vec(),
        });
    }
    out
}

/// Every payload byte sent to `port` (`to: true`) or from it, in capture order.
pub fn stream(segments: &[Segment], port: u16, to: bool) -> Vec<u8> {
    segments
        .iter()
        .filter(|s| {
            if to {
                s.dst_port == port
            } else {
                s.src_port == port
            }
        })
        .flat_map(|s| s.payload.iter().copied())
        .collect()
}
