//! `--kernel-tls`: the agent probes the kernel at start. Where it has TLS, upstream
//! connections of bytes Backends are handed to it after the handshake; where it has none
//! (`CONFIG_TLS` unset, as on the machines this project is tested on), `auto` keeps TLS
//! in rustls and `require` refuses to start. Either way the wire carries TLS.

use std::{
    net::{Ipv4Addr, TcpListener, TcpStream},
    os::fd::AsRawFd,
};

use xtask::netlab::agent::Agent;

use super::{FORWARDED, TlsBed};
use crate::support::{
    Bed,
    tls::{API_BACKEND, API_HOST, ApiBackend, Ca, TlsServer, metrics, sample, wait_for_sample},
};

const CIPHERS: &str = "redirector_kernel_tls_ciphers";
const HANDED: &str = "redirector_kernel_tls_connections_total";

/// Whether this kernel lets a TCP socket take the `tls` protocol, asked on a loopback
/// connection of the test's own (no byte is sent).
fn kernel_has_tls() -> bool {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("loopback listener");
    let socket = TcpStream::connect(listener.local_addr().unwrap()).expect("loopback connect");
    let _peer = listener.accept().expect("accept");
    let name = b"tls";
    // SAFETY: the pointer and length describe `name`, which the kernel only reads.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_TCP,
            libc::TCP_ULP,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    rc == 0
}

#[test]
fn auto_hands_connections_to_the_kernel_where_it_has_tls_else_keeps_them_in_rustls() {
    let ca = Ca::new("test CA");
    let bed = Bed::new(&ApiBackend::server_only(&ca).yaml());
    let server = TlsServer::start(&bed.topo.ext, "[::]:8443", &ca.server(&[API_HOST]), None);
    let mut config = bed.config();
    config.extra_args = vec!["--kernel-tls".into(), "auto".into()];
    let agent = Agent::start(&bed.topo, &config).expect("agent");
    let mut t = TlsBed { server, agent, bed };

    let with_tls = kernel_has_tls();
    if !with_tls {
        // Logged before the ready line.
        let logs = t.agent.logs();
        let line = logs.iter().find(|l| l.contains("kernel TLS unavailable"));
        assert!(
            line.is_some_and(|l| l.contains("TLS stays in rustls") && l.contains("TCP_ULP")),
            "{logs:#?}"
        );
    }
    for _ in 0..2 {
        let reply = t.connect(&[]);
        t.assert_answered(&reply);
    }
    let text = wait_for_sample(
        &t.bed.topo.node,
        FORWARDED,
        &[("backend", API_BACKEND)],
        2.0,
    );
    assert_eq!(
        sample(&text, FORWARDED, &[("backend", API_BACKEND)]),
        Some(2.0),
        "{text}"
    );
    let ciphers = sample(&text, CIPHERS, &[]).expect("the gauge is exported");
    let handed = sample(&text, HANDED, &[]).expect("the counter is exported");
    if with_tls {
        assert!(ciphers >= 1.0, "{text}");
        assert_eq!(handed, 2.0, "both connections went to the kernel: {text}");
    } else {
        assert_eq!((ciphers, handed), (0.0, 0.0), "{text}");
    }
}

#[test]
fn require_refuses_to_start_where_the_kernel_has_no_tls() {
    let bed = Bed::new(&ApiBackend::server_only(&Ca::new("test CA")).yaml());
    let mut config = bed.config();
    config.extra_args = vec!["--kernel-tls".into(), "require".into()];
    if kernel_has_tls() {
        let agent = Agent::start(&bed.topo, &config).expect("agent starts");
        let text = metrics(&bed.topo.node);
        assert!(
            sample(&text, CIPHERS, &[]).is_some_and(|c| c >= 1.0),
            "{text}"
        );
        drop(agent);
        return;
    }
    let finished = Agent::run_to_exit(&bed.topo, &config).expect("agent exits");
    assert!(!finished.status.success());
    let said = finished.stderr.join("\n");
    assert!(
        said.contains("--kernel-tls require")
            && said.contains("this kernel has no TLS")
            && said.contains("setsockopt(TCP_ULP, \"tls\")")
            && said.contains("CONFIG_TLS"),
        "{said}"
    );
    assert!(!bed.pin_dir().exists(), "nothing was attached: {said}");
}
