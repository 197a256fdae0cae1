//! The HSC's adapter: claims, heartbeats and results from executors.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use waft_services::HscApi;

use waft_client::convert::*;
use waft_client::proto;
use waft_client::status::to_status;

/// The HSC over gRPC.
pub struct HscService(pub Arc<dyn HscApi>);

#[tonic::async_trait]
impl proto::hsc_server::Hsc for HscService {
    async fn claim_tasks(
        &self,
        request: Request<proto::ClaimTasksRequest>,
    ) -> Result<Response<proto::ClaimTasksResponse>, Status> {
        let claims = request
            .into_inner()
            .claims
            .into_iter()
            .map(|claim| (claim.task_id, claim.enqueue_token))
            .collect();
        let answers = self.0.task_claim_many(claims).await.map_err(to_status)?;
        Ok(Response::new(proto::ClaimTasksResponse {
            answers: answers
                .into_iter()
                .map(|answer| proto::ClaimAnswer {
                    answer: Some(match answer {
                        Ok(task) => proto::claim_answer::Answer::Task(claimed_to_proto(task)),
                        Err(refusal) => {
                            proto::claim_answer::Answer::Refused(refusal_to_proto(refusal))
                        }
                    }),
                })
                .collect(),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<proto::HeartbeatRequest>,
    ) -> Result<Response<proto::HeartbeatResponse>, Status> {
        let beats = request
            .into_inner()
            .beats
            .into_iter()
            .map(|beat| waft_store::Heartbeat {
                id: beat.task_id,
                lease_token: beat.lease_token,
                progress: beat.progress,
            })
            .collect();
        let answers = self.0.task_heartbeat_many(beats).await.map_err(to_status)?;
        Ok(Response::new(proto::HeartbeatResponse {
            answers: answers
                .into_iter()
                .map(|answer| proto::BeatAnswer {
                    refused: answer.err().map(refusal_to_proto),
                })
                .collect(),
        }))
    }

    async fn set_results(
        &self,
        request: Request<proto::SetResultsRequest>,
    ) -> Result<Response<proto::SetResultsResponse>, Status> {
        let results = request
            .into_inner()
            .results
            .into_iter()
            .map(result_from_proto)
            .collect::<Result<Vec<_>, _>>()
            .map_err(to_status)?;
        let answers = self
            .0
            .task_set_result_many(results)
            .await
            .map_err(to_status)?;
        Ok(Response::new(proto::SetResultsResponse {
            answers: answers
                .into_iter()
                .map(|answer| proto::ResultAnswer {
                    answer: Some(match answer {
                        Ok(status) => {
                            proto::result_answer::Answer::Status(status_to_proto(status) as i32)
                        }
                        Err(refusal) => {
                            proto::result_answer::Answer::Refused(refusal_to_proto(refusal))
                        }
                    }),
                })
                .collect(),
        }))
    }
}
