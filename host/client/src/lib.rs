//! A Rust client of Waft, and its wire contract.
//!
//! Add this crate to a service that schedules and inspects tasks:
//! [`FrontendClient`] implements the Frontend's traits ([`ClientApi`],
//! [`AdminApi`], [`ClusterApi`]) over gRPC
//! (package `waft.v1`, its `.proto` contract in `proto/`), with TLS and a
//! bearer token when the server asks for them. It brings tonic, prost and
//! Waft's model, and nothing of the platform's machinery: no WebAssembly
//! runtime, no database driver, no queue SDK.
//!
//! ```no_run
//! use waft_client::{ClientApi, FrontendClient, TaskRequest, channel};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // A local `waft dev`: plain HTTP/2, no token (see `channel_with`).
//! let frontend = FrontendClient::new(channel("127.0.0.1:7070")?);
//! let inserted = frontend
//!     .task_schedule_many(vec![TaskRequest {
//!         lambda: "send-email".into(),
//!         payload: br#"{"to": "ada@example.com"}"#.to_vec(),
//!         ..TaskRequest::default()
//!     }])
//!     .await?;
//! let task = frontend.task_get(&inserted[0].id).await?;
//! println!("{} is {}", task.id, task.status);
//! # Ok(())
//! # }
//! ```
//!
//! Status codes are chosen in one place ([`status`]): bad input is
//! `INVALID_ARGUMENT`, unknown things `NOT_FOUND`, wrong states
//! `FAILED_PRECONDITION`, oversized requests `RESOURCE_EXHAUSTED`, a store
//! or role that is down `UNAVAILABLE`; a client maps them back to the same
//! [`ServiceError`] an in-process call answers.

mod client;
pub mod convert;
pub mod status;

pub use client::{
    Bearer, ChannelOptions, ControllerClient, DEPLOY_SILENCE, DeployReport, FrontendClient,
    HscClient, MAX_ARTIFACT_BYTES, WaftChannel, channel, channel_with,
};
pub use waft_core::model::*;
pub use waft_core::roles::{
    AdminApi, ClientApi, ClusterApi, ControllerApi, CronRequest, FrontendApi, HscApi,
    JournalCommit, JournalPage, LambdaSlots, NextWork, RunAt, TaskRequest,
};
pub use waft_core::{LambdaConfig, ServiceError, ServiceResult, TaskStatus};

/// The largest request the Frontend accepts: room for a component at its
/// limit or a large batch of tasks.
pub const MAX_FRONTEND_REQUEST: usize = 80 << 20;
/// The largest request the Controller and HSC accept, and the largest
/// answer their clients accept
/// ([`MAX_INTERNAL_MESSAGE`](waft_core::limits::MAX_INTERNAL_MESSAGE)).
pub const MAX_INTERNAL_REQUEST: usize = waft_core::limits::MAX_INTERNAL_MESSAGE;

/// The generated code of package `waft.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("waft.v1");

    /// The descriptor set of every Waft service, for reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/waft_descriptor.bin"));
}
