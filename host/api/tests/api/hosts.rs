//! A real server on loopback, reached as a browser would reach it: the page,
//! gRPC-web and plain gRPC answer only to the names the server goes by, so
//! a page on another site cannot reach it through a name of its own (DNS
//! rebinding) nor call it from its own origin.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use waft_api::proto::{self, frontend_client::FrontendClient};
use waft_api::{AllowedHosts, Roles};
use waft_runtime::{Allocator, Runtime, RuntimeConfig};
use waft_services::{Frontend, SystemClock, Wake};
use waft_store::SqliteStore;

/// A Frontend's server on a fresh loopback port with `roles`' settings;
/// its port, and what stops it when dropped.
async fn server(roles: Roles) -> (u16, oneshot::Sender<()>) {
    let store = Arc::new(SqliteStore::connect("sqlite::memory:").await.unwrap());
    let runtime = Runtime::new(RuntimeConfig {
        allocator: Allocator::OnDemand,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let frontend = Frontend::new(
        store,
        Arc::new(SystemClock),
        Arc::new(runtime),
        Arc::new(Wake::default()),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = oneshot::channel::<()>();
    let roles = Roles {
        frontend: Some(Arc::new(frontend)),
        ..roles
    };
    tokio::spawn(waft_api::serve(listener, roles, async move {
        let _ = stopped.await;
    }));
    (port, stop)
}

/// One HTTP/1.1 exchange on a fresh connection; the whole answer.
async fn exchange(port: u16, request: Vec<u8>) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream.write_all(&request).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    String::from_utf8_lossy(&response).into_owned()
}

/// `GET /` with these header lines.
async fn page(port: u16, headers: &str) -> String {
    let request = format!("GET / HTTP/1.1\r\n{headers}Connection: close\r\n\r\n");
    exchange(port, request.into_bytes()).await
}

/// An empty `ListLambdas` through gRPC-web, with these header lines.
async fn grpc_web(port: u16, headers: &str) -> String {
    let mut request = format!(
        "POST /waft.v1.Frontend/ListLambdas HTTP/1.1\r\n{headers}\
         Content-Type: application/grpc-web+proto\r\nX-Grpc-Web: 1\r\n\
         Content-Length: 5\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    request.extend_from_slice(&[0, 0, 0, 0, 0]);
    exchange(port, request).await
}

fn answered(response: &str) -> bool {
    response.starts_with("HTTP/1.1 200")
        && (response.contains("grpc-status:0") || response.contains("<script"))
}

/// Refused: `403` for the page, `PERMISSION_DENIED` for a call.
fn refused(response: &str) -> bool {
    response.starts_with("HTTP/1.1 403")
        || (response.starts_with("HTTP/1.1 200") && response.contains("grpc-status: 7"))
}

/// The page and gRPC-web answer to the server's own address and to
/// `localhost`, and refuse a name the server does not go by: a rebinding
/// page's requests carry its own name.
#[tokio::test]
async fn the_page_and_grpc_web_answer_only_to_the_names_of_the_server() {
    let (port, _stop) = server(Roles::default()).await;
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "127.0.0.1".to_owned(),
    ] {
        let headers = format!("Host: {host}\r\n");
        let response = page(port, &headers).await;
        assert!(answered(&response), "{host}: {response}");
        let response = grpc_web(port, &headers).await;
        assert!(answered(&response), "{host}: {response}");
    }
    for headers in [
        format!("Host: evil.example:{port}\r\n"),
        "Host: evil.example\r\n".to_owned(),
        format!("Host: 127.0.0.1.evil.example:{port}\r\n"),
        // Nothing names the host at all.
        String::new(),
    ] {
        let response = page(port, &headers).await;
        assert!(refused(&response), "{headers:?}: {response}");
        assert!(!response.contains("<script"), "{response}");
        let response = grpc_web(port, &headers).await;
        assert!(refused(&response), "{headers:?}: {response}");
        assert!(!response.contains("grpc-status:0"), "{response}");
    }
}

/// A call from a page of another origin is refused even with the right
/// `Host`: the browser says where the page came from.
#[tokio::test]
async fn calls_from_another_origin_are_refused() {
    let (port, _stop) = server(Roles::default()).await;
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    let own = format!("{host}Origin: http://127.0.0.1:{port}\r\n");
    assert!(answered(&grpc_web(port, &own).await));
    for origin in [
        format!("http://evil.example:{port}"),
        "http://127.0.0.1:3000".to_owned(),
        "null".to_owned(),
    ] {
        let headers = format!("{host}Origin: {origin}\r\n");
        let response = grpc_web(port, &headers).await;
        assert!(refused(&response), "{origin}: {response}");
    }
}

/// Plain gRPC is held to the same rule through `:authority`.
#[tokio::test]
async fn plain_grpc_answers_only_to_the_names_of_the_server() {
    let (port, _stop) = server(Roles::default()).await;
    let call = |authority: String| async move {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .origin(authority.parse().unwrap())
            .connect()
            .await
            .unwrap();
        FrontendClient::new(channel)
            .list_lambdas(proto::ListLambdasRequest::default())
            .await
    };
    call(format!("http://127.0.0.1:{port}")).await.unwrap();
    call(format!("http://localhost:{port}")).await.unwrap();
    let status = call(format!("http://evil.example:{port}"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("allowed_hosts"), "{status:?}");
}

/// A name in the server's configuration is answered like its address, by
/// the page and by calls from its pages.
#[tokio::test]
async fn a_configured_name_is_answered() {
    let (port, _stop) = server(Roles {
        allowed_hosts: AllowedHosts::new(["waft.internal"]),
        ..Roles::default()
    })
    .await;
    let host = format!("Host: waft.internal:{port}\r\n");
    assert!(answered(&page(port, &host).await));
    let from_its_page = format!("{host}Origin: http://waft.internal:{port}\r\n");
    assert!(answered(&grpc_web(port, &from_its_page).await));
    let response = page(port, &format!("Host: other.internal:{port}\r\n")).await;
    assert!(refused(&response), "{response}");
    assert!(response.contains("\"other.internal\""), "{response}");
}
