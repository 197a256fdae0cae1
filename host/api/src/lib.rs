//! Waft's roles on the network: gRPC servers that put the roles of
//! `waft-services` behind the contract of `waft-client` (which also holds
//! the clients, the generated code and the status mapping), with
//! authentication in front of every service.

mod auth;
mod server;

pub use server::{
    AllowedHosts, ControllerService, FrontendService, HscService, Roles, ServeError, serve,
};
pub use waft_client::{
    Bearer, ChannelOptions, ControllerClient, FrontendClient, HscClient, MAX_FRONTEND_REQUEST,
    MAX_INTERNAL_REQUEST, WaftChannel, channel, channel_with, proto, status,
};
