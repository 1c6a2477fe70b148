//! The processes and files the benchmark sets up around the agent: the test CA and
//! certificate, nginx (the external HTTPS service), HAProxy (the reference proxy) and the
//! DNAT that sends the pod to it.
//!
//! Each server is a guard: dropped, it stops its process by pid (SIGTERM, then SIGKILL),
//! so an error anywhere in the benchmark leaves nothing running.

use super::tools::NatTool;
use anyhow::{Context, Result, bail};
use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use xtask::netlab::{ChildGuard, Netns, Stream};

/// The name the service is declared and served under.
pub const HOSTNAME: &str = "api.redirector.test";

/// How long nginx and HAProxy may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(15);

const NGINX_TEMPLATE: &str = include_str!("../../../../bench/nginx.conf.tmpl");
const HAPROXY_TEMPLATE: &str = include_str!("../../../../bench/haproxy.cfg.tmpl");
const BACKEND_TEMPLATE: &str = include_str!("../../../../bench/backend.yaml.tmpl");

/// The bench CA and the server certificate, as PEM.
pub struct Pki {
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
}

impl Pki {
    /// A fresh CA and an ECDSA P-256 server certificate for [`HOSTNAME`] signed by it.
    pub fn generate() -> Result<Pki> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "redirector bench CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);

        let mut server = CertificateParams::new(vec![HOSTNAME.to_owned()])?;
        server.distinguished_name.push(DnType::CommonName, HOSTNAME);
        server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate()?;
        let server_cert = server.signed_by(&server_key, &issuer)?;
        Ok(Pki {
            ca_pem: ca_cert.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
        })
    }

    /// Writes `ca.crt`, `server.crt` and `server.key` (0600) into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write(&dir.join("ca.crt"), &self.ca_pem, 0o644)?;
        write(&dir.join("server.crt"), &self.server_cert_pem, 0o644)?;
        write(&dir.join("server.key"), &self.server_key_pem, 0o600)
    }
}

/// The Backend directory of the redirector case: the XBackend and its CA ConfigMap.
pub fn write_backend_dir(dir: &Path, ca_pem: &str) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let indented: String = ca_pem.lines().map(|line| format!("    {line}\n")).collect();
    let yaml = BACKEND_TEMPLATE.replace("{{CA_PEM}}\n", &indented);
    write(&dir.join("backend.yaml"), &yaml, 0o644)
}

/// nginx in the ext namespace; stopped on drop.
pub struct Nginx {
    child: ChildGuard,
}

impl Nginx {
    /// Renders the config into `dir` (which holds the certificates), writes the bodies,
    /// starts nginx in `ns` and waits until `listen` accepts connections.
    pub fn start(nginx: &Path, ns: &Netns, dir: &Path, listen: SocketAddr) -> Result<Nginx> {
        let www = dir.join("www");
        std::fs::create_dir_all(&www)?;
        // The worker runs as nobody: it must be able to reach the bodies.
        for path in [dir, www.as_path()] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
        }
        write(&www.join("1k"), &"x".repeat(1024), 0o644)?;
        write(&www.join("1m"), &"y".repeat(1024 * 1024), 0o644)?;
        let config = NGINX_TEMPLATE
            .replace("{{DIR}}", &dir.display().to_string())
            .replace("{{LISTEN}}", &listen.to_string())
            .replace("{{TEMP_PATHS}}", &temp_paths(nginx, dir)?);
        let conf = dir.join("nginx.conf");
        write(&conf, &config, 0o644)?;
        let mut command = ns.exec(nginx);
        command
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.join("nginx-error.log"))
            .args(["-g", "daemon off;"]);
        let mut child = ChildGuard::spawn_watching("nginx", &mut command, Stream::Stderr)?;
        wait_listening(&mut child, ns, listen).with_context(|| {
            format!(
                "nginx did not start; its error log:\n{}",
                std::fs::read_to_string(dir.join("nginx-error.log")).unwrap_or_default()
            )
        })?;
        Ok(Nginx { child })
    }

    /// The master and its workers (CPU is spent in the workers).
    pub fn pids(&self) -> Vec<u32> {
        let master = self.child.id();
        let mut pids = vec![master];
        pids.extend(children(master));
        pids
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: fast shutdown, the master stops its workers. SIGKILL of the master alone
        // would orphan them (and keep the ext namespace alive), so kill those by pid too.
        let workers = children(self.child.id());
        stop(&mut self.child, "nginx");
        for pid in workers {
            if proc_comm(pid).as_deref() == Some("nginx") {
                kill(pid, libc::SIGKILL);
            }
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
    let mut text = format!("    client_body_temp_path {}/tmp/body;\n", dir.display());
    for module in ["proxy", "fastcgi", "uwsgi", "scgi"] {
        if !build.contains(&format!("--without-http_{module}_module")) {
            text.push_str(&format!(
                "    {module}_temp_path {}/tmp/{module};\n",
                dir.display()
            ));
        }
    }
    std::fs::create_dir_all(dir.join("tmp"))?;
    Ok(text)
}

/// HAProxy in the node namespace; stopped on drop.
pub struct Haproxy {
    child: ChildGuard,
}

impl Haproxy {
    /// Renders the config into `dir` (which holds `ca.crt`), checks it, starts HAProxy in
    /// the foreground in `ns` and waits until `listen` accepts connections.
    pub fn start(
        haproxy: &Path,
        ns: &Netns,
        dir: &Path,
        listen: SocketAddr,
        upstream: SocketAddr,
    ) -> Result<Haproxy> {
        let config = HAPROXY_TEMPLATE
            .replace("{{DIR}}", &dir.display().to_string())
            .replace("{{LISTEN}}", &listen.to_string())
            .replace("{{UPSTREAM}}", &upstream.to_string());
        let cfg = dir.join("haproxy.cfg");
        write(&cfg, &config, 0o644)?;
        crate::tasks::check_status(
            Command::new(haproxy)
                .arg("-c")
                .arg("-q")
                .arg("-f")
                .arg(&cfg),
        )
        .context("HAProxy rejects its config")?;
        let mut command = ns.exec(haproxy);
        command.arg("-db").arg("-f").arg(&cfg);
        let mut child = ChildGuard::spawn_watching("haproxy", &mut command, Stream::Stderr)?;
        wait_listening(&mut child, ns, listen).context("HAProxy did not start")?;
        Ok(Haproxy { child })
    }

    /// `ip netns exec` execs, so the child is HAProxy itself (one process, one thread).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        stop(&mut self.child, "haproxy");
    }
}

/// SIGTERM, a few seconds to exit, then the guard's SIGKILL.
fn stop(child: &mut ChildGuard, label: &str) {
    if child.signal(libc::SIGTERM).is_ok()
        && !matches!(child.wait_timeout(Duration::from_secs(5)), Ok(Some(_)))
    {
        eprintln!("bench: {label} ignored SIGTERM for 5 s; killing it");
    }
}

/// Polls a TCP connect to `addr` from inside `ns` until it succeeds: the readiness signal
/// of a server that prints nothing when it is ready. Fails at once if the child exits.
fn wait_listening(child: &mut ChildGuard, ns: &Netns, addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = child.wait_timeout(Duration::ZERO)? {
            let said: Vec<String> = child
                .lines(Stream::Stderr)
                .into_iter()
                .chain(child.lines(Stream::Stdout))
                .filter(|l| !l.contains("[NOTICE]"))
                .collect();
            bail!("it exited ({status}): {}", said.join(" / "));
        }
        match connect_in_netns(ns, addr, Duration::from_millis(200)) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("{addr} not accepting after {START_TIMEOUT:?}")));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// One TCP connect to `addr` from a thread that has joined `ns` (the thread ends with it,
/// so this process never leaves its own namespace).
pub fn connect_in_netns(ns: &Netns, addr: SocketAddr, timeout: Duration) -> Result<()> {
    let path = Path::new("/run/netns").join(ns.name());
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> Result<()> {
                let file =
                    File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
                // SAFETY: setns(2) on a valid namespace fd; it only affects this thread.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    bail!(
                        "setns {}: {}",
                        path.display(),
                        std::io::Error::last_os_error()
                    );
                }
                TcpStream::connect_timeout(&addr, timeout)
                    .with_context(|| format!("connect {addr} in {}", ns.name()))?;
                Ok(())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the netns connect thread panicked"))?
    })
}

/// The DNAT that sends the pod's connects to `from` to HAProxy at `to`, switched on only
/// for the HAProxy case.
///
/// The nat hook is installed once for the whole run (a jump to an empty chain), so
/// connection tracking is on in the pod namespace for every case, as on any Kubernetes
/// node; switching the case on and off only adds and flushes the one rule.
pub struct Dnat {
    tool: NatTool,
    from: SocketAddr,
    to: SocketAddr,
    netns: String,
}

const CHAIN: &str = "RDBENCH";
const NFT_TABLE: &str = "rdbench";

impl Dnat {
    pub fn install(tool: &NatTool, ns: &Netns, from: SocketAddr, to: SocketAddr) -> Result<Dnat> {
        let dnat = Dnat {
            tool: tool.clone(),
            from,
            to,
            netns: ns.name().to_owned(),
        };
        match &dnat.tool {
            NatTool::Iptables(_) => {
                dnat.run(&["-t", "nat", "-N", CHAIN])?;
                dnat.run(&["-t", "nat", "-A", "OUTPUT", "-j", CHAIN])?;
            }
            NatTool::Nft(_) => {
                dnat.run(&["add", "table", "ip", NFT_TABLE])?;
                dnat.run(&[
                    "add", "chain", "ip", NFT_TABLE, "output", "{", "type", "nat", "hook",
                    "output", "priority", "-100", ";", "}",
                ])?;
            }
        }
        Ok(dnat)
    }

    pub fn enable(&self) -> Result<()> {
        let (from_ip, from_port) = (self.from.ip().to_string(), self.from.port().to_string());
        let to = self.to.to_string();
        match &self.tool {
            NatTool::Iptables(_) => self.run(&[
                "-t",
                "nat",
                "-A",
                CHAIN,
                "-p",
                "tcp",
                "-d",
                &from_ip,
                "--dport",
                &from_port,
                "-j",
                "DNAT",
                "--to-destination",
                &to,
            ]),
            NatTool::Nft(_) => self.run(&[
                "add", "rule", "ip", NFT_TABLE, "output", "ip", "daddr", &from_ip, "tcp", "dport",
                &from_port, "dnat", "to", &to,
            ]),
        }
    }

    pub fn disable(&self) -> Result<()> {
        match &self.tool {
            NatTool::Iptables(_) => self.run(&["-t", "nat", "-F", CHAIN]),
            NatTool::Nft(_) => self.run(&["flush", "chain", "ip", NFT_TABLE, "output"]),
        }
    }

    fn run(&self, args: &[&str]) -> Result<()> {
        let program = match &self.tool {
            NatTool::Iptables(path) | NatTool::Nft(path) => path,
        };
        let out = Command::new("ip")
            .args(["netns", "exec", &self.netns])
            .arg(program)
            .args(args)
            .output()
            .with_context(|| format!("cannot run {}", program.display()))?;
        if !out.status.success() {
            bail!(
                "{} {} in netns {} failed: {}",
                program.display(),
                args.join(" "),
                self.netns,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

/// Sets sysctls inside `ns` (`key=value` pairs).
pub fn sysctl(ns: &Netns, settings: &[&str]) -> Result<()> {
    crate::tasks::check_status(ns.exec("sysctl").arg("-q").arg("-w").args(settings))
}

/// utime + stime of a process (all its threads), in seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let fields = stat_fields(pid)?;
    let ticks: u64 = [11, 12]
        .iter()
        .map(|&i| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum();
    // SAFETY: sysconf(3) has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Ok(ticks as f64 / hz)
}

/// The fields of /proc/<pid>/stat after the command name: [0] is the state (field 3 of
/// proc(5)), [1] the parent pid, [11] utime, [12] stime.
fn stat_fields(pid: u32) -> Result<Vec<String>> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    // The command name is in parentheses and may itself contain spaces or parentheses.
    let rest = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .with_context(|| format!("unexpected {path}: {text}"))?;
    Ok(rest.split_whitespace().map(str::to_owned).collect())
}

/// The pids whose parent is `parent`.
fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            stat_fields(pid)
                .ok()
                .and_then(|f| f.get(1)?.parse::<u32>().ok())
                == Some(parent)
        })
        .collect()
}

/// `/proc/<pid>/comm`.
pub fn proc_comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// The pids of `redirector` processes whose command line contains `needle` (what
/// `pgrep -f` does, without depending on procps).
pub fn find_redirector(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| proc_comm(pid).as_deref() == Some("redirector"))
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                String::from_utf8_lossy(&cmdline)
                    .split('\0')
                    .any(|arg| arg.contains(needle))
            })
        })
        .collect()
}

/// Number of threads of a process (for the report).
pub fn threads(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))?
        .trim()
        .parse()
        .ok()
}

fn kill(pid: u32, signal: i32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(pid, signal) };
    }
}

fn write(path: &Path, content: &str, mode: u32) -> Result<()> {
    std::fs::write(path, content).with_context(|| format!("cannot write {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", path.display()))
}
