//! Restarts, shutdown and uninstall: the pins outlive the agent, and only `uninstall`
//! removes them.

mod support;

#[path = "lifecycle/ids.rs"]
mod ids;

use std::{os::unix::fs::MetadataExt, path::Path, process::Output};

use support::{
    Bed, ECHO_BACKEND,
    programs::{PROGRAMS, attached_programs},
};
use xtask::netlab::{
    NODE_EXT_V4, Netns,
    agent::{Agent, redirector, redirector_bin},
};

const MAPS: [&str; 10] = [
    "BACKENDS",
    "SOCKETS",
    "PENDING",
    "AGENT_SOCKETS",
    "CONFIG",
    "DNS_CONFIG",
    "HEARTBEAT",
    "DNS_SOCKETS",
    "DNS_PENDING",
    "VIRTUAL_HOSTS",
];

fn sorted(names: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
    names.sort();
    names
}

fn assert_echo_redirected(bed: &Bed) {
    let reply = bed.connect("echo.redirector.test:8080", &["-4"]);
    assert!(reply.ok(), "{:?}", reply.json);
    let seen = reply.seen_by_server().unwrap_or_default();
    assert!(
        seen.starts_with(&format!("{NODE_EXT_V4}:")),
        "server saw {seen}"
    );
}

#[test]
fn restart_adopts_the_pins_and_never_sends_direct_in_between() {
    let bed = Bed::new(ECHO_BACKEND);
    let agent = bed.agent();
    assert!(
        agent.ready_line.contains("programs_adopted=0"),
        "{}",
        agent.ready_line
    );
    assert_echo_redirected(&bed);

    agent.kill().expect("SIGKILL");
    // Nobody listens on the proxy address now: the connect must fail, not go direct.
    let reply = bed.connect("echo.redirector.test:8080", &["-4"]);
    assert!(
        !reply.ok(),
        "connect while the agent was down succeeded: {:?}",
        reply.json
    );
    // The earlier connect's `accepted` line may still be on its way through the reader.
    let accepted = support::poll(|| bed.server.accepted(), |a| !a.is_empty());
    assert_eq!(
        accepted.len(),
        1,
        "the server saw a connect while the agent was down"
    );

    let agent = bed.agent();
    assert!(
        agent.ready_line.contains("programs_adopted=10"),
        "{}",
        agent.ready_line
    );
    assert_echo_redirected(&bed);
    assert_eq!(
        attached_programs(bed.topo.pod_cgroup.path()),
        sorted(&PROGRAMS)
    );
}

#[test]
fn sigterm_keeps_the_pins_and_uninstall_removes_everything() {
    let bed = Bed::new(ECHO_BACKEND);
    let agent = bed.agent();
    let finished = agent.terminate().expect("SIGTERM");
    assert!(
        finished.status.success(),
        "exit status after SIGTERM: {:?}",
        finished.status
    );

    let pins = bed.pin_dir();
    for program in PROGRAMS {
        assert!(
            pins.join("links").join(program).exists(),
            "link pin {program} kept"
        );
    }
    for map in MAPS {
        assert!(pins.join("maps").join(map).exists(), "map pin {map} kept");
    }
    assert_eq!(
        attached_programs(bed.topo.pod_cgroup.path()),
        sorted(&PROGRAMS)
    );
    // Still attached with no agent: Backend connects fail instead of going direct.
    assert!(!bed.connect("echo.redirector.test:8080", &["-4"]).ok());

    let pin_arg = pins.display().to_string();
    let out = redirector(&["uninstall", "--bpffs", &pin_arg]).expect("uninstall");
    assert!(
        out.status.success(),
        "uninstall: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        attached_programs(bed.topo.pod_cgroup.path()),
        Vec::<String>::new()
    );
    assert!(!pins.exists(), "{} still exists", pins.display());

    // Nothing is redirected any more: the pod reaches the server directly.
    assert!(!bed.via_proxy("echo.redirector.test:8080"));

    // A second uninstall has nothing to do and says so.
    let again = redirector(&["uninstall", "--bpffs", &pin_arg]).expect("uninstall");
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing installed"));
}

/// `net.ipv4.tcp_migrate_req` as a process in `netns` reads it.
fn migrate_req(netns: &Netns) -> String {
    let out = (netns.exec("cat"))
        .arg("/proc/sys/net/ipv4/tcp_migrate_req")
        .output()
        .expect("cat");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The markers beside the pins recording tcp_migrate_req's value before the agent.
fn migrate_req_markers(pins: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(pins).expect("pin directory");
    let mut names: Vec<String> = (entries.map(|entry| entry.expect("entry").file_name()))
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.starts_with("tcp_migrate_req-"))
        .collect();
    names.sort();
    names
}

/// `redirector uninstall --bpffs <pins>` run in `netns`.
fn uninstall_in(netns: &Netns, pins: &Path) -> Output {
    let bin = redirector_bin().expect("redirector binary");
    let out = (netns.exec(bin).args(["uninstall", "--bpffs"]).arg(pins))
        .env("NO_COLOR", "1")
        .output()
        .expect("uninstall");
    assert!(
        out.status.success(),
        "uninstall: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn uninstall_in_the_agents_network_namespace_restores_tcp_migrate_req() {
    let bed = Bed::new(ECHO_BACKEND);
    let node = &bed.topo.node;
    assert_eq!(migrate_req(node), "0", "a fresh network namespace");
    let pins = bed.pin_dir();
    let netns = std::fs::metadata(Path::new("/run/netns").join(node.name()))
        .expect("node netns")
        .ino();
    let recorded = vec![format!("tcp_migrate_req-was-0-netns-{netns}")];

    let agent = bed.agent();
    assert_eq!(migrate_req(node), "1", "set by the agent");
    assert_eq!(migrate_req_markers(&pins), recorded);
    assert!(agent.terminate().expect("SIGTERM").status.success());
    // The agent replacing it during an upgrade still needs it.
    assert_eq!(migrate_req(node), "1", "left set when the agent stops");
    // A restart finds it set: the value from before any agent stays the one recorded.
    assert!(bed.agent().terminate().expect("SIGTERM").status.success());
    assert_eq!(migrate_req_markers(&pins), recorded);

    let out = uninstall_in(node, &pins);
    assert_eq!(migrate_req(node), "0", "restored by uninstall");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("restored net.ipv4.tcp_migrate_req=0"),
        "{said}"
    );
    assert!(!pins.exists(), "{} still exists", pins.display());
}

#[test]
fn uninstall_in_another_network_namespace_leaves_its_tcp_migrate_req_alone() {
    let bed = Bed::new(ECHO_BACKEND);
    assert!(bed.agent().terminate().expect("SIGTERM").status.success());
    let pod = &bed.topo.pod;
    let mut sysctl = pod.exec("sysctl");
    sysctl.args(["-q", "-w", "net.ipv4.tcp_migrate_req=1"]);
    assert!(sysctl.status().expect("sysctl").success());

    // Like the uninstall DaemonSet, whose pod is not on the host network.
    let out = uninstall_in(pod, &bed.pin_dir());
    assert_eq!(
        migrate_req(pod),
        "1",
        "another namespace's setting is not touched"
    );
    assert_eq!(migrate_req(&bed.topo.node), "1", "not restorable from here");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("net.ipv4.tcp_migrate_req not restored") && said.contains("set it back"),
        "{said}"
    );
    assert!(!bed.pin_dir().exists(), "the pins are removed all the same");
}

#[test]
fn pins_made_for_one_cgroup_are_not_adopted_for_another() {
    let bed = Bed::new(ECHO_BACKEND);
    let agent = bed.agent();
    agent.terminate().expect("SIGTERM");
    let other = xtask::netlab::Cgroup::new("other").expect("cgroup");
    let mut config = bed.config();
    config.cgroup = Some(other.path().to_path_buf());
    config.in_pod_cgroup = false;
    let finished =
        xtask::netlab::agent::Agent::run_to_exit(&bed.topo, &config).expect("agent exits");
    assert!(!finished.status.success());
    let said = finished.stderr.join("\n");
    assert!(
        said.contains("attached to another cgroup") && said.contains("redirector uninstall"),
        "{said}"
    );
    // The original attachment is untouched.
    assert_eq!(
        attached_programs(bed.topo.pod_cgroup.path()),
        sorted(&PROGRAMS)
    );
    assert_eq!(attached_programs(other.path()), Vec::<String>::new());
}

#[test]
fn pins_of_another_map_layout_are_refused_naming_the_command_to_run() {
    let bed = Bed::new(ECHO_BACKEND);
    let agent = bed.agent();
    agent.terminate().expect("SIGTERM");
    assert!(
        bed.pin_dir().join("layout-3").is_dir(),
        "pins carry their layout"
    );
    // Pins of a future agent whose maps this one cannot use.
    std::fs::rename(
        bed.pin_dir().join("layout-3"),
        bed.pin_dir().join("layout-4"),
    )
    .expect("marker");
    let finished =
        xtask::netlab::agent::Agent::run_to_exit(&bed.topo, &bed.config()).expect("agent exits");
    assert!(!finished.status.success());
    let said = finished.stderr.join("\n");
    assert!(
        said.contains("another layout (layout-4)") && said.contains("redirector uninstall"),
        "{said}"
    );
    // Still attached: refusing never detaches (connects stay redirected, fail closed).
    assert_eq!(
        attached_programs(bed.topo.pod_cgroup.path()),
        sorted(&PROGRAMS)
    );
}

#[test]
fn an_agent_with_other_settings_does_not_join_a_running_one() {
    // The running agent writes the map for its own settings: a second one may only join
    // it (an upgrade) with the same ones, here the proxy addresses.
    let bed = Bed::new(ECHO_BACKEND);
    let _first = bed.agent();
    let mut config = bed.config();
    config.ipv4_proxy_only = true;
    let refused = Agent::start(&bed.topo, &config).err().expect("refused");
    let text = format!("{refused:#}");
    assert!(text.contains("with other settings"), "{text}");
    assert_echo_redirected(&bed);
}
