//! A guest kernel for what the host kernel lacks: Debian's cloud kernel (it has
//! `CONFIG_TLS=m`) booted under qemu with one test binary as its only program, for
//! the kernel-TLS tests on hosts whose kernel has no TLS.
//!
//! The packages come from the host's apt sources (`apt-get download`, nothing is
//! installed) and are kept in `target/guest-kernel`; the guest has no network device,
//! so what it runs talks over its own loopback only.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result, bail, ensure};

use crate::netlab::run;

/// The Debian metapackage whose dependency is the kernel image.
const KERNEL_META: &str = "linux-image-cloud-amd64";
/// A shell and the usual tools in one static binary, for the guest's init.
const BUSYBOX: &str = "busybox-static";
/// Module directories the guest needs: kernel TLS and the ciphers it asks for.
const MODULE_DIRS: [&str; 4] = [
    "kernel/net/tls",
    "kernel/crypto",
    "kernel/arch/x86/crypto",
    "kernel/lib/crypto",
];
/// How long the guest may run (software emulation boots in about 10 s).
pub const GUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// An unpacked Debian kernel with its modules indexed, and busybox.
pub struct GuestKernel {
    root: PathBuf,
    release: String,
}

impl GuestKernel {
    /// Downloads and unpacks the kernel and busybox into `cache` unless already there.
    pub fn fetch(cache: &Path) -> Result<GuestKernel> {
        let root = cache.join("unpacked");
        if !root.join("ready").exists() {
            let _ = fs::remove_dir_all(cache);
            fs::create_dir_all(&root)?;
            let image = kernel_package()?;
            for package in [image.as_str(), BUSYBOX] {
                download(cache, package)?;
            }
            for deb in fs::read_dir(cache)?.filter_map(|e| e.ok().map(|e| e.path())) {
                if deb.extension().is_some_and(|e| e == "deb") {
                    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
                }
            }
            fs::write(root.join("ready"), image)?;
        }
        let release = only_entry(&root.join("lib/modules"))?;
        run(Command::new("depmod").arg("-b").arg(&root).arg(&release))?;
        Ok(GuestKernel { root, release })
    }

    /// Boots the kernel with `binary` (dynamically linked: its libraries come along)
    /// run as `binary args...` with `env` set, after the `tls` module is loaded. Returns
    /// what the guest printed on its console; its last line holds the exit status
    /// (`GUEST-EXIT=<n>`).
    pub fn run(
        &self,
        scratch: &Path,
        binary: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<String> {
        let initrd = scratch.join("initrd.cpio");
        self.initramfs(&scratch.join("root"), binary, args, env, &initrd)?;
        let kernel = self.root.join(format!("boot/vmlinuz-{}", self.release));
        let mut qemu = Command::new("qemu-system-x86_64");
        // Software emulation: nested KVM on the machines this was written on cannot run
        // this kernel (emulation failures), and the guest's work is small. 2 GiB: the
        // initramfs holds the unit-test binary (about 340 MiB with debug info, and
        // growing), and the kernel unpacks it into RAM beside the archive itself; with
        // 1 GiB unpacking failed ("Initramfs unpacking failed: write error").
        qemu.args(["-accel", "tcg", "-cpu", "max", "-m", "2048", "-smp", "2"])
            .args(["-nographic", "-no-reboot", "-nic", "none", "-kernel"])
            .arg(&kernel)
            .arg("-initrd")
            .arg(&initrd)
            .args(["-append", "console=ttyS0 panic=-1 quiet"])
            .stdin(Stdio::null());
        let mut timed = Command::new("timeout");
        timed
            .arg(GUEST_TIMEOUT.as_secs().to_string())
            .arg(qemu.get_program())
            .args(qemu.get_args())
            .stdin(Stdio::null());
        let out = timed.output().context("running qemu-system-x86_64")?;
        let console = String::from_utf8_lossy(&out.stdout).replace('\r', "");
        ensure!(
            console.contains("GUEST-EXIT="),
            "the guest did not finish ({}): {console}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(console)
    }

    fn initramfs(
        &self,
        dir: &Path,
        binary: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        out: &Path,
    ) -> Result<()> {
        let _ = fs::remove_dir_all(dir);
        for sub in ["bin", "sbin", "proc", "sys", "dev", "tmp"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        fs::copy(self.root.join("bin/busybox"), dir.join("bin/busybox"))?;
        let modules = format!("lib/modules/{}", self.release);
        for sub in MODULE_DIRS {
            let (from, to) = (
                self.root.join(&modules).join(sub),
                dir.join(&modules).join(sub),
            );
            fs::create_dir_all(&to)?;
            run(Command::new("cp").arg("-r").arg(from.join(".")).arg(&to))?;
        }
        for index in fs::read_dir(self.root.join(&modules))? {
            let index = index?.path();
            if index.is_file() {
                fs::copy(
                    &index,
                    dir.join(&modules)
                        .join(index.file_name().unwrap_or_default()),
                )?;
            }
        }
        fs::copy(binary, dir.join("test"))?;
        for library in shared_libraries(binary)? {
            let to = dir.join(library.strip_prefix("/").unwrap_or(&library));
            fs::create_dir_all(to.parent().unwrap_or(dir))?;
            fs::copy(&library, &to)?;
        }
        let exports: String = env
            .iter()
            .map(|(k, v)| format!("export {k}='{v}'\n"))
            .collect();
        let init = format!(
            "#!/bin/busybox sh\n\
             /bin/busybox --install -s /bin\n\
             ln -s /bin/busybox /sbin/modprobe\n\
             mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev\n\
             ip link set lo up\n\
             echo /sbin/modprobe > /proc/sys/kernel/modprobe\n\
             modprobe tls && echo 'guest: tls module loaded'\n\
             echo \"guest: kernel $(uname -r)\"\n\
             {exports}cd /tmp && /test {args}\n\
             echo \"GUEST-EXIT=$?\"\n\
             poweroff -f\n",
            args = args.join(" ")
        );
        fs::write(dir.join("init"), init)?;
        run(Command::new("chmod").arg("+x").arg(dir.join("init")))?;
        let cpio = Command::new("sh")
            .arg("-c")
            .arg("find . | cpio -o -H newc --quiet > \"$1\"")
            .arg("sh")
            .arg(out)
            .current_dir(dir)
            .status()
            .context("cpio")?;
        ensure!(cpio.success(), "cpio failed: {cpio}");
        Ok(())
    }
}

/// The versioned kernel image package the metapackage depends on.
fn kernel_package() -> Result<String> {
    let text = run(Command::new("apt-cache").args(["depends", KERNEL_META]))?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_owned)
        .with_context(|| format!("apt-cache depends {KERNEL_META} names no kernel: {text}"))
}

fn download(dir: &Path, package: &str) -> Result<()> {
    let mut apt = Command::new("apt-get");
    apt.args(["download", "-q", package]).current_dir(dir);
    if run(&mut apt).is_ok() {
        return Ok(());
    }
    // A fresh machine may have no package lists yet.
    run(Command::new("apt-get").args(["update", "-q"]))?;
    run(&mut apt).map(drop)
}

fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    Ok(run(Command::new("ldd").arg(binary))?
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(PathBuf::from)
        .collect())
}

fn only_entry(dir: &Path) -> Result<String> {
    let mut names = fs::read_dir(dir)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<Vec<_>>>()?;
    match names.len() {
        1 => Ok(names.remove(0)),
        _ => bail!(
            "expected one kernel release in {}: {names:?}",
            dir.display()
        ),
    }
}
