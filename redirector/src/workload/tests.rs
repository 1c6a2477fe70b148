use std::{os::unix::fs::MetadataExt, path::Path};

use super::*;

fn ino(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

fn pod(namespace: &str, name: &str, service_account: Option<&str>) -> PodIdentity {
    PodIdentity {
        namespace: namespace.into(),
        name: name.into(),
        service_account: service_account.map(Into::into),
    }
}

const UID_A: &str = "1111aaaa-0000-4000-8000-000000000001";
const UID_B: &str = "2222bbbb-0000-4000-8000-000000000002";

#[test]
fn a_host_cgroup_is_its_path_below_the_root() {
    let root = tempfile::tempdir().unwrap();
    let app = root.path().join("system.slice/app.service");
    std::fs::create_dir_all(&app).unwrap();
    let workloads = Workloads::new(root.path().to_path_buf(), false);
    let workload = workloads.of(ino(&app));
    assert_eq!(workload.cgroup, "/system.slice/app.service");
    assert_eq!(
        (workload.namespace.as_deref(), workload.source_namespace()),
        (None, "")
    );
    assert_eq!(workloads.of(ino(root.path())).cgroup, "/");
    // Outside Kubernetes a pod-like directory is just a path.
    let podlike = root.path().join(format!("pod{UID_A}"));
    std::fs::create_dir(&podlike).unwrap();
    assert_eq!(workloads.of(ino(&podlike)).pod_uid, None);
    let json = serde_json::to_value(&*workload).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"cgroup": "/system.slice/app.service"})
    );
}

#[test]
fn pods_are_named_in_both_kubelet_layouts_down_to_their_containers() {
    let root = tempfile::tempdir().unwrap();
    let cgroupfs = root
        .path()
        .join(format!("kubepods/besteffort/pod{UID_A}/cri-abc"));
    let systemd = root.path().join(format!(
        "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/\
         kubelet-kubepods-burstable-pod{}.slice/cri-containerd-def.scope",
        UID_B.replace('-', "_")
    ));
    for dir in [&cgroupfs, &systemd] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let workloads = Workloads::new(root.path().to_path_buf(), true);
    workloads.set_pods(Pods::from([
        (UID_A.to_owned(), pod("team-a", "a-1", Some("builder"))),
        (UID_B.to_owned(), pod("team-b", "b-1", None)),
    ]));
    let a = workloads.of(ino(&cgroupfs));
    assert_eq!(a.cgroup, format!("/kubepods/besteffort/pod{UID_A}/cri-abc"));
    assert_eq!(a.source_namespace(), "team-a");
    assert_eq!(a.to_string(), "team-a/a-1");
    let json = serde_json::to_value(&*a).unwrap();
    let expected = serde_json::json!({
        "namespace": "team-a", "pod": "a-1", "service_account": "builder", "cgroup": a.cgroup,
    });
    assert_eq!(json, expected);
    let b = workloads.of(ino(systemd.parent().unwrap()));
    assert_eq!(
        (b.pod.as_deref(), b.pod_uid.as_deref()),
        (Some("b-1"), Some(UID_B))
    );
    // A cgroup of the pod tree that is no pod's.
    let qos = workloads.of(ino(&root.path().join("kubepods/besteffort")));
    assert_eq!((qos.pod_uid.as_deref(), qos.source_namespace()), (None, ""));
}

#[test]
fn a_pod_resolved_before_its_api_object_is_named_once_the_pods_say_so() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(format!("kubepods/pod{UID_A}"));
    std::fs::create_dir_all(&dir).unwrap();
    let workloads = Workloads::new(root.path().to_path_buf(), true);
    let early = workloads.of(ino(&dir));
    assert_eq!(
        (early.pod_uid.as_deref(), early.pod.as_deref()),
        (Some(UID_A), None)
    );
    workloads.set_pods(Pods::from([(UID_A.to_owned(), pod("team-a", "a-1", None))]));
    assert_eq!(workloads.of(ino(&dir)).pod.as_deref(), Some("a-1"));
    // Deleted: no longer named after it.
    workloads.set_pods(Pods::new());
    assert_eq!(workloads.of(ino(&dir)).namespace, None);
    // Unchanged pods keep their entries: no walk and no lookup again.
    let walks = workloads.paths.walks();
    workloads.set_pods(Pods::new());
    assert!(workloads.cached(ino(&dir)).is_some());
    assert_eq!(workloads.paths.walks(), walks);
}

#[test]
fn unknown_ids_are_not_cached_and_cannot_make_it_walk_without_end() {
    let root = tempfile::tempdir().unwrap();
    let workloads = Workloads::new(root.path().to_path_buf(), false);
    let now = Instant::now();
    for id in 0..100 {
        let unknown = workloads.of_at(u64::MAX - id, now);
        assert_eq!(unknown.cgroup, (u64::MAX - id).to_string());
        assert!(workloads.cached(u64::MAX - id).is_none());
    }
    assert_eq!(workloads.paths.walks(), u64::from(paths::WALK_BURST));
    // A cgroup made after the walks is found once the limit lets a walk through.
    let late = root.path().join("late");
    std::fs::create_dir(&late).unwrap();
    assert_eq!(
        workloads.of_at(ino(&late), now).cgroup,
        ino(&late).to_string()
    );
    let later = now + paths::WALK_EVERY;
    assert_eq!(workloads.of_at(ino(&late), later).cgroup, "/late");
    // Known ids never walk.
    assert_eq!(workloads.of_at(ino(&late), later).cgroup, "/late");
    assert_eq!(workloads.paths.walks(), u64::from(paths::WALK_BURST) + 1);
}

#[test]
fn pod_uids_are_read_from_either_layout_and_nothing_else() {
    let cases = [
        ("/kubepods/pod1111-aaaa-bbbb/c", Some("1111-aaaa-bbbb")),
        (
            "/kubepods.slice/kubepods-pod1111_aaaa_bbbb.slice",
            Some("1111-aaaa-bbbb"),
        ),
        ("/kubepods/besteffort", None),
        ("/kubepods.slice/kubepods-besteffort.slice", None),
        ("/system.slice/podman.service", None),
        ("/pods", None),
    ];
    for (path, uid) in cases {
        assert_eq!(pod_uid_in(path).as_deref(), uid, "{path}");
    }
}
