//! gRPC servers over the roles: each adapter decodes a request, calls the
//! role through its trait, and encodes the answer or the error's status.
//!
//! [`serve`] puts any set of roles on one listener with the standard health
//! and reflection services beside them, so `grpcurl` and load balancers work
//! without Waft-specific knowledge. A role not served answers
//! `UNIMPLEMENTED`: a request sent to the wrong role fails plainly.
//!
//! The Frontend's server also serves the dashboard (`waft-dashboard`), whose
//! page calls the same methods through gRPC-web: one API, one set of rules.
//! Ahead of everything, a server answers only to the names it goes by
//! (`hosts.rs`): no page of another site reaches it through a name of its
//! own.
//!
//! Each server refuses a request over its role's limit
//! (`MAX_FRONTEND_REQUEST`, `MAX_INTERNAL_REQUEST`) in a status that says
//! so, and the Controller and the HSC send no answer over what their
//! clients accept; the roles cut what they send to fit (`waft_services`'
//! batches).
//!
//! One adapter a role: `frontend/` (which hands each call to the
//! Frontend acting for its caller: the Frontend checks the caller's
//! rights), `controller.rs`, `hsc.rs`.

mod controller;
mod frontend;
mod hosts;
mod hsc;
mod page;

pub use controller::ControllerService;
pub use frontend::FrontendService;
pub use hosts::AllowedHosts;
pub use hsc::HscService;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, ServerTlsConfig};
use tonic_web::GrpcWebLayer;
use waft_client::proto;
use waft_client::proto::controller_server::ControllerServer;
use waft_client::proto::frontend_server::FrontendServer;
use waft_client::proto::hsc_server::HscServer;
use waft_client::{MAX_FRONTEND_REQUEST, MAX_INTERNAL_REQUEST};
use waft_services::auth::Authenticator;
use waft_services::{ControllerApi, Frontend, HscApi};

use crate::auth::AuthLayer;
use hosts::HostLayer;
use page::PageLayer;

/// The roles one server serves; `None` ones answer `UNIMPLEMENTED`.
#[derive(Clone, Default)]
pub struct Roles {
    /// The Frontend itself, not any `FrontendApi`: each call is answered
    /// by it acting for the call's caller.
    pub frontend: Option<Arc<Frontend>>,
    pub controller: Option<Arc<dyn ControllerApi>>,
    pub hsc: Option<Arc<dyn HscApi>>,
    /// Checks every call's token; no authentication when absent.
    pub auth: Option<Arc<Authenticator>>,
    /// The server's certificate and key: TLS only when present.
    pub tls: Option<Identity>,
    /// The names the server answers to besides its addresses (and
    /// `localhost` on loopback).
    pub allowed_hosts: AllowedHosts,
}

/// Why a server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("the gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Serves `roles` on `listener` (with `TCP_NODELAY`) until `shutdown`
/// resolves, then drains the calls in flight.
pub async fn serve(
    listener: TcpListener,
    roles: Roles,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let page = roles
        .frontend
        .is_some()
        .then(|| waft_dashboard::routes(proto::FILE_DESCRIPTOR_SET));
    let routes = routes(roles.frontend, roles.controller, roles.hsc).await?;
    let hosts = HostLayer::new(
        roles.allowed_hosts,
        listener.local_addr().ok().map(|a| a.ip()),
    );
    let incoming = TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(60)));
    let mut server = tonic::transport::Server::builder()
        // HTTP/1.1 for gRPC-web: the dashboard's calls, and any browser's.
        .accept_http1(true);
    if let Some(identity) = roles.tls {
        server = server.tls_config(ServerTlsConfig::new().identity(identity))?;
    }
    server
        // The host first: a request for a name the server does not go by
        // goes no further (see hosts.rs). Then the page: plain HTTP, no
        // token (see page.rs). Then gRPC-web is translated, so
        // authentication sees plain gRPC.
        .layer(hosts)
        .layer(PageLayer(page))
        .layer(GrpcWebLayer::new())
        .layer(AuthLayer(roles.auth))
        .add_routes(routes.prepare())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await?;
    Ok(())
}

/// Health, both versions of reflection, and the roles' services, each
/// reported serving to health checks.
async fn routes(
    frontend: Option<Arc<Frontend>>,
    controller: Option<Arc<dyn ControllerApi>>,
    hsc: Option<Arc<dyn HscApi>>,
) -> Result<Routes, ServeError> {
    let (health, health_service) = tonic_health::server::health_reporter();
    // Both versions of reflection: `grpcurl` asks for v1 first, while
    // Python's `grpcio-reflection` and older generic clients know v1alpha only.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let mut routes = Routes::default()
        .add_service(health_service)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?);
    if let Some(role) = frontend {
        health
            .set_serving::<FrontendServer<FrontendService>>()
            .await;
        routes = routes.add_service(
            FrontendServer::new(FrontendService(role))
                .max_decoding_message_size(MAX_FRONTEND_REQUEST),
        );
    }
    if let Some(role) = controller {
        health
            .set_serving::<ControllerServer<ControllerService>>()
            .await;
        routes = routes.add_service(
            ControllerServer::new(ControllerService(role))
                .max_decoding_message_size(MAX_INTERNAL_REQUEST)
                .max_encoding_message_size(MAX_INTERNAL_REQUEST),
        );
    }
    if let Some(role) = hsc {
        health.set_serving::<HscServer<HscService>>().await;
        routes = routes.add_service(
            HscServer::new(HscService(role))
                .max_decoding_message_size(MAX_INTERNAL_REQUEST)
                .max_encoding_message_size(MAX_INTERNAL_REQUEST),
        );
    }
    Ok(routes)
}
