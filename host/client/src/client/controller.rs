//! The Controller's client: `NextWork`, for executors.

use async_trait::async_trait;
use waft_core::ServiceResult;
use waft_core::model::*;
use waft_core::roles::{ControllerApi, NextWork};

use super::WaftChannel;
use crate::MAX_INTERNAL_REQUEST;
use crate::convert::*;
use crate::proto;
use crate::status::from_status;

/// The Controller, over gRPC.
#[derive(Clone)]
pub struct ControllerClient(proto::controller_client::ControllerClient<WaftChannel>);

impl ControllerClient {
    /// A client of the Controller on `channel`.
    pub fn new(channel: WaftChannel) -> Self {
        Self(
            proto::controller_client::ControllerClient::new(channel)
                .max_decoding_message_size(MAX_INTERNAL_REQUEST),
        )
    }
}

#[async_trait]
impl ControllerApi for ControllerClient {
    async fn next_work(&self, request: NextWork) -> ServiceResult<Vec<ClaimedTask>> {
        let request = proto::NextWorkRequest {
            slots: request
                .slots
                .into_iter()
                .map(|slot| proto::LambdaSlots {
                    lambda: slot.lambda,
                    free: slot.free,
                })
                .collect(),
            wait_ms: u32::try_from(request.wait.as_millis()).unwrap_or(u32::MAX),
            max_tasks: request.max_tasks,
        };
        let response = self
            .0
            .clone()
            .next_work(request)
            .await
            .map_err(|status| from_status(status, "Controller"))?;
        response
            .into_inner()
            .tasks
            .into_iter()
            .map(claimed_from_proto)
            .collect()
    }
}
