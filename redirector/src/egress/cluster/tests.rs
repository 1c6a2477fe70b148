use std::os::unix::fs::MetadataExt;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> NamespaceLabels {
    (pairs.iter())
        .map(|(namespace, value)| ((*namespace).to_owned(), (*value).to_owned()))
        .collect()
}

#[test]
fn labels_choose_modes_and_an_invalid_value_leaves_the_default() {
    let mut warned = NamespaceLabels::new();
    let given = labels(&[("a", "deny"), ("b", "audit"), ("c", "allow"), ("d", "Deny")]);
    let modes = namespace_modes(&given, EgressPolicy::Allow, &mut warned);
    let expected = BTreeMap::from([
        ("a".to_owned(), EgressPolicy::Deny),
        ("b".to_owned(), EgressPolicy::Audit),
        ("c".to_owned(), EgressPolicy::Allow),
    ]);
    assert_eq!(modes, expected);
    // Remembered, so the next sync does not warn again; forgotten once fixed.
    assert_eq!(warned, labels(&[("d", "Deny")]));
    namespace_modes(&labels(&[("d", "deny")]), EgressPolicy::Allow, &mut warned);
    assert!(warned.is_empty());
}

#[test]
fn pods_of_labelled_namespaces_get_their_namespaces_mode() {
    let namespaces = BTreeMap::from([
        ("locked".to_owned(), EgressPolicy::Deny),
        ("open".to_owned(), EgressPolicy::Allow),
    ]);
    let pods: Pods = [
        ("p1", "locked"),
        ("p2", "open"),
        ("p3", "other"),
        ("p4", "locked"),
    ]
    .iter()
    .map(|(uid, ns)| ((*uid).to_owned(), pod_of(ns)))
    .collect();
    // p4's cgroup is not there yet; p5 is no pod of this node any more.
    let cgroups = BTreeMap::from([
        ("p1".to_owned(), 11),
        ("p2".to_owned(), 12),
        ("p3".to_owned(), 13),
        ("p5".to_owned(), 15),
    ]);
    let modes = pod_modes(&namespaces, &pods, &cgroups);
    assert_eq!(
        modes,
        BTreeMap::from([(11, EgressPolicy::Deny), (12, EgressPolicy::Allow)])
    );
}

#[test]
fn active_whenever_any_mode_in_force_is_not_allow() {
    let mut settings = EgressSettings {
        default: EgressPolicy::Allow,
        allowed: Vec::new(),
        pod_trees: Some(vec![1]),
        pod_modes: BTreeMap::from([(2, EgressPolicy::Allow)]),
        complete: true,
    };
    assert!(!settings.active());
    settings.pod_modes.insert(3, EgressPolicy::Audit);
    assert!(settings.active());
    settings.pod_modes.clear();
    settings.default = EgressPolicy::Deny;
    assert!(settings.active());
}

#[test]
fn cluster_ranges_join_the_flag_merged() {
    let net = |s: &str| s.parse::<IpNet>().unwrap();
    let ranges = ClusterRanges {
        nodes: Some(vec![net("10.244.0.0/24"), net("10.244.1.0/24")]),
        services: Some(vec![net("10.96.0.0/12"), net("fd00:10:96::/112")]),
    };
    let merged = allowed(&[net("192.168.0.0/16"), net("10.96.1.0/24")], &ranges);
    let expected = [
        "10.96.0.0/12",
        "10.244.0.0/23",
        "192.168.0.0/16",
        "fd00:10:96::/112",
    ];
    assert_eq!(merged, expected.map(net));
}

#[tokio::test]
async fn the_plan_maps_labelled_pods_found_under_the_root() {
    let root = tempfile::tempdir().unwrap();
    let tree = root.path().join("kubepods");
    let pod = tree.join("besteffort/poduid-a");
    std::fs::create_dir_all(&pod).unwrap();
    let (pods_tx, pods_rx) = watch::channel(Pods::new());
    let (feeds, mut view) = channels(pods_rx);
    let pods = [
        ("uid-a", "team-a"),
        ("uid-b", "team-a"),
        ("uid-c", "team-c"),
    ];
    pods_tx.send_replace(pods.map(|(u, n)| (u.to_owned(), pod_of(n))).into());
    feeds
        .namespaces
        .send_replace(Some(labels(&[("team-a", "deny"), ("team-c", "bogus")])));
    let mut planner = Planner::new(EgressPolicy::Audit, Vec::new(), root.path().into());
    let (settings, missing) = planner.plan(&mut view);
    let ino = |path: &std::path::Path| std::fs::metadata(path).unwrap().ino();
    assert_eq!(settings.pod_trees, Some(vec![ino(&tree)]));
    assert_eq!(
        settings.pod_modes,
        BTreeMap::from([(ino(&pod), EgressPolicy::Deny)])
    );
    // uid-b's cgroup is missing; team-c's pods need none (the tree gives the default).
    assert_eq!(missing, 1);
    assert_eq!(planner.warned, labels(&[("team-c", "bogus")]));
    // Neither the ranges nor (as far as the planner knows) the pods are listed yet: a
    // write of these settings only adds to what is pinned.
    assert!(!settings.complete);
    planner.pods_listed();
    assert!(
        !planner.plan(&mut view).0.complete,
        "the ranges are not listed"
    );
    feeds.ranges.send_replace(ClusterRanges {
        nodes: Some(Vec::new()),
        services: Some(Vec::new()),
    });
    assert!(planner.plan(&mut view).0.complete);
}

/// A pod of `namespace` (its name and service account do not matter here).
fn pod_of(namespace: &str) -> crate::workload::PodIdentity {
    crate::workload::PodIdentity {
        namespace: namespace.to_owned(),
        name: format!("pod-of-{namespace}"),
        service_account: None,
    }
}
