//! curl as the workload: run in the pod (its network namespace and cgroup, so its
//! connects meet the agent's hooks), with what it received and its `--write-out` JSON.

use std::{path::PathBuf, time::Duration};

use serde_json::Value;
use xtask::netlab::{Cgroup, ChildGuard, Topology, in_cgroup_in_netns};

/// How long one curl run may take before the test fails.
const CURL_TIMEOUT: Duration = Duration::from_secs(60);

/// The curl binary, or a test failure that says how to get it.
pub fn curl_bin() -> PathBuf {
    ["/usr/bin/curl", "/usr/local/bin/curl", "/bin/curl"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect(
            "curl is not installed: the HTTP tests use it as the workload \
             (`cargo xtask test` installs it: apt-get install curl)",
        )
}

/// What one curl run got.
#[derive(Debug)]
pub struct Response {
    /// curl's exit code (0: a response was received, whatever its status).
    pub exit: i32,
    /// `--write-out '%{json}'`: `http_code`, `http_version`, `size_download`, ...
    pub json: Value,
    pub headers: String,
    pub body: Vec<u8>,
    pub stderr: String,
}

impl Response {
    /// The status code (0 if none was received).
    pub fn code(&self) -> u64 {
        self.json["http_code"].as_u64().unwrap_or(0)
    }

    /// The HTTP version curl spoke to the proxy (`1.1`, `2`).
    pub fn http_version(&self) -> &str {
        self.json["http_version"].as_str().unwrap_or_default()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The value of response header `name` (case-insensitive), if it was sent.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    }

    /// Fails the test unless the response has status `code`.
    #[track_caller]
    pub fn assert_status(&self, code: u64) -> &Response {
        assert_eq!(
            self.code(),
            code,
            "curl exit {}, stderr {:?}, headers:\n{}\nbody: {:?}",
            self.exit,
            self.stderr,
            self.headers,
            self.text()
        );
        self
    }
}

/// A curl started in the pod and not waited for yet.
pub struct Running {
    child: ChildGuard,
    files: tempfile::TempDir,
}

impl Running {
    /// Waits for curl to exit and reads what it got.
    pub fn finish(mut self) -> Response {
        let done = self.child.finish(CURL_TIMEOUT).expect("curl finished");
        let read = |name: &str| std::fs::read(self.files.path().join(name)).unwrap_or_default();
        let out = done.stdout.join("\n");
        Response {
            exit: done.status.code().unwrap_or(-1),
            json: serde_json::from_str(&out).unwrap_or(Value::Null),
            headers: String::from_utf8_lossy(&read("headers")).into_owned(),
            body: read("body"),
            stderr: done.stderr.join("\n"),
        }
    }
}

/// Starts `curl ARGS` in the pod over IPv4, the body and headers going to files.
pub fn spawn(topo: &Topology, args: &[&str]) -> Running {
    spawn_keeping(topo, args, true)
}

/// [`spawn`], the body thrown away (`-o /dev/null`) unless `keep_body`.
pub fn spawn_keeping(topo: &Topology, args: &[&str], keep_body: bool) -> Running {
    spawn_from(topo, &topo.pod_cgroup, args, keep_body)
}

/// [`spawn_keeping`] from `cgroup` (one below the pod's, say) in the pod's netns.
fn spawn_from(topo: &Topology, cgroup: &Cgroup, args: &[&str], keep_body: bool) -> Running {
    let files = tempfile::tempdir().expect("curl files");
    let mut full: Vec<String> = ["-sS", "-4", "--noproxy", "*", "--max-time", "50"]
        .map(str::to_owned)
        .to_vec();
    let body = if keep_body {
        path(&files, "body")
    } else {
        "/dev/null".to_owned()
    };
    full.extend(["-o".into(), body, "-D".into()]);
    full.extend([path(&files, "headers"), "-w".into(), "%{json}".into()]);
    full.extend(args.iter().map(|a| (*a).to_owned()));
    let mut command = in_cgroup_in_netns(cgroup, &topo.pod, curl_bin(), &full);
    let child = ChildGuard::spawn("curl", &mut command).expect("start curl");
    Running { child, files }
}

/// Runs `curl ARGS` in the pod over IPv4 to its end.
pub fn curl(topo: &Topology, args: &[&str]) -> Response {
    spawn(topo, args).finish()
}

/// [`curl`] from `cgroup` instead of the pod's cgroup.
pub fn curl_from(topo: &Topology, cgroup: &Cgroup, args: &[&str]) -> Response {
    spawn_from(topo, cgroup, args, true).finish()
}

/// Starts `curl -sN ARGS` in the pod with the body on stdout (for streams, read line by
/// line with [`ChildGuard::wait_for_line`]) and the response headers on stderr.
pub fn stream(topo: &Topology, args: &[&str]) -> ChildGuard {
    let mut full = vec!["-sSN", "-4", "--noproxy", "*", "--max-time", "50"];
    full.extend(["-D", "/dev/stderr"]);
    full.extend_from_slice(args);
    let mut command = topo.spawn_in_pod(curl_bin(), &full);
    ChildGuard::spawn("curl-stream", &mut command).expect("start curl")
}

fn path(dir: &tempfile::TempDir, name: &str) -> String {
    dir.path().join(name).display().to_string()
}
