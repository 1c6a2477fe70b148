//! The image and the DaemonSet's pod under a real OCI runtime (podman with runc), with
//! exactly what the manifests grant: the pod spec is taken from deploy/daemonset.yaml
//! (its DIRECTORY MODE variant, applied mechanically) and deploy/uninstall/, never
//! restated here (`xtask::pod::spec` turns it into `podman run` options and refuses what
//! it cannot reproduce). Its hostPaths are test-made: the cgroup2 root is the test bed's
//! pod cgroup, the bpffs a mount of the test's own.
//!
//! The image is the one `cargo xtask test` builds (`cargo xtask image`), named by
//! `$REDIRECTOR_IMAGE`. Where the runtime cannot run a container at all, the tests fail
//! and say so: skipping would hide exactly what they are for.

mod support;

use std::time::{Duration, Instant};

use support::{
    Bed, ECHO_BACKEND,
    connect_loop::{ConnectLoop, LongConnection},
    programs::attached_programs,
    require_root,
};
use xtask::{
    examples::{self, copy_examples, examples_dir, tls_material},
    image,
    netlab::{EXT_V4, probe::ProbeServer},
    pod::{self, AgentPod, Podman, RunSpec},
};

const WAIT: Duration = Duration::from_secs(60);

/// Our podman (xtask's storage and containers.conf) and the image to run, checked to
/// run at all.
fn podman_and_image() -> (Podman, String) {
    require_root();
    let reference = std::env::var("REDIRECTOR_IMAGE").expect(
        "$REDIRECTOR_IMAGE is not set: run the container tests through `cargo xtask test`, \
         which builds the image (`cargo xtask image`)",
    );
    let workspace = xtask::manifest::workspace_dir();
    let podman = Podman::for_workspace(&workspace).expect("podman configuration");
    let out = podman
        .command()
        .args(["run", "--rm", "--pull", "never", &reference, "--version"])
        .output()
        .expect("podman runs");
    assert!(
        out.status.success(),
        "the container runtime cannot run the image {reference} on this machine (podman \
         with runc; see xtask/src/pod/podman.rs for its configuration): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (podman, reference)
}

#[test]
fn the_image_has_the_dockerfiles_entrypoint_user_and_layout() {
    let (podman, reference) = podman_and_image();
    let stage = image::dockerfile_stage().expect("deploy/Dockerfile");
    let inspected = image::inspect(&podman, &reference).expect("inspect");
    let config = &inspected["Config"];
    let strings =
        |v: &serde_json::Value| -> Option<Vec<String>> { serde_json::from_value(v.clone()).ok() };
    assert_eq!(strings(&config["Entrypoint"]), stage.entrypoint, "{config}");
    assert_eq!(strings(&config["Cmd"]), stage.cmd, "{config}");
    assert_eq!(config["User"].as_str(), stage.user.as_deref(), "{config}");
    let workdir = config["WorkingDir"].as_str().filter(|d| !d.is_empty());
    assert_eq!(
        workdir.unwrap_or("/"),
        stage.workdir.as_deref().unwrap_or("/")
    );

    let files = image::files(&podman, &reference).expect("the image's files");
    for copy in &stage.copies {
        assert!(
            files.contains(&copy.dest),
            "{} missing: {files:#?}",
            copy.dest
        );
    }
    // The binary, the libraries it links and the loader: nothing else.
    let regular: Vec<&String> = files
        .iter()
        .filter(|f| f.contains(".so") || f.ends_with("/redirector"))
        .collect();
    eprintln!("image {reference}: {regular:?}");
    // The entrypoint runs with no other file: CMD is --help.
    let out = podman
        .command()
        .args(["run", "--rm", "--pull", "never", "--read-only", &reference])
        .output()
        .expect("podman run");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("run"),
        "{out:?}"
    );
}

#[test]
fn the_daemonset_pod_redirects_probes_drains_hands_over_and_uninstalls() {
    let started = Instant::now();
    let (podman, _) = podman_and_image();
    let bed = Bed::new(ECHO_BACKEND);

    // deploy/examples, the CA placeholder replaced by a test CA; its TLS Backend
    // (api.redirector.test:443) served in ext.
    let scratch = tempfile::tempdir().expect("scratch");
    let (ca_pem, cert, key) = tls_material(scratch.path()).expect("test PKI");
    copy_examples(&examples_dir(), bed.backends.path(), &ca_pem).expect("examples");
    let mut tls_server = ProbeServer::start_tls(
        support::PROBE.as_ref(),
        &bed.topo.ext,
        "[::]:443",
        &cert,
        &key,
    )
    .expect("TLS server");
    // The examples' hostnames resolve to ext, but for `examples::UNSERVED`, whose
    // resolution fails: the second agent then joins the first while one of its names is
    // still failing, and must take no share of the connects before it can serve them.
    bed.topo
        .node
        .set_hosts(&examples::hosts())
        .expect("node hosts");
    bed.topo
        .pod
        .set_hosts(&examples::hosts())
        .expect("pod hosts");

    // The node's setting that deploy/README.md asks of every node (the agent cannot set
    // it from a pod: /proc/sys is read-only there).
    (bed.topo.node.exec("sysctl"))
        .args(["-qw", "net.ipv4.tcp_migrate_req=1"])
        .status()
        .expect("sysctl")
        .success()
        .then_some(())
        .expect("sysctl -w net.ipv4.tcp_migrate_req=1 in the node");

    let (node, _cgroup_parent) =
        pod::test_bed_node(&bed.topo, bed.bpffs.path(), bed.backends.path())
            .expect("the node's side of the pod");
    let first = AgentPod::start(&podman, &bed.topo, &node).expect("the agent pod is ready");
    report_grants("agent", &first.run);
    eprintln!("first agent ready after {:.1?}", started.elapsed());

    // The manifest's exec probes, in the container.
    for which in ["ready", "live"] {
        let out = first.probe(which).expect("probe runs");
        assert!(out.status.success(), "{which} probe: {out:?}");
    }

    // Redirected: plaintext from the pod, TLS from the proxy to the server.
    let reply = bed.connect("api.redirector.test:443", &["-4"]);
    assert!(reply.ok(), "{:?}", reply.json);
    assert!(
        reply.reply().contains("got=hello"),
        "the TLS server got the plaintext: {:?}",
        reply.json
    );
    tls_server
        .wait_for("handshake-ok")
        .expect("the proxy originated TLS");
    assert!(bed.via_proxy("echo.redirector.test:8080"));

    // A rollout: a second pod of the same spec beside the first, then the first stopped
    // with its grace period, a connection still open through it, while the pod connects
    // every 5 ms.
    let long = LongConnection::open(&bed.topo, 4000, WAIT);
    let target = format!("{EXT_V4}:8080");
    let mut client = ConnectLoop::start(&bed.topo, &target, 4000, 5);
    let mut second = AgentPod::start(&podman, &bed.topo, &node).expect("the second pod joins");
    // The manifest says --log-format=json.
    let ready: serde_json::Value = serde_json::from_str(&second.ready_line).expect("JSON log");
    assert_eq!(
        ready["fields"]["programs_adopted"], 10,
        "the second pod adopts the pinned programs: {ready}"
    );
    for which in ["ready", "live"] {
        let out = second.probe(which).expect("probe runs");
        assert!(out.status.success(), "second pod's {which} probe: {out:?}");
    }
    let grace = first.grace();
    let (stopped, took) = first.stop().expect("podman stop");
    assert!(
        stopped.status.success(),
        "SIGTERM: exit 0 expected: {:?}\n{}",
        stopped.status,
        stopped.stderr.join("\n")
    );
    assert!(took < grace, "stopped in {took:?}, grace period {grace:?}");
    eprintln!("first agent drained and exited 0 in {took:.1?} (grace {grace:?})");
    second
        .wait_for_log("took over writing the Backend map")
        .expect("takeover");
    assert!(
        client.running(),
        "the connect loop must span the whole handover"
    );
    let counts = client.assert_all_proxied(WAIT);
    eprintln!("connect loop across the handover: {counts}");
    long.assert_answered(WAIT);
    assert!(bed.via_proxy(&target));

    // The second pod stops too; the pins stay for the uninstall pod.
    let (stopped, took) = second.stop().expect("podman stop");
    assert!(stopped.status.success(), "{:?}", stopped.status);
    assert!(bed.pin_dir().exists());
    eprintln!("second agent exited 0 in {took:.1?}");

    let (uninstalled, run) =
        pod::uninstall(&podman, &bed.topo, bed.bpffs.path()).expect("uninstall pod");
    report_grants("uninstall", &run);
    assert!(
        uninstalled.status.success(),
        "uninstall: {:?}\n{}",
        uninstalled.status,
        uninstalled.stderr.join("\n")
    );
    assert_eq!(
        attached_programs(bed.topo.pod_cgroup.path()),
        Vec::<String>::new(),
        "programs still attached"
    );
    assert!(
        !bed.pin_dir().exists(),
        "pins left in {}",
        bed.pin_dir().display()
    );
    assert!(
        !bed.via_proxy("echo.redirector.test:8080"),
        "still redirected"
    );
    eprintln!("container test took {:.1?}", started.elapsed());
}

/// What the manifest granted, for the record (`--nocapture` shows it).
fn report_grants(pod: &str, run: &RunSpec) {
    for (field, option) in &run.grants {
        eprintln!("{pod}: {field:<70} -> {option}");
    }
}
