//! A loopback TCP proxy that can slow down or cut the traffic through it,
//! for putting a network between two `waft` processes (TLS passes through
//! untouched: it only moves bytes).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Passes it on at once.
    Up,
    /// Holds every chunk this long before passing it on.
    Slow(Duration),
    /// Drops every connection and refuses new ones.
    Cut,
}

/// A running proxy; stops when dropped.
pub struct Proxy {
    /// Where clients connect instead of the upstream.
    pub addr: String,
    link: watch::Sender<Link>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Proxies a free loopback port to `upstream`.
    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (link, watching) = watch::channel(Link::Up);
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *watching.borrow() == Link::Cut {
                    continue;
                }
                let watching = watching.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    // Either direction ending ends the connection.
                    tokio::select! {
                        () = pump(client_read, server_write, watching.clone()) => {}
                        () = pump(server_read, client_write, watching) => {}
                    }
                });
            }
        });
        Self {
            addr,
            link,
            accepting,
        }
    }

    /// Changes what happens to traffic from now on.
    pub fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.link.send_replace(Link::Cut);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut link: watch::Receiver<Link>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            _ = link.wait_for(|l| *l == Link::Cut) => return,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let current = *link.borrow();
        match current {
            Link::Cut => return,
            Link::Slow(delay) => tokio::time::sleep(delay).await,
            Link::Up => {}
        }
        if *link.borrow() == Link::Cut || to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
