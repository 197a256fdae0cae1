//! The HSC's adapter: claims, heartbeats, results and journals from
//! executors.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use waft_core::model::{ChildrenState, TaskChildrenRead, TaskSignalRead};
use waft_services::{HscApi, JournalCommit, JournalPage};

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

    async fn write_journal(
        &self,
        request: Request<proto::WriteJournalRequest>,
    ) -> Result<Response<proto::WriteJournalResponse>, Status> {
        let request = request.into_inner();
        let write = required(request.write, "write").map_err(to_status)?;
        let commit = JournalCommit {
            id: request.task_id,
            lease_token: request.lease_token,
            version: request.version,
            write: journal_write_from_proto(write),
            part: request.part.map(journal_part_from_proto),
            generation: request.generation,
        };
        let answer = self.0.task_journal_write(commit).await.map_err(to_status)?;
        Ok(Response::new(proto::WriteJournalResponse {
            refused: answer.err().map(refusal_to_proto),
        }))
    }

    async fn read_journal(
        &self,
        request: Request<proto::ReadJournalRequest>,
    ) -> Result<Response<proto::ReadJournalResponse>, Status> {
        let request = request.into_inner();
        let page = JournalPage {
            id: request.task_id,
            lease_token: request.lease_token,
            from: request.from,
            limit: request.limit,
        };
        let answer = self.0.task_journal_read(page).await.map_err(to_status)?;
        Ok(Response::new(match answer {
            Ok(entries) => proto::ReadJournalResponse {
                entries: entries.into_iter().map(journal_entry_to_proto).collect(),
                refused: None,
            },
            Err(refusal) => proto::ReadJournalResponse {
                entries: Vec::new(),
                refused: Some(refusal_to_proto(refusal)),
            },
        }))
    }

    async fn read_signal(
        &self,
        request: Request<proto::ReadSignalRequest>,
    ) -> Result<Response<proto::ReadSignalResponse>, Status> {
        let request = request.into_inner();
        let read = TaskSignalRead {
            id: request.task_id,
            lease_token: request.lease_token,
            name: request.name,
            taken: request.taken,
        };
        let answer = self.0.task_signal_read(read).await.map_err(to_status)?;
        Ok(Response::new(match answer {
            Ok(payload) => proto::ReadSignalResponse {
                payload,
                refused: None,
            },
            Err(refusal) => proto::ReadSignalResponse {
                payload: None,
                refused: Some(refusal_to_proto(refusal)),
            },
        }))
    }

    async fn read_children(
        &self,
        request: Request<proto::ReadChildrenRequest>,
    ) -> Result<Response<proto::ReadChildrenResponse>, Status> {
        let request = request.into_inner();
        let read = TaskChildrenRead {
            id: request.task_id,
            lease_token: request.lease_token,
            children: request.children,
        };
        let answer = self.0.task_children_read(read).await.map_err(to_status)?;
        Ok(Response::new(match answer {
            Ok(ChildrenState::Waiting { live }) => proto::ReadChildrenResponse {
                live,
                ..Default::default()
            },
            Ok(ChildrenState::Ended(ends)) => proto::ReadChildrenResponse {
                ends: ends
                    .into_iter()
                    .map(|end| proto::ChildEnd {
                        id: end.id,
                        status: status_to_proto(end.status).into(),
                        output: end.output,
                        error: end.error,
                    })
                    .collect(),
                ..Default::default()
            },
            Err(refusal) => proto::ReadChildrenResponse {
                refused: Some(refusal_to_proto(refusal)),
                ..Default::default()
            },
        }))
    }
}
