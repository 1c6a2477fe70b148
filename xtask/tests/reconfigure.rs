//! Live reconfiguration from the Backend directory: no restart, changes applied by diff.
//! Each step waits for the agent's own log line that the datapath was updated (the
//! readiness signal), never for a fixed time.

mod support;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use support::{
    Bed, ECHO_BACKEND, PROBE, curl,
    fixtures::{other_backend, wait_for_map_update, xbackend},
    tls::{metrics, sample},
};
use xtask::netlab::{ChildGuard, agent::Agent, probe::PROBE_TIMEOUT};

/// Writes `text` to `dir/name` the way editors do: a temporary file renamed over it.
fn replace(dir: &Path, name: &str, text: &str) {
    let temporary = dir.join(format!(".{name}.swp"));
    std::fs::write(&temporary, text).expect("write");
    std::fs::rename(&temporary, dir.join(name)).expect("rename");
}

#[test]
fn backends_added_and_removed_without_restart() {
    let bed = Bed::new(ECHO_BACKEND);
    let _other_server = bed.serve("[::]:9090");
    let mut agent = bed.agent();
    assert!(
        !bed.via_proxy("other.redirector.test:9090"),
        "not declared yet"
    );

    std::fs::write(bed.backends.path().join("other.yaml"), other_backend()).expect("write");
    wait_for_map_update(&mut agent, "added=2");
    assert!(bed.via_proxy("other.redirector.test:9090"));

    std::fs::remove_file(bed.backends.path().join("other.yaml")).expect("remove");
    wait_for_map_update(&mut agent, "removed=2");
    assert!(!bed.via_proxy("other.redirector.test:9090"));
    assert!(
        bed.via_proxy("echo.redirector.test:8080"),
        "the untouched Backend stays"
    );
}

#[test]
fn editor_style_replace_and_rename_are_picked_up() {
    let bed = Bed::new(ECHO_BACKEND);
    let _other_server = bed.serve("[::]:9090");
    let mut agent = bed.agent();
    // Move echo to port 9090 by atomic replace of the file.
    let moved = ECHO_BACKEND.replace("number: 8080", "number: 9090");
    replace(bed.backends.path(), "backends.yaml", &moved);
    wait_for_map_update(&mut agent, "removed=2");
    assert!(bed.via_proxy("echo.redirector.test:9090"));
    assert!(!bed.via_proxy("echo.redirector.test:8080"));

    // A file renamed away from a YAML name is no longer read.
    std::fs::rename(
        bed.backends.path().join("backends.yaml"),
        bed.backends.path().join("backends.yaml.off"),
    )
    .expect("rename");
    wait_for_map_update(&mut agent, "removed=2");
    assert!(!bed.via_proxy("echo.redirector.test:9090"));
}

#[test]
fn a_bad_edit_keeps_the_last_good_version() {
    let bed = Bed::new(ECHO_BACKEND);
    let mut agent = bed.agent();
    let broken = ECHO_BACKEND.replace("number: 8080", "number: 0");
    replace(bed.backends.path(), "backends.yaml", &broken);
    let kept = agent
        .wait_for_log("keeping the last good version")
        .expect("kept");
    assert!(kept.contains("demo/echo"), "{kept}");
    assert!(
        bed.via_proxy("echo.redirector.test:8080"),
        "the last good version still applies"
    );
    let skipped = agent
        .logs()
        .into_iter()
        .filter(|l| l.contains("skipped") && l.contains("spec.port.number"));
    assert_eq!(skipped.count(), 1);
}

#[test]
fn a_file_that_no_longer_parses_keeps_its_backends() {
    let bed = Bed::new(ECHO_BACKEND);
    let mut agent = bed.agent();
    replace(
        bed.backends.path(),
        "backends.yaml",
        "apiVersion: [unclosed\n",
    );
    let kept = agent
        .wait_for_log("keeping the last good version")
        .expect("kept");
    assert!(kept.contains("demo/echo"), "{kept}");
    assert!(bed.via_proxy("echo.redirector.test:8080"));
    // Fixing the file later is an ordinary update.
    replace(
        bed.backends.path(),
        "backends.yaml",
        &ECHO_BACKEND.replace("number: 8080", "number: 9090"),
    );
    wait_for_map_update(&mut agent, "removed=2");
}

#[test]
fn a_full_backend_map_is_reported_survives_a_restart_and_fills_when_room_is_made() {
    // Room for echo's two entries (IPv4 and IPv6) only; no virtual addresses.
    let bed = Bed::new(ECHO_BACKEND);
    let _other_server = bed.serve("[::]:9090");
    let mut config = bed.config();
    let args = ["--no-dns-capture", "--max-backend-addresses", "2"];
    config.extra_args = args.map(str::to_owned).to_vec();
    let mut agent = Agent::start(&bed.topo, &config).expect("agent");
    std::fs::write(bed.backends.path().join("other.yaml"), other_backend()).expect("write");
    let full = agent.wait_for_log("Backend map is full").expect("reported");
    assert!(
        full.contains("demo/other") && full.contains("unwritten=2"),
        "{full}"
    );
    assert_eq!(unwritten(&bed), 2.0);
    assert!(!bed.via_proxy("other.redirector.test:9090"), "no room");
    assert!(bed.via_proxy("echo.redirector.test:8080"));

    // A new agent adopts the full pinned map, says so and serves what is written.
    drop(agent);
    let mut agent = Agent::start(&bed.topo, &config).expect("agent restarts on a full map");
    let logs = agent.logs();
    assert!(
        logs.iter().any(|l| l.contains("Backend map is full")),
        "{logs:#?}"
    );
    assert!(bed.via_proxy("echo.redirector.test:8080"));

    // Removing echo makes the room: its entries go before other's are written.
    std::fs::remove_file(bed.backends.path().join("backends.yaml")).expect("remove");
    agent.wait_for_log("has room again").expect("room");
    assert_eq!(unwritten(&bed), 0.0);
    assert!(bed.via_proxy("other.redirector.test:9090"));
    assert!(!bed.via_proxy("echo.redirector.test:8080"));
}

fn unwritten(bed: &Bed) -> f64 {
    let text = metrics(&bed.topo.node);
    sample(&text, "redirector_backend_map_unwritten", &[]).expect("the gauge")
}

#[test]
fn a_backend_directory_swapped_by_symlink_is_followed() {
    // As git-sync does: the path the agent is given is a symlink, retargeted atomically
    // to a new directory at every update (the old one may stay).
    let bed = Bed::new("");
    let _other_server = bed.serve("[::]:9090");
    let root = tempfile::tempdir().expect("root");
    let version = |name: &str, yaml: &str| {
        let dir = root.path().join(name);
        std::fs::create_dir(&dir).expect("version dir");
        std::fs::write(dir.join("backends.yaml"), yaml).expect("write");
        dir
    };
    let link = root.path().join("current");
    let point = |target: &Path| {
        let temporary = root.path().join(".current.tmp");
        std::os::unix::fs::symlink(target, &temporary).expect("symlink");
        std::fs::rename(&temporary, &link).expect("retarget");
    };
    point(&version("v1", ECHO_BACKEND));
    let mut config = bed.config();
    config.backends = link.clone();
    let mut agent = Agent::start(&bed.topo, &config).expect("agent");
    assert!(bed.via_proxy("echo.redirector.test:8080"));

    point(&version("v2", &other_backend()));
    wait_for_map_update(&mut agent, "removed=2");
    assert!(bed.via_proxy("other.redirector.test:9090"));
    assert!(!bed.via_proxy("echo.redirector.test:8080"));
    // The new directory itself is watched: an edit inside it is seen.
    std::fs::write(link.join("echo.yaml"), ECHO_BACKEND).expect("write");
    wait_for_map_update(&mut agent, "added=2");
    assert!(bed.via_proxy("echo.redirector.test:8080"));
}

#[test]
fn logs_written_beside_the_backend_directory_cause_no_reload() {
    // `redirector run --backends /srv/rd/backends --access-log /srv/rd/access.log >
    // /srv/rd/agent.log 2>&1`: every request writes the access log, and every reload
    // logged a line to agent.log, both in the parent the watch follows for swaps.
    let bed = Bed::new("");
    let root = tempfile::tempdir().expect("root");
    let dir = root.path().join("backends");
    std::fs::create_dir(&dir).expect("backend dir");
    let backend = xbackend("demo", "web", "api.redirector.test", 9000) + "  protocol: HTTP11\n";
    std::fs::write(dir.join("backends.yaml"), backend).expect("write");
    let mut server = ChildGuard::spawn(
        "serve-http",
        (bed.topo.ext.exec(PROBE)).args(["serve-http", "[::]:9000"]),
    )
    .expect("serve-http");
    server
        .wait_for_line("listening", PROBE_TIMEOUT)
        .expect("serve-http listens");
    let mut config = bed.config();
    config.backends = dir;
    let access_log = root.path().join("access.log");
    let access_arg = access_log.display().to_string();
    config.extra_args = vec!["--access-log".to_owned(), access_arg];
    config.log_file = Some(root.path().join("agent.log"));
    let agent = Agent::start(&bed.topo, &config).expect("agent");
    // Every result counts (`ok`, `problems`).
    let reloads = || {
        let text = metrics(&bed.topo.node);
        let count = |result| {
            sample(
                &text,
                "redirector_config_reloads_total",
                &[("result", result)],
            )
        };
        count("ok").unwrap_or(0.0) + count("problems").unwrap_or(0.0)
    };

    let started = Instant::now();
    let mut requests = 0;
    while started.elapsed() < Duration::from_secs(10) {
        curl::curl(&bed.topo, &["http://api.redirector.test:9000/"]).assert_status(200);
        requests += 1;
    }
    let logged = support::poll(
        || std::fs::read_to_string(&access_log).unwrap_or_default(),
        |log| log.lines().count() >= requests,
    );
    assert_eq!(
        logged.lines().count(),
        requests,
        "the access log is written"
    );
    let applied = (agent.logs().iter())
        .filter(|l| l.contains("Backends applied"))
        .count();
    // The first load is counted and logged too: nothing after it.
    assert_eq!(
        (reloads(), applied),
        (1.0, 1),
        "loads counted and `Backends applied` lines after {requests} requests in 10 s"
    );
    let copied = std::fs::read_to_string(root.path().join("agent.log")).expect("agent.log");
    assert!(copied.contains("ready:"), "{copied}");
}
