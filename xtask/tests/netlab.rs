//! End-to-end checks of the test bed itself, with the real `netprobe` client and server:
//! if these fail, every redirector end-to-end test would fail for reasons unrelated to
//! the redirector. They need root; without it they fail (never skip) with a clear message.

use serde_json::Value;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use xtask::netlab::{self, Bpffs, ChildGuard, EXT_V4, EXT_V6, POD_V4, POD_V6, Topology};

const PROBE: &str = env!("CARGO_BIN_EXE_netprobe");
const TIMEOUT: Duration = Duration::from_secs(10);

fn require_root() {
    // SAFETY: geteuid(2) has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert!(
        euid == 0,
        "netlab tests create network namespaces, cgroups and mounts: run them as root \
         (sudo -E cargo xtask test, or sudo -E cargo test -p xtask); euid is {euid}"
    );
}

/// Starts `netprobe serve [::]:8080` (dual-stack) in ext and waits until it listens.
fn server(topo: &Topology) -> ChildGuard {
    let mut server = ChildGuard::spawn("server", topo.ext.exec(PROBE).args(["serve", "[::]:8080"]))
        .expect("spawn server");
    server
        .wait_for_line("listening", TIMEOUT)
        .expect("server ready");
    server
}

/// Runs `netprobe connect ...` in the pod (netns + cgroup) and returns its JSON line.
fn connect_from_pod(topo: &Topology, args: &[&str]) -> Value {
    let mut client =
        ChildGuard::spawn("client", &mut topo.spawn_in_pod(PROBE, args)).expect("spawn client");
    let done = client.finish(TIMEOUT).expect("client exits");
    let line = done.stdout.first().cloned().unwrap_or_default();
    let json: Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("client printed {line:?} ({e}); stderr {:?}", done.stderr));
    assert!(done.status.success(), "client failed: {json}");
    json
}

fn check_exchange(topo: &Topology, server: &mut ChildGuard, target: &str, pod: IpAddr, dst: &str) {
    let json = connect_from_pod(topo, &["connect", target, "--send", "hello"]);
    assert_eq!(json["ok"], true, "{json}");
    assert_eq!(json["peer"], dst, "{json}");
    let reply = json["reply"].as_str().unwrap_or_default();
    let seen = match pod {
        IpAddr::V4(v4) => format!("peer={v4}:"),
        IpAddr::V6(v6) => format!("peer=[{v6}]:"),
    };
    assert!(
        reply.starts_with(&seen),
        "server saw {reply:?}, expected {seen}<port>"
    );
    assert!(reply.trim_end().ends_with("got=hello"), "{reply:?}");
    let accepted = server
        .wait_for_line("accepted", TIMEOUT)
        .expect("server logged it");
    assert!(accepted.contains(&pod.to_string()), "{accepted}");
}

#[test]
fn pod_reaches_ext_over_ipv4_and_ipv6_with_its_own_address() {
    require_root();
    let topo = Topology::new().expect("topology");
    let mut server = server(&topo);
    check_exchange(
        &topo,
        &mut server,
        "10.200.2.2:8080",
        POD_V4.into(),
        "10.200.2.2:8080",
    );
    check_exchange(
        &topo,
        &mut server,
        "[fd00:200:2::2]:8080",
        POD_V6.into(),
        "[fd00:200:2::2]:8080",
    );
}

#[test]
fn hosts_entries_resolve_inside_the_netns_only() {
    require_root();
    let topo = Topology::new().expect("topology");
    topo.pod
        .set_hosts(&[(EXT_V4.into(), "ext.test"), (EXT_V6.into(), "ext.test")])
        .expect("hosts");
    let mut server = server(&topo);
    let v4 = connect_from_pod(&topo, &["connect", "ext.test:8080", "-4"]);
    assert_eq!(v4["peer"], "10.200.2.2:8080", "{v4}");
    let v6 = connect_from_pod(&topo, &["connect", "ext.test:8080", "-6"]);
    assert_eq!(v6["peer"], "[fd00:200:2::2]:8080", "{v6}");
    server.wait_for_line("accepted", TIMEOUT).expect("first");
    server.wait_for_line("accepted", TIMEOUT).expect("second");
    // resolv.conf points at 127.0.0.1 (nothing listens): unknown names fail, locally.
    let unknown = connect_from_pod_raw(&topo, &["connect", "nowhere.test:8080"]);
    assert_eq!(unknown["stage"], "resolve", "{unknown}");
}

/// Like [`connect_from_pod`] but for a client expected to fail (exit status 2).
fn connect_from_pod_raw(topo: &Topology, args: &[&str]) -> Value {
    let mut client =
        ChildGuard::spawn("client", &mut topo.spawn_in_pod(PROBE, args)).expect("spawn client");
    let done = client.finish(TIMEOUT).expect("client exits");
    assert_eq!(done.status.code(), Some(2), "{done:?}");
    serde_json::from_str(done.stdout.first().map_or("", String::as_str)).expect("json")
}

#[test]
fn child_guard_reports_missing_lines_instead_of_hanging() {
    // No root needed: plain processes.
    let mut quick = ChildGuard::spawn(
        "quick",
        Command::new("sh").args(["-c", "echo one; echo two >&2"]),
    )
    .expect("spawn");
    let err = quick
        .wait_for_line("never", TIMEOUT)
        .expect_err("must fail");
    assert!(format!("{err:#}").contains("output ended"), "{err:#}");
    assert!(
        format!("{err:#}").contains("one"),
        "recent output in {err:#}"
    );
    let done = quick.finish(TIMEOUT).expect("finish");
    assert_eq!(done.stderr, vec!["two".to_owned()]);

    let mut slow = ChildGuard::spawn("slow", Command::new("sleep").arg("60")).expect("spawn");
    let err = slow
        .wait_for_line("never", Duration::from_millis(100))
        .expect_err("must time out");
    assert!(format!("{err:#}").contains("timed out"), "{err:#}");
    assert_eq!(slow.wait_timeout(Duration::ZERO).expect("wait"), None);
    // Dropping `slow` kills it.
}

#[test]
fn connect_failure_is_reported_as_json() {
    require_root();
    let topo = Topology::new().expect("topology");
    // Nothing listens on ext:9: refused. No default route: an outside address fails too.
    let json = connect_from_pod_raw(&topo, &["connect", "10.200.2.2:9", "--timeout-ms", "2000"]);
    assert_eq!(json["ok"], false);
    assert_eq!(json["stage"], "connect");
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            topo.pod.name(),
            PROBE,
            "connect",
            "192.0.2.1:80",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"stage\":\"connect\""));
}

#[test]
fn spawn_in_pod_puts_the_process_in_the_cgroup_and_netns() {
    require_root();
    let topo = Topology::new().expect("topology");
    let mut sleeper = ChildGuard::spawn(
        "sleeper",
        &mut topo.spawn_in_pod("sh", ["-c", "echo ready; exec sleep 60"]),
    )
    .expect("spawn");
    sleeper.wait_for_line("ready", TIMEOUT).expect("ready");
    let pid = sleeper.id();
    assert_eq!(topo.pod_cgroup.pids().expect("pids"), vec![pid]);
    let ns_of = |p: &Path| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    let proc_ns = PathBuf::from(format!("/proc/{pid}/ns/net"));
    let pod_ns = Path::new("/run/netns").join(topo.pod.name());
    assert_eq!(
        ns_of(&proc_ns).expect("proc ns"),
        ns_of(&pod_ns).expect("pod ns")
    );
    sleeper.signal(libc::SIGTERM).expect("signal");
    let status = sleeper
        .wait_timeout(TIMEOUT)
        .expect("wait")
        .expect("exited");
    assert!(!status.success());
}

#[test]
fn dropping_everything_leaves_nothing_behind() {
    require_root();
    let topo = Topology::new().expect("topology");
    topo.node
        .set_hosts(&[(EXT_V4.into(), "ext.test")])
        .expect("hosts");
    let bpffs = Bpffs::new().expect("bpffs");
    let names: Vec<String> = [&topo.pod, &topo.node, &topo.ext]
        .iter()
        .map(|n| n.name().to_owned())
        .collect();
    let cgroup = topo.pod_cgroup.path().to_owned();
    let mount = bpffs.path().to_owned();
    assert!(cgroup.is_dir());
    assert!(mounts().contains(&mount.display().to_string()));
    assert!(cgroup.starts_with(netlab::cgroup2_mount().expect("cgroup2")));

    // A process still in the cgroup when it is dropped is moved out, not killed.
    let mut sleeper = ChildGuard::spawn(
        "sleeper",
        &mut topo.spawn_in_pod("sh", ["-c", "echo ready; exec sleep 60"]),
    )
    .expect("spawn");
    sleeper.wait_for_line("ready", TIMEOUT).expect("ready");
    drop(topo);
    drop(bpffs);
    assert_eq!(
        sleeper.wait_timeout(Duration::ZERO).expect("wait"),
        None,
        "still alive"
    );
    drop(sleeper);

    let listed = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .expect("ip")
            .stdout,
    )
    .into_owned();
    for name in &names {
        assert!(
            !listed.contains(name.as_str()),
            "{name} still listed: {listed}"
        );
        assert!(!Path::new("/run/netns").join(name).exists(), "{name}");
        assert!(!Path::new("/etc/netns").join(name).exists(), "{name}");
    }
    assert!(!cgroup.exists(), "{} left behind", cgroup.display());
    assert!(!mount.exists(), "{} left behind", mount.display());
    assert!(!mounts().contains(&mount.display().to_string()));
}

fn mounts() -> String {
    std::fs::read_to_string("/proc/mounts").expect("mounts")
}

#[test]
fn a_panicking_test_still_cleans_up() {
    require_root();
    let mut names = Vec::new();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let topo = Topology::new().expect("topology");
        let bpffs = Bpffs::new().expect("bpffs");
        names.push(Path::new("/run/netns").join(topo.pod.name()));
        names.push(topo.pod_cgroup.path().to_owned());
        names.push(bpffs.path().to_owned());
        panic!("deliberate");
    }));
    assert!(result.is_err());
    assert_eq!(names.len(), 3);
    for path in &names {
        assert!(!path.exists(), "{} left behind", path.display());
    }
}
