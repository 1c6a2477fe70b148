//! The TCP servers behind the Backends: echo (every byte back) and sink (never reads).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::conn::established;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Echo every byte back, on this address (repeatable).
    #[arg(long)]
    echo: Vec<SocketAddr>,
    /// Accept and never read, on this address (repeatable).
    #[arg(long)]
    sink: Vec<SocketAddr>,
}

#[derive(Clone, Copy)]
enum Role {
    Echo,
    Sink,
}

/// Listen backlog: the proxy dials upstream for every client it accepts, so a burst of
/// clients is a burst here too.
const BACKLOG: u32 = 8192;

pub async fn run(args: ServeArgs) -> Result<()> {
    let roles = (args.echo.iter().map(|a| (*a, Role::Echo)))
        .chain(args.sink.iter().map(|a| (*a, Role::Sink)));
    for (addr, role) in roles {
        let listener = listen(addr).with_context(|| format!("cannot listen on {addr}"))?;
        let name = match role {
            Role::Echo => "echo",
            Role::Sink => "sink",
        };
        crate::emit(
            "listening",
            serde_json::json!({ "role": name, "addr": addr }),
        );
        tokio::spawn(accept_loop(listener, role));
    }
    // Until killed by the bench.
    std::future::pending::<()>().await;
    Ok(())
}

fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

async fn accept_loop(listener: TcpListener, role: Role) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                match role {
                    Role::Echo => tokio::spawn(echo(stream)),
                    Role::Sink => tokio::spawn(sink(stream)),
                };
            }
            Err(e) => {
                // Out of descriptors, typically: back off instead of spinning.
                eprintln!("loadgen serve: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn echo(mut stream: TcpStream) {
    let mut buf = vec![0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if stream.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Holds the connection without ever reading; lets go once the peer has closed or reset
/// it, so runs one after another do not pile up descriptors here.
async fn sink(stream: TcpStream) {
    while established(&stream) {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
