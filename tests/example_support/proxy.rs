//! A TCP proxy between a replica and the apiserver that the test can cut, as a network
//! partition does: while cut, no byte goes through in either direction (connections stay open,
//! requests and watches hang, new connections are accepted but carry nothing); after the heal,
//! what was held back flows again, so a request sent during the cut may still reach the
//! apiserver late, as after a real partition.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy; dropped, it stops accepting (open connections end with the test).
pub struct CutProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    cut: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    /// Proxies `127.0.0.1:<free port>` to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a proxy port");
        let addr = listener.local_addr().expect("its address");
        let (cut, flowing) = watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let flowing = flowing.clone();
                tokio::spawn(async move {
                    let mut wait = flowing.clone();
                    // A connection opened during the cut reaches the apiserver after the heal.
                    if wait.wait_for(|cut| !cut).await.is_err() {
                        return;
                    }
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pump(client_read, server_write, flowing.clone()),
                        pump(server_read, client_write, flowing),
                    );
                });
            }
        });
        Self { addr, cut, task }
    }

    /// Stops every byte until [`heal`](Self::heal).
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Lets the bytes flow again.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }

    /// A copy of `kubeconfig` (a file whose server is `server_url`) that reaches the apiserver
    /// through this proxy, written to `dir`; the apiserver's certificate names 127.0.0.1, so
    /// TLS still verifies through the proxy.
    pub fn kubeconfig(&self, kubeconfig: &Path, server_url: &str, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).expect("the kubeconfig");
        assert!(
            text.contains(server_url),
            "the kubeconfig names {server_url}"
        );
        let proxied = text.replace(server_url, &format!("https://{}", self.addr));
        let path = dir.join(format!("kubeconfig-via-{}.yaml", self.addr.port()));
        std::fs::write(&path, proxied).expect("write the proxied kubeconfig");
        path
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, holding each chunk while the connection is cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut cut: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if cut.wait_for(|cut| !cut).await.is_err() {
            return;
        }
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        // Read before the cut, delivered after the heal.
        if cut.wait_for(|cut| !cut).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
