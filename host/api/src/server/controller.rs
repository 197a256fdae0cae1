//! The Controller's adapter: `NextWork` for executors.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};
use waft_services::{ControllerApi, LambdaSlots, NextWork};

use waft_client::convert::*;
use waft_client::proto;
use waft_client::status::to_status;

/// The Controller over gRPC.
pub struct ControllerService(pub Arc<dyn ControllerApi>);

#[tonic::async_trait]
impl proto::controller_server::Controller for ControllerService {
    async fn next_work(
        &self,
        request: Request<proto::NextWorkRequest>,
    ) -> Result<Response<proto::NextWorkResponse>, Status> {
        let request = request.into_inner();
        let work = NextWork {
            slots: request
                .slots
                .into_iter()
                .map(|slot| LambdaSlots {
                    lambda: slot.lambda,
                    free: slot.free,
                })
                .collect(),
            max_tasks: if request.max_tasks == 0 {
                u32::MAX
            } else {
                request.max_tasks
            },
            wait: Duration::from_millis(u64::from(request.wait_ms)),
        };
        let tasks = self.0.next_work(work).await.map_err(to_status)?;
        Ok(Response::new(proto::NextWorkResponse {
            tasks: tasks.into_iter().map(claimed_to_proto).collect(),
        }))
    }
}
