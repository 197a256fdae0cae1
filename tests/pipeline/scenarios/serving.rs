//! What a server's ports answer beside Waft's own calls: generic gRPC
//! tools (health, and reflection in both its versions), a call to a role
//! the server does not run, and, on the Frontend's port, the dashboard's
//! page and gRPC-web. These check the serving stack every role shares, not
//! a step of a task's path.

use std::time::Duration;

use waft_services::ServiceError;

use crate::support::Cluster;

/// The services a server lists through reflection of one version (`v1`
/// or `v1alpha`: the two differ only in their package's name).
macro_rules! reflected {
    ($version:ident, $channel:expr) => {{
        use tonic_reflection::pb::$version::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::$version::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::$version::server_reflection_response::MessageResponse;
        let request = tonic_reflection::pb::$version::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut answers = ServerReflectionClient::new($channel)
            .server_reflection_info(tokio_stream::once(request))
            .await
            .unwrap()
            .into_inner();
        match answers.message().await.unwrap().unwrap().message_response {
            Some(MessageResponse::ListServicesResponse(list)) => list
                .service
                .into_iter()
                .map(|s| s.name)
                .collect::<Vec<String>>(),
            other => panic!("not a list of services: {other:?}"),
        }
    }};
}

/// Generic gRPC tools work — health, and reflection in both its versions
/// (`grpcurl` asks for v1, Python's `grpcio-reflection` for v1alpha) —
/// and a call to a role a server does not run fails plainly.
pub async fn wrong_role_and_health(cluster: &Cluster) {
    let frontend = cluster.frontend_addr.clone();
    let channel = cluster.channel(&frontend, cluster.token.as_deref());
    // Reflection is open: no token.
    let open = cluster.channel(&frontend, None);
    for services in [reflected!(v1, open.clone()), reflected!(v1alpha, open)] {
        for service in ["waft.v1.Frontend", "grpc.health.v1.Health"] {
            assert!(services.iter().any(|s| s == service), "{services:?}");
        }
    }
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "waft.v1.Frontend".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        serving.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let controller = waft_api::ControllerClient::new(channel);
    let error = waft_services::ControllerApi::next_work(
        &controller,
        waft_services::NextWork {
            slots: Vec::new(),
            max_tasks: 1,
            wait: Duration::ZERO,
        },
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error, ServiceError::FailedPrecondition(m) if m.contains("Controller")),
        "{error:?}"
    );
}

/// The Frontend's port serves the dashboard's page to a plain HTTP/1.1
/// `GET`, and gRPC-web calls, which answer in a body with their trailers
/// (the dashboard's browser tests drive both through a real browser).
/// Plain TCP: `waft dev`'s installation, which has no TLS.
pub async fn page_and_grpc_web(cluster: &Cluster) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let frontend = cluster.frontend_addr.as_str();
    let exchange = |request: Vec<u8>| async move {
        let mut stream = tokio::net::TcpStream::connect(frontend).await.unwrap();
        stream.write_all(&request).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        String::from_utf8_lossy(&response).into_owned()
    };
    let page =
        exchange(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".to_vec()).await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(
        page.contains("content-security-policy: default-src 'self'"),
        "{page}"
    );
    assert!(
        page.contains("<script type=\"module\" src=\"/app.js\">"),
        "{page}"
    );
    // An empty ListLambdasRequest in one gRPC-web frame.
    let mut call = b"POST /waft.v1.Frontend/ListLambdas HTTP/1.1\r\nHost: localhost\r\n\
        Content-Type: application/grpc-web+proto\r\nX-Grpc-Web: 1\r\n\
        Content-Length: 5\r\nConnection: close\r\n\r\n"
        .to_vec();
    call.extend_from_slice(&[0, 0, 0, 0, 0]);
    let answer = exchange(call).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("application/grpc-web+proto"), "{answer}");
    assert!(answer.contains("grpc-status:0"), "{answer}");
}
