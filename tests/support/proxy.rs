//! A loopback TCP proxy that can slow down or cut the traffic through it,
//! for putting a network between two `waft` processes (TLS passes through
//! untouched: it only moves bytes). It also counts the SQS requests that
//! pass from client to server, by the `AmazonSQS.<Action>` target each
//! carries: what a process asks of the queue service, counted on the wire.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
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
    /// SQS requests sent through it, by action.
    requests: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl Proxy {
    /// Proxies a free loopback port to `upstream`.
    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (link, watching) = watch::channel(Link::Up);
        let requests = Arc::new(Mutex::new(BTreeMap::new()));
        let counted = requests.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *watching.borrow() == Link::Cut {
                    continue;
                }
                let watching = watching.clone();
                let upstream = upstream.clone();
                let counted = counted.clone();
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
                        () = pump(client_read, server_write, watching.clone(), Some(counted)) => {}
                        () = pump(server_read, client_write, watching, None) => {}
                    }
                });
            }
        });
        Self {
            addr,
            link,
            accepting,
            requests,
        }
    }

    /// The SQS requests sent through it so far, by action
    /// (`ReceiveMessage`, …).
    pub fn sqs_requests(&self) -> BTreeMap<String, usize> {
        self.requests.lock().unwrap().clone()
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
    counted: Option<Arc<Mutex<BTreeMap<String, usize>>>>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    // The end of the previous chunk: a target may straddle two.
    let mut tail = Vec::new();
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            _ = link.wait_for(|l| *l == Link::Cut) => return,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Some(counted) = &counted {
            tail.extend_from_slice(&buffer[..n]);
            let looked = count_targets(&tail, &mut counted.lock().unwrap());
            tail.drain(..looked);
        }
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

/// Longer than any `AmazonSQS.<Action>`: what a chunk keeps of the bytes
/// before it, so that a target cut between two chunks is counted whole.
const TARGET_MAX: usize = 64;
const TARGET: &[u8] = b"AmazonSQS.";

/// Counts the whole targets in `bytes`; answers where the bytes still to be
/// looked at begin (a target cut at the end is counted with what follows).
fn count_targets(bytes: &[u8], counts: &mut BTreeMap<String, usize>) -> usize {
    let mut at = 0;
    while let Some(found) = find(&bytes[at..], TARGET) {
        let start = at + found + TARGET.len();
        let Some(len) = (bytes[start..].iter()).position(|b| !b.is_ascii_alphanumeric()) else {
            break;
        };
        let action = String::from_utf8_lossy(&bytes[start..start + len]).into_owned();
        *counts.entry(action).or_default() += 1;
        at = start + len;
    }
    at.max(bytes.len().saturating_sub(TARGET_MAX))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
