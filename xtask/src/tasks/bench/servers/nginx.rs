//! nginx, the external HTTPS service (and the same bodies in plaintext on a second
//! port): its config, bodies and process.

use super::process::{children, kill, proc_comm};
use super::{stop, wait_listening, write};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use xtask::netlab::{ChildGuard, Netns, Stream};

const NGINX_TEMPLATE: &str = include_str!("../../../../../bench/nginx.conf.tmpl");

/// nginx in the ext namespace; stopped on drop.
pub struct Nginx {
    child: ChildGuard,
}

impl Nginx {
    /// Renders the config into `dir` (which holds the certificates), writes the bodies,
    /// starts nginx in `ns` and waits until `listen` (TLS) and `plain` (plaintext HTTP)
    /// accept connections.
    pub fn start(
        nginx: &Path,
        ns: &Netns,
        dir: &Path,
        listen: SocketAddr,
        plain: SocketAddr,
    ) -> Result<Nginx> {
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
            .replace("{{LISTEN_PLAIN}}", &plain.to_string())
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
        for addr in [listen, plain] {
            wait_listening(&mut child, ns, addr).with_context(|| {
                format!(
                    "nginx did not start; its error log:\n{}",
                    std::fs::read_to_string(dir.join("nginx-error.log")).unwrap_or_default()
                )
            })?;
        }
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
