//! Waft's gRPC API (package `waft.v1`): the `.proto` contract in `proto/`,
//! its generated code, servers that put the roles of `waft-services` on the
//! network, and clients that implement the same roles' traits over it.
//!
//! Status codes are chosen in one place ([`status`]): bad input is
//! `INVALID_ARGUMENT`, unknown things `NOT_FOUND`, wrong states
//! `FAILED_PRECONDITION`, oversized requests `RESOURCE_EXHAUSTED`, a store
//! or role that is down `UNAVAILABLE`.

mod auth;
mod client;
mod convert;
mod server;
pub mod status;

pub use client::{
    Bearer, ChannelOptions, ControllerClient, FrontendClient, HscClient, WaftChannel, channel,
    channel_with,
};
pub use server::{
    ControllerService, FrontendService, HscService, MAX_FRONTEND_REQUEST, MAX_INTERNAL_REQUEST,
    Roles, ServeError, serve,
};

/// The generated code of package `waft.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("waft.v1");

    /// The descriptor set of every Waft service, for reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/waft_descriptor.bin"));
}
