//! gRPC clients that implement the roles' traits, so a role in another
//! process is used exactly like one in this process.
//!
//! Channels connect lazily and reconnect on their own: a client can be made
//! before its server is up, and a call while the server is down fails with
//! `Unavailable` instead of hanging.
//!
//! One client a role: `frontend.rs`, `controller.rs`, `hsc.rs`; this module
//! holds what they share: the channel, its TLS and its bearer token.

mod admin;
mod checks;
mod controller;
mod frontend;
mod hsc;

pub use controller::ControllerClient;
pub use frontend::{DEPLOY_SILENCE, DeployReport, FrontendClient, MAX_ARTIFACT_BYTES};
pub use hsc::HscClient;

use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use waft_core::{ServiceError, ServiceResult};

/// How long a client waits to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest any call may take to be answered, long polls included. A
/// streamed answer (a deploy's reports, an artifact's chunks) is bounded
/// by its first message only; its clients bound the silence between
/// messages.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection to a Waft server that presents a token with every call.
pub type WaftChannel = InterceptedService<Channel, Bearer>;

/// Adds `authorization: Bearer <token>` to every call, when there is a
/// token.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// How to reach a server beyond its address.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChannelOptions<'a> {
    /// Presented with every call, when the server requires tokens.
    pub token: Option<&'a str>,
    /// PEM certificates to trust: connect over TLS and verify the server
    /// against them. Plain HTTP/2 when absent.
    pub ca: Option<&'a [u8]>,
}

/// A channel to `address` (`host:port`, or a URL), without a token or TLS.
/// Call it within a tokio runtime.
///
/// ```no_run
/// # #[tokio::main] async fn main() {
/// let channel = waft_client::channel("127.0.0.1:7070").unwrap();
/// # drop(channel); }
/// ```
pub fn channel(address: &str) -> Result<WaftChannel, ServiceError> {
    channel_with(address, ChannelOptions::default())
}

/// A channel to `address` with a token and TLS as `options` say.
pub fn channel_with(
    address: &str,
    options: ChannelOptions<'_>,
) -> Result<WaftChannel, ServiceError> {
    let bearer = options
        .token
        .map(|token| {
            format!("Bearer {token}")
                .parse::<MetadataValue<Ascii>>()
                .map_err(|_| {
                    ServiceError::InvalidArgument(
                        "a token is printable ASCII without spaces".into(),
                    )
                })
        })
        .transpose()?;
    Ok(InterceptedService::new(
        connect(address, options.ca)?,
        Bearer(bearer),
    ))
}

pub(crate) fn connect(address: &str, ca: Option<&[u8]>) -> Result<Channel, ServiceError> {
    let scheme = if ca.is_some() { "https" } else { "http" };
    let url = if address.contains("://") {
        address.to_owned()
    } else {
        format!("{scheme}://{address}")
    };
    let endpoint = Endpoint::from_shared(url).map_err(|error| {
        ServiceError::InvalidArgument(format!(
            "invalid server address {address:?} (expected host:port): {error}"
        ))
    })?;
    let endpoint = match ca {
        None => endpoint,
        Some(pem) => endpoint
            .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
            .map_err(|error| {
                ServiceError::InvalidArgument(format!("cannot use the CA certificate: {error}"))
            })?,
    };
    Ok(endpoint
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .connect_lazy())
}

/// Refuses a request over `limit` bytes before it leaves. Sent, it would
/// cross the network to be refused whole by its receiver; and over the
/// client's own encoding limit, tonic ends the call in an HTTP/2 reset that
/// says nothing of its size.
pub(crate) fn check_size(
    request: &impl prost::Message,
    limit: usize,
    role: &str,
) -> ServiceResult<()> {
    let size = request.encoded_len();
    if size > limit {
        return Err(ServiceError::ResourceExhausted(format!(
            "request too large for the {role}: {size} bytes, the limit is {limit} bytes"
        )));
    }
    Ok(())
}

pub(crate) fn answer<T>(field: Option<T>, role: &str) -> ServiceResult<T> {
    field.ok_or_else(|| ServiceError::Internal(format!("the {role} sent an incomplete answer")))
}
