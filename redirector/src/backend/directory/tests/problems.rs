//! How problems are located and rendered: file, object, field, one line each.

use super::{load_dir, names, rendered, write, xbackend};
use crate::backend::directory::Problem;

#[test]
fn broken_object_is_reported_and_others_load() {
    let dir = tempfile::tempdir().unwrap();
    let text = [
        xbackend("demo", "one", "one.example.com", "80"),
        xbackend("demo", "bad", "bad.example.com", "70000"),
        xbackend("demo", "two", "two.example.com", "80"),
    ]
    .join("---\n");
    let file = write(dir.path(), "x.yaml", &text);
    let catalog = load_dir(dir.path());
    assert_eq!(names(&catalog), ["demo/one", "demo/two"]);
    let want = Problem {
        file: file.clone(),
        object: Some("XBackend demo/bad".into()),
        field: Some("spec.port.port".into()),
        message: "must be 1..=65535".into(),
    };
    assert_eq!(catalog.problems, [want]);
    assert_eq!(
        rendered(&catalog),
        [format!(
            "{}: XBackend demo/bad: spec.port.port: must be 1..=65535",
            file.display()
        )]
    );
}

#[test]
fn unknown_field_names_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        xbackend("demo", "typo", "a.example.com", "80").replace("    hostname:", "    hostnme:");
    write(dir.path(), "x.yaml", &text);
    let catalog = load_dir(dir.path());
    assert!(catalog.backends.is_empty());
    let [problem] = catalog.problems.as_slice() else {
        panic!("{:?}", catalog.problems)
    };
    assert_eq!(problem.object.as_deref(), Some("XBackend demo/typo"));
    assert_eq!(
        problem.field.as_deref(),
        Some("spec.externalHostname.hostnme")
    );
    assert!(
        problem.message.contains("unknown field `hostnme`"),
        "{problem}"
    );
}

#[test]
fn bad_enum_value_names_its_field() {
    let base = xbackend("demo", "e", "a.example.com", "443");
    let cases = [
        (format!("{base}  protocol: TLS\n"), "spec.protocol", "`TLS`"),
        (
            format!("{base}  tls:\n    mode: Strict\n"),
            "spec.tls.mode",
            "`Strict`",
        ),
        (
            base.replace("type: ExternalHostname", "type: External"),
            "spec.type",
            "`External`",
        ),
    ];
    for (text, field, value) in cases {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "x.yaml", &text);
        let catalog = load_dir(dir.path());
        assert!(catalog.backends.is_empty());
        let [problem] = catalog.problems.as_slice() else {
            panic!("{:?}", catalog.problems)
        };
        assert_eq!(problem.field.as_deref(), Some(field));
        assert!(problem.message.contains("unknown variant"), "{problem}");
        assert!(problem.message.contains(value), "{problem}");
    }
}

#[test]
fn documents_without_identity_are_labelled_by_index() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}---\n{}---\n- a list\n---\nmetadata: {{name: x}}\n---\n{}",
        xbackend("demo", "ok", "ok.example.com", "80"),
        xbackend("demo", "", "n.example.com", "80"),
        xbackend("demo", "old", "o.example.com", "80").replace("v1alpha1", "v1"),
    );
    let file = write(dir.path(), "x.yaml", &text);
    let catalog = load_dir(dir.path());
    assert_eq!(names(&catalog), ["demo/ok"]);
    let f = file.display();
    assert_eq!(
        rendered(&catalog),
        [
            format!("{f}: document 2: metadata.name: required"),
            format!(
                "{f}: document 3: not a Kubernetes object (expected a mapping with apiVersion and kind)"
            ),
            format!("{f}: document 4: kind: required"),
            format!(
                "{f}: document 5: apiVersion: must be gateway.networking.x-k8s.io/v1alpha1 for XBackend"
            ),
        ]
    );
}

#[test]
fn missing_required_fields_are_named_at_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let base = xbackend("demo", "m", "a.example.com", "443");
    let text = [
        base.replace("  port:\n    port: 443\n", "  port:\n    name: https\n"),
        xbackend("demo", "n", "a.example.com", "443")
            .split("spec:")
            .next()
            .unwrap_or_default()
            .to_owned(),
        format!(
            "{}  tls: {{}}\n",
            xbackend("demo", "o", "a.example.com", "443")
        ),
    ]
    .join("---\n");
    let file = write(dir.path(), "x.yaml", &text);
    let catalog = load_dir(dir.path());
    let f = file.display();
    assert_eq!(
        rendered(&catalog),
        [
            format!("{f}: XBackend demo/m: spec.port.port: required"),
            format!("{f}: XBackend demo/n: spec: required"),
            format!("{f}: XBackend demo/o: spec.tls.mode: required"),
        ]
    );
}

#[test]
fn a_problem_is_always_one_line() {
    let problem = Problem {
        file: "dir/bad\nname.yaml".into(),
        object: Some("XBackend demo/x".into()),
        field: Some("spec.port.port".into()),
        message: "first line\nsecond line\u{1b}[31m".into(),
    };
    let line = problem.to_string();
    assert_eq!(
        line,
        "dir/bad\\nname.yaml: XBackend demo/x: spec.port.port: first line\\nsecond line\\u{1b}[31m"
    );
    assert_eq!(line.lines().count(), 1);
}

#[test]
fn every_problem_of_a_broken_tree_renders_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let multi_line_value = xbackend("demo", "q", "a.example.com", "443")
        .replace("hostname: a.example.com", "hostname: \"bad\\nhost\"");
    write(dir.path(), "a.yaml", &multi_line_value);
    write(dir.path(), "b.yaml", "spec: [unclosed\n  - x: {\n");
    write(dir.path(), "c.yaml", "- just\n- a list\n");
    let catalog = load_dir(dir.path());
    assert_eq!(catalog.problems.len(), 3, "{:?}", catalog.problems);
    for problem in &catalog.problems {
        let line = problem.to_string();
        assert_eq!(line.lines().count(), 1, "{line:?}");
        assert!(
            line.starts_with(&dir.path().display().to_string()),
            "{line}"
        );
    }
    assert!(names(&catalog).is_empty());
}
