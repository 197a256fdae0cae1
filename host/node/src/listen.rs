//! What a process puts on the network: its gRPC server with the roles it
//! runs, its TLS identity, and `/metrics` when configured. Every process
//! binds here, after its roles are built, so a configuration that cannot
//! run fails before any port is taken.

use std::net::SocketAddr;
use std::path::Path;

use tokio::net::TcpListener;
use tonic::transport::Identity;
use waft_api::Roles;

use crate::{Config, Node, NodeError, metrics};

/// Binds `config.listen` and serves `roles` there, then `/metrics`, until
/// the node stops.
pub(crate) async fn serve(node: &mut Node, config: &Config, roles: Roles) -> Result<(), NodeError> {
    let listener = bind(config.listen).await?;
    node.addr = local_addr(&listener, config.listen)?;
    spawn_server(node, listener, roles);
    spawn_metrics(node, config).await
}

pub(crate) fn read_pem(path: &Path) -> Result<Vec<u8>, NodeError> {
    std::fs::read(path).map_err(|source| NodeError::Tls {
        path: path.to_owned(),
        source,
    })
}

/// This process's TLS identity, when it has a certificate.
pub(crate) fn identity(config: &Config) -> Result<Option<Identity>, NodeError> {
    match (&config.tls.cert, &config.tls.key) {
        (Some(cert), Some(key)) => {
            // Both of rustls's crypto backends are linked (the AWS SDK brings
            // the other one); the server's TLS needs the process to pick one.
            // Failing means one is installed already: fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
            Ok(Some(Identity::from_pem(read_pem(cert)?, read_pem(key)?)))
        }
        _ => Ok(None),
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, NodeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| NodeError::Bind { addr, source })
}

fn local_addr(listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, NodeError> {
    listener
        .local_addr()
        .map_err(|source| NodeError::Bind { addr, source })
}

/// Serves this process's metrics at `/metrics` (see [`metrics`]), until
/// the node stops.
async fn spawn_metrics(node: &mut Node, config: &Config) -> Result<(), NodeError> {
    let Some(addr) = config.metrics_listen else {
        return Ok(());
    };
    let listener = bind(addr).await?;
    let bound = local_addr(&listener, addr)?;
    node.metrics_addr = Some(bound);
    let app = metrics::router(metrics::Access::of(config, bound.ip()));
    let stop = node.stop.clone();
    node.tasks.spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned());
        if let Err(error) = serve.await {
            tracing::error!(%error, "the metrics server stopped");
        }
    });
    Ok(())
}

fn spawn_server(node: &mut Node, listener: TcpListener, roles: Roles) {
    let stop = node.stop.clone();
    node.tasks.spawn(async move {
        if let Err(error) = waft_api::serve(listener, roles, stop.clone().cancelled_owned()).await {
            tracing::error!(%error, "the gRPC server stopped");
            stop.cancel();
        }
    });
}
