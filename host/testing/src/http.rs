//! A real HTTP server on loopback for the lambdas under test to call: it
//! records every request and every connection's fate, and answers as the
//! test says — a status, a redirect, a slow or endless body, silence.
//!
//! HTTP/1.1 written by hand over tokio, so that a test sees exactly what
//! reached the wire: a request the sandbox let through, or a connection the
//! sandbox dropped mid-way. With [`HttpServer::start_tls`] it speaks HTTPS
//! with a fresh self-signed certificate for `127.0.0.1` and `localhost`,
//! whose PEM file a test hands to the runtime as its extra CA.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// A request as it reached the server.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Names lowercase.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Recorded {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How the server answers a request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A status, headers and a body.
    Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Headers at once, then `chunk` every `every`, `count` times (without
    /// end when `None`): a slow or an endless body.
    Stream {
        chunk: Vec<u8>,
        every: Duration,
        count: Option<usize>,
    },
    /// Reads the request, then says nothing for `for_`.
    Silence { for_: Duration },
    /// `reply`, once `after` has passed.
    Delayed { after: Duration, reply: Box<Reply> },
    /// Reads the request, then closes the connection without a word.
    HangUp,
}

impl Reply {
    /// `status` with a text body.
    pub fn status(status: u16, body: &str) -> Self {
        Reply::Answer {
            status,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        }
    }

    /// A redirect to `location`.
    pub fn redirect(location: &str) -> Self {
        Reply::Answer {
            status: 302,
            headers: vec![("location".into(), location.into())],
            body: Vec::new(),
        }
    }
}

/// What became of one connection.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// When the client went away before the server was done answering.
    pub dropped_early: Option<Instant>,
}

type Handler = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

/// A running server; stops when dropped.
pub struct HttpServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    connections: Arc<Mutex<Vec<Connection>>>,
    ca: Option<(PathBuf, tempfile::TempDir)>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HttpServer {
    /// Plain HTTP on a free loopback port.
    pub async fn start(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Self {
        Self::serve(Arc::new(handler), None).await
    }

    /// HTTPS on a free loopback port, with a certificate of its own.
    pub async fn start_tls(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Self {
        let issued = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
        ])
        .expect("a self-signed certificate");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, issued.cert.pem()).expect("the certificate written");
        let key = rustls::pki_types::PrivateKeyDer::try_from(issued.signing_key.serialize_der())
            .expect("the key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![issued.cert.der().clone()], key)
        .expect("the server's TLS configuration");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let mut server = Self::serve(Arc::new(handler), Some(acceptor)).await;
        server.ca = Some((ca, dir));
        server
    }

    async fn serve(handler: Handler, tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let (seen, fates) = (requests.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (handler, seen, fates, tls) =
                    (handler.clone(), seen.clone(), fates.clone(), tls.clone());
                tokio::spawn(async move {
                    let index = {
                        let mut fates = lock(&fates);
                        fates.push(Connection::default());
                        fates.len() - 1
                    };
                    let dropped = match tls {
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(stream) => serve_connection(stream, &handler, &seen).await,
                            Err(_) => false,
                        },
                        None => serve_connection(stream, &handler, &seen).await,
                    };
                    if dropped {
                        lock(&fates)[index].dropped_early = Some(Instant::now());
                    }
                });
            }
        });
        Self {
            addr,
            requests,
            connections,
            ca: None,
            task,
        }
    }

    /// `http://127.0.0.1:PORT` (or `https://`).
    pub fn url(&self) -> String {
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The certificate's PEM file, for an HTTPS server.
    pub fn ca_file(&self) -> Option<&std::path::Path> {
        self.ca.as_ref().map(|(path, _)| path.as_path())
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.requests).clone()
    }

    /// Every connection so far.
    pub fn connections(&self) -> Vec<Connection> {
        lock(&self.connections).clone()
    }
}

/// Serves requests on one connection until it closes; true when the
/// client left before an answer was complete.
async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    handler: &Handler,
    seen: &Mutex<Vec<Recorded>>,
) -> bool {
    let mut stream = BufReader::new(stream);
    loop {
        let request = match read_request(&mut stream).await {
            Ok(Some(request)) => request,
            Ok(None) => return false,
            Err(_) => return true,
        };
        lock(seen).push(request.clone());
        let reply = handler(&request);
        if write_reply(stream.get_mut(), reply).await.is_err() {
            return true;
        }
    }
}

async fn read_request<S: AsyncRead + Unpin>(
    stream: &mut BufReader<S>,
) -> std::io::Result<Option<Recorded>> {
    let mut line = String::new();
    if stream.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if stream.read_line(&mut header).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v): &(String, String)| v.clone())
    };
    let mut body = Vec::new();
    if let Some(length) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(length, 0);
        stream.read_exact(&mut body).await?;
    } else if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            stream.read_line(&mut size).await?;
            let size = usize::from_str_radix(size.trim(), 16)
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk).await?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    }
    Ok(Some(Recorded {
        method,
        path,
        headers,
        body,
        at: Instant::now(),
    }))
}

async fn write_reply<S: AsyncWrite + Unpin>(stream: &mut S, reply: Reply) -> std::io::Result<()> {
    let reply = match reply {
        Reply::Delayed { after, reply } => {
            tokio::time::sleep(after).await;
            *reply
        }
        reply => reply,
    };
    match reply {
        Reply::Answer {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} Whatever\r\ncontent-length: {}\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(&body).await?;
            stream.flush().await
        }
        Reply::Stream {
            chunk,
            every,
            count,
        } => {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .await?;
            stream.flush().await?;
            let mut sent = 0;
            while count.is_none_or(|count| sent < count) {
                tokio::time::sleep(every).await;
                stream
                    .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                    .await?;
                stream.write_all(&chunk).await?;
                stream.write_all(b"\r\n").await?;
                stream.flush().await?;
                sent += 1;
            }
            stream.write_all(b"0\r\n\r\n").await?;
            stream.flush().await
        }
        Reply::Silence { for_ } => {
            tokio::time::sleep(for_).await;
            Ok(())
        }
        // An error closes the connection: the client sees it hang up.
        Reply::HangUp | Reply::Delayed { .. } => Err(std::io::ErrorKind::ConnectionAborted.into()),
    }
}
