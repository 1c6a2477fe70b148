//! nginx as the external HTTP server of the HTTP tests: one process (`master_process
//! off`) in a namespace, its configuration, logs, certificates and files in a temporary
//! directory of its own, and an access log of JSON lines that says, per request, which
//! connection it came on, with which SNI, ALPN, Host and HTTP version (and the request's
//! `Upgrade`, `HTTP2-Settings` and `Connection` headers).

use std::{
    fs::File,
    net::{Ipv4Addr, SocketAddr, TcpStream},
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde_json::Value;
use xtask::netlab::{ChildGuard, Netns, Stream};

use super::tls::Leaf;

/// One `server {}` block.
#[derive(Clone, Default)]
pub struct Site<'a> {
    pub port: u16,
    /// `server_name`; empty: `_`.
    pub names: Vec<&'a str>,
    /// `listen .. ssl` with this certificate.
    pub tls: Option<&'a Leaf>,
    /// HTTP/2: offered by ALPN with `tls`, else a cleartext HTTP/2 (prior knowledge)
    /// listener.
    pub http2: bool,
    /// More directives for the block (`keepalive_timeout 1s;`).
    pub extra: &'a str,
}

impl<'a> Site<'a> {
    /// TLS on `port` for `name`, HTTP/2 and HTTP/1.1 offered by ALPN.
    pub fn tls(port: u16, name: &'a str, leaf: &'a Leaf) -> Site<'a> {
        Site {
            port,
            names: vec![name],
            tls: Some(leaf),
            http2: true,
            extra: "",
        }
    }

    /// Cleartext HTTP/1.1 on `port`.
    pub fn plain(port: u16) -> Site<'a> {
        Site {
            port,
            ..Site::default()
        }
    }

    /// Cleartext HTTP/2 with prior knowledge (h2c) on `port`.
    pub fn h2c(port: u16) -> Site<'a> {
        Site {
            port,
            http2: true,
            ..Site::default()
        }
    }
}

/// What every server block serves: `/` answers who it was asked for, `/files/NAME`
/// serves the files of [`Nginx::file`], `/paced/NAME` too at 128 KiB/s, and a `PUT
/// /upload/NAME` stores the body (read whole before the 201 answer).
const LOCATIONS: &str = r#"
        location / {
            return 200 "host=$host sni=$ssl_server_name protocol=$server_protocol\n";
        }
        location /files/ { }
        location /paced/ {
            alias {{DIR}}/www/files/;
            limit_rate 128k;
        }
        location /upload/ {
            dav_methods PUT;
            create_full_put_path on;
        }
"#;

const LOG_FORMAT: &str = r#"escape=json '{"connection":"$connection","requests":"$connection_requests","remote":"$remote_addr","port":"$server_port","sni":"$ssl_server_name","alpn":"$ssl_alpn_protocol","host":"$host","http_host":"$http_host","protocol":"$server_protocol","method":"$request_method","uri":"$request_uri","status":"$status","request_length":"$request_length","bytes_sent":"$bytes_sent","msec":"$msec","request_time":"$request_time","upgrade":"$http_upgrade","http2_settings":"$http_http2_settings","connection_header":"$http_connection"}'"#;

/// A running nginx; killed on drop (one process: no worker to orphan).
pub struct Nginx {
    child: ChildGuard,
    dir: tempfile::TempDir,
}

/// The nginx binary, or a test failure that says how to get it.
pub fn nginx_bin() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect(
            "nginx is not installed: the HTTP tests need it as their external server \
             (`cargo xtask test` installs it: apt-get install nginx-light, or nginx)",
        )
}

impl Nginx {
    /// Starts nginx in `netns` with these server blocks and waits until every port
    /// accepts connections.
    pub fn start(netns: &Netns, sites: &[Site<'_>]) -> Nginx {
        let bin = nginx_bin();
        let dir = tempfile::tempdir().expect("nginx dir");
        let path = dir.path().to_owned();
        for sub in ["www/files", "www/upload", "tmp"] {
            std::fs::create_dir_all(path.join(sub)).expect("nginx dirs");
        }
        let mut servers = String::new();
        for (i, site) in sites.iter().enumerate() {
            servers.push_str(&server_block(&path, i, site));
        }
        let config = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {dir}/nginx.pid;\n\
             error_log {dir}/error.log info;\nevents {{ worker_connections 1024; }}\n\
             http {{\n    log_format t {LOG_FORMAT};\n    access_log {dir}/access.log t;\n    \
             default_type text/plain;\n    keepalive_timeout 60s;\n    \
             client_max_body_size 0;\n    server_names_hash_bucket_size 128;\n    \
             client_body_temp_path {dir}/tmp/body;\n    proxy_temp_path {dir}/tmp/proxy;\n    \
             fastcgi_temp_path {dir}/tmp/fastcgi;\n    uwsgi_temp_path {dir}/tmp/uwsgi;\n    \
             scgi_temp_path {dir}/tmp/scgi;\n    root {dir}/www;\n{servers}}}\n",
            dir = path.display()
        );
        let conf = path.join("nginx.conf");
        std::fs::write(&conf, config).expect("nginx.conf");
        std::fs::write(path.join("access.log"), "").expect("access.log");
        let mut command = netns.exec(&bin);
        command.arg("-p").arg(&path).arg("-c").arg(&conf);
        command.arg("-e").arg(path.join("error.log"));
        let child =
            ChildGuard::spawn_watching("nginx", &mut command, Stream::Stderr).expect("start nginx");
        let mut nginx = Nginx { child, dir };
        for site in sites {
            nginx.wait_listening(netns, site.port);
        }
        nginx
    }

    fn wait_listening(&mut self, netns: &Netns, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        loop {
            if let Ok(Some(status)) = self.child.wait_timeout(Duration::ZERO) {
                panic!("nginx exited ({status}); error log:\n{}", self.error_log());
            }
            if connect_in_netns(netns, addr) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nginx does not accept on port {port} after 10 s; error log:\n{}",
                self.error_log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir().join("error.log")).unwrap_or_default()
    }

    /// A file of `size` zero bytes (sparse) served as `/files/NAME` and `/paced/NAME`.
    pub fn file(&self, name: &str, size: u64) {
        let file = File::create(self.dir().join("www/files").join(name)).expect("create file");
        file.set_len(size).expect("size the file");
    }

    /// Where a `PUT /upload/NAME` is stored.
    pub fn uploaded(&self, name: &str) -> PathBuf {
        self.dir().join("www/upload").join(name)
    }

    /// The access log so far: one JSON object per request nginx has finished.
    pub fn requests(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir().join("access.log")).unwrap_or_default();
        text.lines()
            .map(|line| serde_json::from_str(line).expect("access log line is JSON"))
            .collect()
    }

    /// Waits (5 s at most) until the access log has at least `count` requests; returns
    /// them all (nginx logs a request after its response, so a client may finish first).
    pub fn wait_for_requests(&self, count: usize) -> Vec<Value> {
        super::poll(|| self.requests(), |requests| requests.len() >= count)
    }

    /// The distinct upstream connections (`$connection`) the logged requests came on.
    pub fn connections(&self) -> std::collections::BTreeSet<String> {
        (self.requests().iter())
            .map(|r| field(r, "connection").to_owned())
            .collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // A failing test shows what nginx said (its files go with the directory).
        if std::thread::panicking() {
            eprintln!("nginx error log:\n{}", self.error_log());
        }
    }
}

/// A string field of an access log line.
pub fn field<'v>(request: &'v Value, name: &str) -> &'v str {
    request[name].as_str().unwrap_or_default()
}

fn server_block(dir: &Path, index: usize, site: &Site<'_>) -> String {
    let mut params = String::new();
    if site.tls.is_some() {
        params.push_str(" ssl");
    }
    if site.http2 {
        params.push_str(" http2");
    }
    let names = if site.names.is_empty() {
        "_".to_owned()
    } else {
        site.names.join(" ")
    };
    let port = site.port;
    let mut block = format!(
        "    server {{\n        listen {port}{params};\n        listen [::]:{port}{params};\n        \
         server_name {names};\n"
    );
    if let Some(leaf) = site.tls {
        let cert = dir.join(format!("site{index}.crt"));
        let key = dir.join(format!("site{index}.key"));
        std::fs::write(&cert, &leaf.cert_pem).expect("site certificate");
        std::fs::write(&key, &leaf.key_pem).expect("site key");
        block.push_str(&format!(
            "        ssl_certificate {};\n        ssl_certificate_key {};\n        \
             ssl_protocols TLSv1.2 TLSv1.3;\n",
            cert.display(),
            key.display()
        ));
    }
    if !site.extra.is_empty() {
        block.push_str(&format!("        {}\n", site.extra));
    }
    block.push_str(&LOCATIONS.replace("{{DIR}}", &dir.display().to_string()));
    block.push_str("    }\n");
    block
}

/// Whether a TCP connect to `addr` from a thread that joined `netns` succeeds (the
/// thread ends with it, so this process never leaves its own namespace).
pub fn connect_in_netns(netns: &Netns, addr: SocketAddr) -> bool {
    let path = Path::new("/run/netns").join(netns.name());
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let Ok(file) = File::open(&path) else {
                    return false;
                };
                // SAFETY: setns(2) on a valid namespace fd; it only affects this thread.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return false;
                }
                TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            })
            .join()
            .unwrap_or(false)
    })
}
