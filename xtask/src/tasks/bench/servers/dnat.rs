//! The DNAT rule (iptables or nft, in the pod namespace) that sends the HAProxy cases'
//! connects to HAProxy: the service's TLS port for the TLS cases, port 80 for plaintext.

use crate::tasks::bench::tools::NatTool;
use anyhow::{Context, Result, bail};
use std::net::SocketAddr;
use std::process::Command;
use xtask::netlab::Netns;

/// The DNAT that sends the pod's connects to the service to HAProxy, switched on only for
/// the HAProxy cases, each from the port its client dials to the port of its frontend.
///
/// The nat hook is installed once for the whole run (a jump to an empty chain), so
/// connection tracking is on in the pod namespace for every case, as on any Kubernetes
/// node; switching the case on and off only adds and flushes the one rule.
pub struct Dnat {
    tool: NatTool,
    netns: String,
}

const CHAIN: &str = "RDBENCH";
const NFT_TABLE: &str = "rdbench";

impl Dnat {
    pub fn install(tool: &NatTool, ns: &Netns) -> Result<Dnat> {
        let dnat = Dnat {
            tool: tool.clone(),
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

    /// Sends the pod's TCP connects to `from` (address and port) to `to` until
    /// [`Dnat::disable`].
    pub fn enable(&self, from: SocketAddr, to: SocketAddr) -> Result<()> {
        let (from_ip, from_port) = (from.ip().to_string(), from.port().to_string());
        let to = to.to_string();
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
