//! The metrics port: `/metrics` in the OpenMetrics text format, for
//! Prometheus.
//!
//! The metrics name lambdas and the hosts they call, so the port guards
//! them as the gRPC port guards the API: it answers only to the names the
//! process goes by (`waft_api::AllowedHosts`: its addresses, `localhost`
//! on loopback, [`Config::answered_hosts`]), so a web page cannot read it
//! through a name it points at loopback (DNS rebinding); and when
//! `auth.metrics_token` is set — it must be beyond loopback — a scrape
//! without that bearer token is refused.

use std::net::IpAddr;

use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use waft_api::AllowedHosts;
use waft_services::auth::hash_secret;

use crate::Config;

/// Who may read `/metrics`.
#[derive(Clone)]
pub(crate) struct Access {
    hosts: AllowedHosts,
    /// The address the metrics port listens on.
    bound: IpAddr,
    /// The hash of the token a scrape must carry, when one is set.
    token: Option<String>,
}

impl Access {
    /// As `config` says, for a port listening on `bound`.
    pub(crate) fn of(config: &Config, bound: IpAddr) -> Self {
        Self {
            hosts: AllowedHosts::new(config.answered_hosts()),
            bound,
            token: config.auth.metrics_token.as_deref().map(hash_secret),
        }
    }

    /// Why a request may not read the metrics, as its answer.
    fn refusal(&self, uri: &Uri, headers: &HeaderMap) -> Option<Response> {
        if let Err(why) = self.hosts.check(uri, headers, self.bound) {
            return Some((StatusCode::FORBIDDEN, format!("{why}\n")).into_response());
        }
        let expected = self.token.as_deref()?;
        let presented = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(hash_secret);
        // Hashes of equal length, compared without an early exit.
        let matches = presented.is_some_and(|presented| {
            presented
                .bytes()
                .zip(expected.bytes())
                .fold(0, |d, (a, b)| d | (a ^ b))
                == 0
        });
        (!matches).then(|| {
            (
                StatusCode::UNAUTHORIZED,
                [(WWW_AUTHENTICATE, "Bearer")],
                "/metrics needs the metrics token (auth.metrics_token) as a bearer token\n",
            )
                .into_response()
        })
    }
}

/// The metrics port's routes.
pub(crate) fn router(access: Access) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |uri: Uri, headers: HeaderMap| async move {
            if let Some(refusal) = access.refusal(&uri, &headers) {
                return refusal;
            }
            (
                [(
                    CONTENT_TYPE,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )],
                waft_services::metrics::encode(),
            )
                .into_response()
        }),
    )
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A metrics port on loopback as `pairs` configure it; its port.
    async fn port(pairs: &[(&str, &str)]) -> u16 {
        let env = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        let config = Config::load(None, env).unwrap();
        config.validate(None).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = router(Access::of(&config, addr.ip()));
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr.port()
    }

    /// `GET /metrics` with these header lines; the status line.
    async fn get(port: u16, headers: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let request = format!("GET /metrics HTTP/1.1\r\n{headers}Connection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response.lines().next().unwrap_or_default().to_owned()
    }

    /// The metrics port answers to the names the process goes by, as its
    /// gRPC port does: a rebinding page cannot read it from loopback.
    #[tokio::test]
    async fn metrics_answer_only_to_the_names_of_the_process() {
        let port = port(&[("WAFT_ALLOWED_HOSTS", "prometheus.internal")]).await;
        for host in ["127.0.0.1", "localhost", "prometheus.internal:9464"] {
            let status = get(port, &format!("Host: {host}\r\n")).await;
            assert_eq!(status, "HTTP/1.1 200 OK", "{host}");
        }
        for host in ["evil.example", "evil.example:9464"] {
            let status = get(port, &format!("Host: {host}\r\n")).await;
            assert_eq!(status, "HTTP/1.1 403 Forbidden", "{host}");
        }
    }

    /// With a metrics token, a scrape needs it.
    #[tokio::test]
    async fn metrics_ask_for_their_token_when_one_is_set() {
        let token = "m".repeat(40);
        let port = port(&[("WAFT_AUTH_METRICS_TOKEN", token.as_str())]).await;
        let host = "Host: 127.0.0.1\r\n";
        for authorization in [
            "",
            "Authorization: Bearer wrong\r\n",
            "Authorization: mmmm\r\n",
        ] {
            let status = get(port, &format!("{host}{authorization}")).await;
            assert_eq!(status, "HTTP/1.1 401 Unauthorized", "{authorization:?}");
        }
        let right = format!("{host}Authorization: Bearer {token}\r\n");
        assert_eq!(get(port, &right).await, "HTTP/1.1 200 OK");
    }
}
