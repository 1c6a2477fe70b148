//! The upstreams in the ext namespace: nginx (HTTP in plaintext and over TLS, sized for
//! 10,000+ connections) and `loadgen serve` (a TCP echo and a sink that never reads). Each is a
//! guard: its process is killed on drop.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use xtask::netlab::{ChildGuard, Netns, Stream};

use super::probe::connect_in;

/// How long a server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// The large file that clients ask for and never read (sparse: costs no disk).
pub const BIG_FILE: &str = "/files/big";
const BIG_FILE_BYTES: u64 = 1 << 30;

/// nginx as one process (`master_process off`: nothing to orphan when it is killed),
/// answering `/` with a short 200 and serving `/files/`.
pub struct Nginx {
    child: ChildGuard,
}

impl Nginx {
    /// `dir` holds `server.crt` and `server.key` for `listen_tls`.
    pub fn start(
        bin: &Path,
        ns: &Netns,
        dir: &Path,
        listen: SocketAddr,
        listen_tls: SocketAddr,
    ) -> Result<Nginx> {
        std::fs::create_dir_all(dir.join("www/files"))?;
        let big = File::create(dir.join("www/files/big")).context("creating the big file")?;
        big.set_len(BIG_FILE_BYTES).context("sizing the big file")?;
        let d = dir.display();
        // One worker with room for every client connection's upstream twin and more;
        // keep-alive longer than any run, so nginx never closes a pooled connection.
        let config = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\n\
             worker_rlimit_nofile 65536;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 32768; multi_accept on; }}\n\
             http {{\n    access_log off;\n    default_type text/plain;\n    \
             keepalive_timeout 75s;\n    keepalive_requests 1000000;\n    sendfile on;\n\
             {temp}    root {d}/www;\n    server {{\n        listen {listen} backlog=8192;\n        \
             location = / {{ return 200 \"ok\\n\"; }}\n        location /files/ {{ }}\n    }}\n    \
             server {{\n        listen {listen_tls} ssl backlog=8192;\n        \
             ssl_certificate {d}/server.crt;\n        ssl_certificate_key {d}/server.key;\n        \
             location /files/ {{ }}\n    }}\n}}\n",
            temp = temp_paths(bin, dir)?,
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config)
            .with_context(|| format!("cannot write {}", conf.display()))?;
        let mut command = ns.exec(bin);
        command.arg("-p").arg(dir).arg("-c").arg(&conf);
        command.arg("-e").arg(dir.join("error.log"));
        let mut child = ChildGuard::spawn_watching("nginx", &mut command, Stream::Stderr)?;
        wait_listening(&mut child, ns, listen).with_context(|| {
            format!(
                "nginx did not start; its error log:\n{}",
                std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
            )
        })?;
        Ok(Nginx { child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// `loadgen serve`: echo on one address, sink on another.
pub struct TcpServers {
    child: ChildGuard,
}

impl TcpServers {
    pub fn start(loadgen: &Path, ns: &Netns, echo: SocketAddr, sink: SocketAddr) -> Result<Self> {
        let mut command = ns.exec(loadgen);
        command.arg("serve");
        command.arg("--echo").arg(echo.to_string());
        command.arg("--sink").arg(sink.to_string());
        let mut child = ChildGuard::spawn("servers", &mut command)?;
        for _ in 0..2 {
            child.wait_for_line("\"listening\"", START_TIMEOUT)?;
        }
        Ok(TcpServers { child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The nginx binary, installing nginx (Debian) if there is none.
pub fn nginx_bin() -> Result<PathBuf> {
    use crate::tasks::packages;
    packages::install_missing("bench-load", || {
        packages::nginx_package().into_iter().collect()
    })?;
    packages::which("nginx").context("nginx is not on PATH after installing it")
}

/// Polls a connect to `addr` from inside `ns` until it succeeds; fails at once if the
/// server exits.
fn wait_listening(child: &mut ChildGuard, ns: &Netns, addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = child.wait_timeout(Duration::ZERO)? {
            bail!("it exited ({status})");
        }
        match connect_in(ns, addr, Duration::from_millis(200)) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("{addr} not accepting after {START_TIMEOUT:?}")));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The `*_temp_path` directives that keep nginx out of /var/lib/nginx: one per module
/// this build has (a directive of a module built out is a config error).
fn temp_paths(nginx: &Path, dir: &Path) -> Result<String> {
    let out = Command::new(nginx)
        .arg("-V")
        .output()
        .with_context(|| format!("cannot run {} -V", nginx.display()))?;
    let build = String::from_utf8_lossy(&out.stderr);
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    let mut text = format!("    client_body_temp_path {}/body;\n", tmp.display());
    for module in ["proxy", "fastcgi", "uwsgi", "scgi"] {
        if !build.contains(&format!("--without-http_{module}_module")) {
            text.push_str(&format!(
                "    {module}_temp_path {}/{module};\n",
                tmp.display()
            ));
        }
    }
    Ok(text)
}
