//! The egress policy, end to end: under `deny` the pod reaches declared Backends,
//! `--allow-cidr` networks and DNS, and nothing else, whatever the socket (curl over
//! TCP, a UDP sender, ping, a raw-socket SYN); tcpdump on the external link sees none
//! of it, also while the agent is dead and after it is back. Under `audit` and `allow`
//! the same reaches ext; `audit` counts and logs it. The refusal log line names what the
//! pod resolved through the captured DNS.

use std::{net::Ipv4Addr, process::Output};

use crate::{
    CaptureBed, POD_VIEW_V4, POD_VIEW_V6, PodResolver, support::capture, support::tls::metrics,
    zone_with_elsewhere,
};
use xtask::netlab::{EXT_V4, NODE_EXT_V4, agent::metric_sample};

/// The echo Backend of the bed, which the pod's nameserver points elsewhere.
const NAMES: [&str; 1] = ["echo.redirector.test"];
const UNDECLARED_PORT: &str = "9090";

const UDP_SEND: &str = r#"
import socket, sys
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family, socket.SOCK_DGRAM)
try:
    s.sendto(b"egress-udp", (sys.argv[1], int(sys.argv[2])))
except OSError as e:
    print("errno", e.errno)
    sys.exit(3)
print("sent")
"#;

/// A bare TCP SYN through a raw socket (the kernel adds the IP header): no connect(),
/// so no connect hook; only the packet path can stop it.
const RAW_SYN: &str = r#"
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
syn = struct.pack("!HHIIBBHHH", 40000, int(sys.argv[2]), 1, 0, 5 << 4, 0x02, 1024, 0, 0)
try:
    s.sendto(syn, (sys.argv[1], 0))
except OSError as e:
    print("errno", e.errno)
    sys.exit(3)
print("sent")
"#;

/// A UDP datagram to an allowed address, loose-source-routed through the undeclared
/// one (IP_OPTIONS LSRR): the hooks see the allowed destination, the packet goes to the
/// first hop.
const SOURCE_ROUTED: &str = r#"
import socket, sys
hop = bytes(int(b) for b in sys.argv[1].split("."))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, bytes([0x83, 7, 4]) + hop + bytes([1]))
try:
    s.sendto(b"egress-lsrr", (sys.argv[2], 9999))
except OSError as e:
    print("errno", e.errno)
    sys.exit(3)
print("sent")
"#;

/// What each kind of socket got when sending to the undeclared address.
#[derive(Debug)]
struct Attempts {
    curl: Output,
    udp: Output,
    ping: Output,
    raw: Output,
    source_routed: Output,
}

impl Attempts {
    fn all(&self) -> [&Output; 5] {
        [
            &self.curl,
            &self.udp,
            &self.ping,
            &self.raw,
            &self.source_routed,
        ]
    }

    fn all_failed(&self) -> bool {
        self.all().iter().all(|o| !o.status.success())
    }

    fn all_succeeded(&self) -> bool {
        self.all().iter().all(|o| o.status.success())
    }
}

fn bed(policy: &str, extra: &[&str]) -> CaptureBed {
    let mut bed = CaptureBed::without_agent(
        crate::support::ECHO_BACKEND,
        &zone_with_elsewhere(&NAMES),
        PodResolver::default(),
    );
    let mut args = vec!["--egress-policy", policy];
    args.extend(extra);
    bed.start_agent(&args);
    bed
}

/// From the pod, to `elsewhere.test` (resolved through the captured DNS to
/// [`POD_VIEW_V4`]) and to that address directly: TCP, UDP, ICMP and raw. Returns
/// what each got and how many packets to that address crossed the external link.
fn attempt(bed: &CaptureBed) -> (Attempts, usize) {
    let topo = &bed.bed.topo;
    let filter =
        format!("dst host {POD_VIEW_V4} or (tcp dst port 8080 and src host {NODE_EXT_V4})");
    let wire = capture::Capture::start_filtered(&topo.ext, &topo.ext_link.remote, &filter);
    let run =
        |program: &str, args: &[&str]| topo.spawn_in_pod(program, args).output().expect(program);
    let url = format!("http://elsewhere.test:{UNDECLARED_PORT}/");
    let attempts = Attempts {
        curl: run(
            "curl",
            &["-sSv", "-4", "--http0.9", "--max-time", "5", &url],
        ),
        udp: run("python3", &["-c", UDP_SEND, POD_VIEW_V4, "9999"]),
        ping: run("ping", &["-n", "-c", "1", "-W", "2", POD_VIEW_V4]),
        raw: run("python3", &["-c", RAW_SYN, POD_VIEW_V4, UNDECLARED_PORT]),
        source_routed: run(
            "python3",
            &["-c", SOURCE_ROUTED, POD_VIEW_V4, &EXT_V4.to_string()],
        ),
    };
    let fence = capture::send_fence(&topo.node);
    let pcap = wire.stop_after(fence);
    let to: Ipv4Addr = POD_VIEW_V4.parse().expect("address");
    (attempts, capture::ipv4_packets_to(&pcap, to))
}

fn denied(bed: &CaptureBed, reason: &str, policy: &str) -> f64 {
    let text = metrics(&bed.bed.topo.node);
    let labels = [
        ("reason", reason),
        ("policy", policy),
        ("source_namespace", ""),
    ];
    metric_sample(&text, "redirector_egress_denied_total", &labels).unwrap_or(0.0)
}

#[test]
fn deny_lets_nothing_undeclared_leave_whatever_the_socket_and_with_no_agent() {
    let mut bed = bed("deny", &["--allow-cidr", &format!("{EXT_V4}/32")]);
    let server = bed.bed.serve(&format!("[::]:{UNDECLARED_PORT}"));
    let (attempts, leaked) = attempt(&bed);
    assert!(attempts.all_failed(), "{attempts:#?}");
    assert_eq!(leaked, 0, "packets to {POD_VIEW_V4} crossed the wire");
    let said = String::from_utf8_lossy(&attempts.curl.stderr);
    assert!(said.contains("not permitted"), "curl: {said}");
    for refused in [&attempts.udp, &attempts.raw, &attempts.source_routed] {
        assert_eq!(
            String::from_utf8_lossy(&refused.stdout).trim(),
            "errno 1",
            "EPERM"
        );
    }
    // Counted and logged, naming the pod's name for the address.
    // iputils ping connects a UDP socket first (to learn its source address), and that
    // connect is what refuses it; the raw SYN is refused on the packet path.
    let counted =
        crate::support::poll(|| denied(&bed, "undeclared_address", "deny"), |n| *n >= 3.0);
    assert!(counted >= 3.0, "TCP, UDP and ping's UDP connect: {counted}");
    assert!(denied(&bed, "raw_socket", "deny") >= 1.0, "the raw SYN");
    assert!(
        denied(&bed, "source_route", "deny") >= 1.0,
        "the source-routed datagram"
    );
    let line = bed
        .agent()
        .wait_for_log(&format!("{POD_VIEW_V4}:{UNDECLARED_PORT}"))
        .expect("refusal logged");
    assert!(
        line.contains("egress refused") && line.contains("elsewhere.test"),
        "{line}"
    );
    assert!(line.contains("source_cgroup"), "{line}");

    // What is declared or allowed still works: the Backend (through its virtual
    // address), the allowed network, and DNS for an undeclared name.
    assert!(bed.bed.via_proxy("echo.redirector.test:8080"));
    let allowed = bed
        .bed
        .connect(&format!("{EXT_V4}:{UNDECLARED_PORT}"), &["-4"]);
    assert!(allowed.ok(), "--allow-cidr: {:?}", allowed.json);
    bed.assert_pod_view("elsewhere.test");
    // A port of the Backend's name that no Backend declares: passthrough under allow,
    // refused under deny.
    let port = bed
        .bed
        .connect(&format!("echo.redirector.test:{UNDECLARED_PORT}"), &["-4"]);
    assert!(
        !port.ok(),
        "an undeclared port of a Backend name: {:?}",
        port.json
    );
    let counted = crate::support::poll(|| denied(&bed, "undeclared_port", "deny"), |n| *n >= 1.0);
    assert_eq!(counted, 1.0, "undeclared_port");
    // IPv6 alike: TCP and UDP to the undeclared address's IPv6 twin are refused.
    let v6 = bed
        .bed
        .connect(&format!("[{POD_VIEW_V6}]:{UNDECLARED_PORT}"), &["-6"]);
    assert!(!v6.ok(), "TCP over IPv6: {:?}", v6.json);
    let topo = &bed.bed.topo;
    let udp6 = (topo
        .spawn_in_pod("python3", ["-c", UDP_SEND, POD_VIEW_V6, "9999"])
        .output())
    .expect("python3");
    assert_eq!(
        String::from_utf8_lossy(&udp6.stdout).trim(),
        "errno 1",
        "{udp6:?}"
    );
    drop(server);

    // No agent: the pinned policy still refuses. A new agent: the same.
    let agent = bed.agent.take().expect("agent");
    agent.kill().expect("SIGKILL");
    let (attempts, leaked) = attempt(&bed);
    assert!(attempts.all_failed(), "with no agent: {attempts:#?}");
    assert_eq!(leaked, 0, "with no agent");
    // Once capture stops (the heartbeat goes stale), port 53 is judged like any port:
    // the allowed nameserver answers, an undeclared address gets nothing.
    let pod_view: std::net::IpAddr = POD_VIEW_V4.parse().expect("address");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(8);
    while !bed.resolve("elsewhere.test").contains(&pod_view) {
        assert!(
            std::time::Instant::now() < deadline,
            "DNS never came back without the agent"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let topo = &bed.bed.topo;
    let dns = (topo
        .spawn_in_pod("python3", ["-c", UDP_SEND, POD_VIEW_V4, "53"])
        .output())
    .expect("python3");
    assert_eq!(
        String::from_utf8_lossy(&dns.stdout).trim(),
        "errno 1",
        "{dns:?}"
    );
    bed.start_agent(&[
        "--egress-policy",
        "deny",
        "--allow-cidr",
        &format!("{EXT_V4}/32"),
    ]);
    let (attempts, leaked) = attempt(&bed);
    assert!(attempts.all_failed(), "after a restart: {attempts:#?}");
    assert_eq!(leaked, 0, "after a restart");
}

#[test]
fn audit_lets_everything_through_and_reports_what_deny_would_refuse() {
    let mut bed = bed("audit", &[]);
    let _server = bed.bed.serve(&format!("[::]:{UNDECLARED_PORT}"));
    let (attempts, reached) = attempt(&bed);
    assert!(attempts.all_succeeded(), "{attempts:#?}");
    assert!(
        reached >= 4,
        "TCP, UDP, ICMP and the raw SYN reach ext: {reached}"
    );
    let counted = crate::support::poll(
        || denied(&bed, "undeclared_address", "audit"),
        |n| *n >= 2.0,
    );
    assert!(counted >= 2.0, "{counted}");
    assert!(denied(&bed, "raw_socket", "audit") >= 2.0);
    assert!(denied(&bed, "source_route", "audit") >= 1.0);
    let line = bed
        .agent()
        .wait_for_log("egress audited")
        .expect("audit logged");
    assert!(line.contains(POD_VIEW_V4), "{line}");
}

#[test]
fn allow_lets_everything_through_and_reports_nothing() {
    let bed = bed("allow", &[]);
    let _server = bed.bed.serve(&format!("[::]:{UNDECLARED_PORT}"));
    let (attempts, reached) = attempt(&bed);
    assert!(attempts.all_succeeded(), "{attempts:#?}");
    assert!(reached >= 5, "{reached}");
    assert_eq!(denied(&bed, "undeclared_address", "deny"), 0.0);
    assert_eq!(denied(&bed, "undeclared_address", "audit"), 0.0);
}
