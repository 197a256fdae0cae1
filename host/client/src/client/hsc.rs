//! The HSC's client: claims, heartbeats and results, for executors.
//!
//! A request over the HSC's limit is refused here, before it leaves, as
//! "request too large": the callers cut their batches to fit, and one that
//! does not is a bug to name plainly, not a network failure to retry.

use async_trait::async_trait;
use waft_core::model::*;
use waft_core::roles::{HscApi, JournalCommit, JournalPage};
use waft_core::{ServiceError, ServiceResult, TaskStatus};

use super::{WaftChannel, answer, check_size};
use crate::MAX_INTERNAL_REQUEST;
use crate::convert::*;
use crate::proto;
use crate::status::from_status;

/// The HSC, over gRPC.
#[derive(Clone)]
pub struct HscClient(proto::hsc_client::HscClient<WaftChannel>);

impl HscClient {
    const ROLE: &str = "HSC";

    /// A client of the HSC on `channel`.
    pub fn new(channel: WaftChannel) -> Self {
        Self(
            proto::hsc_client::HscClient::new(channel)
                .max_decoding_message_size(MAX_INTERNAL_REQUEST)
                .max_encoding_message_size(MAX_INTERNAL_REQUEST),
        )
    }

    fn error(status: tonic::Status) -> ServiceError {
        from_status(status, Self::ROLE)
    }
}

#[async_trait]
impl HscApi for HscClient {
    async fn task_claim_many(
        &self,
        claims: Vec<(String, i64)>,
    ) -> ServiceResult<Vec<Result<ClaimedTask, Refusal>>> {
        let request = proto::ClaimTasksRequest {
            claims: claims
                .into_iter()
                .map(|(task_id, enqueue_token)| proto::Claim {
                    task_id,
                    enqueue_token,
                })
                .collect(),
        };
        check_size(&request, MAX_INTERNAL_REQUEST, Self::ROLE)?;
        let response = self
            .0
            .clone()
            .claim_tasks(request)
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .answers
            .into_iter()
            .map(|a| match answer(a.answer, Self::ROLE)? {
                proto::claim_answer::Answer::Task(task) => Ok(Ok(claimed_from_proto(task)?)),
                proto::claim_answer::Answer::Refused(r) => Ok(Err(refusal_from_proto(r)?)),
            })
            .collect()
    }

    async fn task_heartbeat_many(
        &self,
        beats: Vec<Heartbeat>,
    ) -> ServiceResult<Vec<Result<(), Refusal>>> {
        let request = proto::HeartbeatRequest {
            beats: beats
                .into_iter()
                .map(|beat| proto::Beat {
                    task_id: beat.id,
                    lease_token: beat.lease_token,
                    progress: beat.progress,
                })
                .collect(),
        };
        check_size(&request, MAX_INTERNAL_REQUEST, Self::ROLE)?;
        let response = self
            .0
            .clone()
            .heartbeat(request)
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .answers
            .into_iter()
            .map(|a| match a.refused {
                None => Ok(Ok(())),
                Some(refusal) => Ok(Err(refusal_from_proto(refusal)?)),
            })
            .collect()
    }

    async fn task_set_result_many(
        &self,
        results: Vec<TaskResult>,
    ) -> ServiceResult<Vec<Result<TaskStatus, Refusal>>> {
        let request = proto::SetResultsRequest {
            results: results.into_iter().map(result_to_proto).collect(),
        };
        check_size(&request, MAX_INTERNAL_REQUEST, Self::ROLE)?;
        let response = self
            .0
            .clone()
            .set_results(request)
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .answers
            .into_iter()
            .map(|a| match answer(a.answer, Self::ROLE)? {
                proto::result_answer::Answer::Status(s) => Ok(Ok(status_from_proto(s)?)),
                proto::result_answer::Answer::Refused(r) => Ok(Err(refusal_from_proto(r)?)),
            })
            .collect()
    }

    async fn task_journal_write(
        &self,
        commit: JournalCommit,
    ) -> ServiceResult<Result<(), Refusal>> {
        let request = proto::WriteJournalRequest {
            task_id: commit.id,
            lease_token: commit.lease_token,
            version: commit.version,
            write: Some(journal_write_to_proto(commit.write)),
            part: commit.part.map(journal_part_to_proto),
            generation: commit.generation,
        };
        check_size(&request, MAX_INTERNAL_REQUEST, Self::ROLE)?;
        let response = self
            .0
            .clone()
            .write_journal(request)
            .await
            .map_err(Self::error)?;
        match response.into_inner().refused {
            None => Ok(Ok(())),
            Some(refusal) => Ok(Err(refusal_from_proto(refusal)?)),
        }
    }

    async fn task_journal_read(
        &self,
        page: JournalPage,
    ) -> ServiceResult<Result<Vec<JournalEntry>, Refusal>> {
        let request = proto::ReadJournalRequest {
            task_id: page.id,
            lease_token: page.lease_token,
            from: page.from,
            limit: page.limit,
        };
        let response = self
            .0
            .clone()
            .read_journal(request)
            .await
            .map_err(Self::error)?
            .into_inner();
        if let Some(refusal) = response.refused {
            return Ok(Err(refusal_from_proto(refusal)?));
        }
        Ok(Ok(response
            .entries
            .into_iter()
            .map(journal_entry_from_proto)
            .collect()))
    }

    async fn task_signal_read(
        &self,
        read: TaskSignalRead,
    ) -> ServiceResult<Result<Option<Vec<u8>>, Refusal>> {
        let request = proto::ReadSignalRequest {
            task_id: read.id,
            lease_token: read.lease_token,
            name: read.name,
            taken: read.taken,
        };
        let response = self
            .0
            .clone()
            .read_signal(request)
            .await
            .map_err(Self::error)?
            .into_inner();
        if let Some(refusal) = response.refused {
            return Ok(Err(refusal_from_proto(refusal)?));
        }
        Ok(Ok(response.payload))
    }

    async fn task_children_read(
        &self,
        read: TaskChildrenRead,
    ) -> ServiceResult<Result<ChildrenState, Refusal>> {
        let request = proto::ReadChildrenRequest {
            task_id: read.id,
            lease_token: read.lease_token,
            children: read.children,
        };
        let response = self
            .0
            .clone()
            .read_children(request)
            .await
            .map_err(Self::error)?
            .into_inner();
        if let Some(refusal) = response.refused {
            return Ok(Err(refusal_from_proto(refusal)?));
        }
        if response.live > 0 {
            return Ok(Ok(ChildrenState::Waiting {
                live: response.live,
            }));
        }
        let ends = response
            .ends
            .into_iter()
            .map(|end| {
                Ok(ChildEnd {
                    id: end.id,
                    status: status_from_proto(end.status)?,
                    output: end.output,
                    error: end.error,
                })
            })
            .collect::<ServiceResult<_>>()?;
        Ok(Ok(ChildrenState::Ended(ends)))
    }
}
