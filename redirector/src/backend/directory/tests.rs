use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::backend::validate::{CaSource, TlsMode};

mod problems;
mod reload;

fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(&path, text).unwrap();
    path
}

fn load_dir(dir: &Path) -> Catalog {
    load(&[dir.to_path_buf()]).unwrap()
}

fn xbackend(namespace: &str, name: &str, hostname: &str, port: &str) -> String {
    format!(
        "apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata:
  name: {name}
  namespace: {namespace}
spec:
  type: ExternalHostname
  externalHostname:
    hostname: {hostname}
  port:
    port: {port}
"
    )
}

fn names(catalog: &Catalog) -> Vec<String> {
    catalog.backends.iter().map(|b| b.key.to_string()).collect()
}

fn rendered(catalog: &Catalog) -> Vec<String> {
    catalog.problems.iter().map(ToString::to_string).collect()
}

#[test]
fn valid_multi_document_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "# leading comment\n---\n{}---\n{}---\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: ignored}}\n---\n{}",
        xbackend("demo", "zeta", "z.example.com", "443"),
        xbackend("demo", "alpha", "a.example.com", "80"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ca, namespace: demo}\ndata: {ca.crt: PEM}\n",
    );
    write(dir.path(), "backends.yaml", &text);
    let catalog = load_dir(dir.path());
    assert_eq!(rendered(&catalog), Vec::<String>::new());
    assert_eq!(
        names(&catalog),
        ["demo/alpha", "demo/zeta"],
        "sorted by key"
    );
    assert_eq!(catalog.backends[0].port, 80);
    assert!(
        catalog
            .config_maps
            .contains_key(&ObjectKey::new("demo", "ca"))
    );
}

#[test]
fn secret_data_and_string_data() {
    let dir = tempfile::tempdir().unwrap();
    let text = "apiVersion: v1
kind: Secret
metadata: {name: client, namespace: demo}
type: kubernetes.io/tls
data:
  tls.crt: aGVsbG8=
  tls.key: AAEC/w==
  wrapped: |
    aGVs
    bG8=
stringData:
  tls.key: plain
  extra: text
---
apiVersion: v1
kind: Secret
metadata: {name: broken, namespace: demo}
data:
  tls.crt: '***'
";
    let file = write(dir.path(), "secrets.yaml", text);
    let catalog = load_dir(dir.path());
    let secret = &catalog.secrets[&ObjectKey::new("demo", "client")];
    assert_eq!(secret["tls.crt"], b"hello");
    assert_eq!(secret["tls.key"], b"plain", "stringData wins over data");
    assert_eq!(secret["wrapped"], b"hello");
    assert_eq!(secret["extra"], b"text");
    assert!(
        !catalog
            .secrets
            .contains_key(&ObjectKey::new("demo", "broken"))
    );
    let [problem] = catalog.problems.as_slice() else {
        panic!("{:?}", catalog.problems)
    };
    assert_eq!(problem.file, file);
    assert_eq!(problem.object.as_deref(), Some("Secret demo/broken"));
    assert_eq!(problem.field.as_deref(), Some("data.tls.crt"));
    assert!(problem.message.starts_with("invalid base64"), "{problem}");
}

#[test]
fn config_map_data_and_binary_data() {
    let dir = tempfile::tempdir().unwrap();
    let text = "apiVersion: v1
kind: ConfigMap
metadata: {name: ca}
data:
  ca.crt: |
    -----BEGIN CERTIFICATE-----
    MIIB
    -----END CERTIFICATE-----
binaryData:
  other.pem: aGVsbG8=
";
    write(dir.path(), "ca.yml", text);
    let catalog = load_dir(dir.path());
    assert_eq!(rendered(&catalog), Vec::<String>::new());
    let data = &catalog.config_maps[&ObjectKey::new("default", "ca")];
    assert!(data["ca.crt"].starts_with("-----BEGIN CERTIFICATE-----\nMIIB\n"));
    assert_eq!(data["other.pem"], "hello");
}

#[test]
fn duplicate_names_keep_the_first_and_name_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let first = write(
        dir.path(),
        "a.yaml",
        &xbackend("demo", "echo", "first.example.com", "80"),
    );
    let second = write(
        dir.path(),
        "b/c.yaml",
        &xbackend("demo", "echo", "second.example.com", "80"),
    );
    write(
        dir.path(),
        "d.yaml",
        &xbackend("other", "echo", "other.example.com", "80"),
    );
    let catalog = load_dir(dir.path());
    assert_eq!(names(&catalog), ["demo/echo", "other/echo"]);
    assert_eq!(catalog.backends[0].hostname, "first.example.com");
    let [problem] = catalog.problems.as_slice() else {
        panic!("{:?}", catalog.problems)
    };
    assert_eq!(problem.file, second);
    assert_eq!(problem.object.as_deref(), Some("XBackend demo/echo"));
    assert!(
        problem.message.contains(&first.display().to_string()),
        "{problem}"
    );
    assert!(problem.message.contains("document 1"), "{problem}");
}

#[test]
fn hidden_and_temporary_files_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = "this: [is not: valid yaml";
    write(
        dir.path(),
        "ok.yaml",
        &xbackend("demo", "ok", "ok.example.com", "80"),
    );
    for name in [
        ".hidden.yaml",
        ".ok.yaml.swp",
        "ok.yaml~",
        "#ok.yaml#",
        "notes.txt",
        ".git/x.yaml",
        "..data/ok.yaml",
        "README.md",
    ] {
        write(dir.path(), name, garbage);
    }
    let catalog = load_dir(dir.path());
    assert_eq!(rendered(&catalog), Vec::<String>::new());
    assert_eq!(names(&catalog), ["demo/ok"]);
}

#[test]
fn yaml_syntax_error_rejects_only_that_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad_text = xbackend("demo", "before", "a.example.com", "80") + "---\nspec: [unclosed\n";
    let bad = write(dir.path(), "bad.yaml", &bad_text);
    write(
        dir.path(),
        "good.yaml",
        &xbackend("demo", "good", "g.example.com", "80"),
    );
    let catalog = load_dir(dir.path());
    assert_eq!(names(&catalog), ["demo/good"]);
    let [problem] = catalog.problems.as_slice() else {
        panic!("{:?}", catalog.problems)
    };
    assert_eq!(
        (&problem.file, &problem.object, &problem.field),
        (&bad, &None, &None)
    );
    assert!(problem.message.starts_with("invalid YAML"), "{problem}");
}

#[test]
fn list_items_are_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let item = xbackend("demo", "listed", "l.example.com", "80").replace('\n', "\n    ");
    write(
        dir.path(),
        "list.yaml",
        &format!("apiVersion: v1\nkind: List\nitems:\n  - {item}\n"),
    );
    let catalog = load_dir(dir.path());
    assert_eq!(rendered(&catalog), Vec::<String>::new());
    assert_eq!(names(&catalog), ["demo/listed"]);
}

#[test]
fn recursive_sorted_and_file_roots() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "b/deep/x.yaml",
        &xbackend("demo", "deep", "d.example.com", "0"),
    );
    write(
        dir.path(),
        "a.yaml",
        &xbackend("demo", "top", "t.example.com", "0"),
    );
    let single = write(
        dir.path(),
        "c/single.txt",
        &xbackend("demo", "single", "s.example.com", "80"),
    );
    let catalog = load_dir(dir.path());
    let objects: Vec<_> = catalog
        .problems
        .iter()
        .filter_map(|p| p.object.clone())
        .collect();
    assert_eq!(
        objects,
        ["XBackend demo/top", "XBackend demo/deep"],
        "depth-first in name order"
    );
    // A file named explicitly is read whatever its extension; overlapping roots load once.
    let catalog = load(&[single.clone(), single, dir.path().join("c")]).unwrap();
    assert_eq!(names(&catalog), ["demo/single"]);
    assert!(catalog.problems.is_empty(), "{:?}", catalog.problems);
}

#[cfg(unix)]
#[test]
fn symlink_loop_terminates() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "sub/a.yaml",
        &xbackend("demo", "a", "a.example.com", "80"),
    );
    std::os::unix::fs::symlink(dir.path(), dir.path().join("sub/loop")).unwrap();
    let catalog = load_dir(dir.path());
    assert_eq!(names(&catalog), ["demo/a"]);
    assert!(catalog.problems.is_empty(), "{:?}", catalog.problems);
}

#[test]
fn missing_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let err = load(std::slice::from_ref(&missing)).unwrap_err();
    assert!(matches!(&err, DirectoryError::Unreadable { path, .. } if *path == missing));
    assert!(
        err.to_string()
            .starts_with(&format!("{}: cannot read", missing.display()))
    );
}

#[test]
fn shipped_examples_are_valid() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let catalog = load_dir(&examples);
    assert_eq!(rendered(&catalog), Vec::<String>::new());
    let echo = catalog
        .backends
        .iter()
        .find(|b| b.key == ObjectKey::new("demo", "echo"));
    let echo = echo.expect("demo/echo");
    assert_eq!(
        (echo.hostname.as_str(), echo.port, echo.tls.is_none()),
        ("echo.redirector.test", 8080, true)
    );
    let api = catalog
        .backends
        .iter()
        .find(|b| b.hostname == "api.redirector.test");
    let tls = api
        .and_then(|b| b.tls.clone())
        .expect("api.redirector.test with tls");
    assert_eq!(tls.mode, TlsMode::ServerOnly);
    let CaSource::Refs(refs) = &tls.ca else {
        panic!("CA refs expected: {:?}", tls.ca)
    };
    for r in refs {
        let data = catalog
            .config_maps
            .get(&r.key)
            .expect("referenced ConfigMap is shipped");
        assert!(
            data.get("ca.crt")
                .is_some_and(|pem| pem.contains("BEGIN CERTIFICATE"))
        );
    }
}
