//! gRPC clients that implement the roles' traits, so a role in another
//! process is used exactly like one in this process.
//!
//! Channels connect lazily and reconnect on their own: a client can be made
//! before its server is up, and a call while the server is down fails with
//! `Unavailable` instead of hanging.

use std::time::Duration;

use async_trait::async_trait;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use waft_core::model::{
    Attempt, ClaimedTask, Cron, DeadSelector, Gate, GateState, Heartbeat, Lambda, Refusal, Task,
    TaskInserted, TaskList, TaskResult, Token, TokenRole,
};
use waft_core::roles::{ControllerApi, CronRequest, FrontendApi, HscApi, NextWork, TaskRequest};
use waft_core::{LambdaConfig, TaskStatus};
use waft_core::{ServiceError, ServiceResult};

use crate::convert::*;
use crate::proto;
use crate::status::from_status;
use crate::{MAX_FRONTEND_REQUEST, MAX_INTERNAL_REQUEST};

/// How long a client waits to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest any call may take, long polls included.
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

fn connect(address: &str, ca: Option<&[u8]>) -> Result<Channel, ServiceError> {
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

fn answer<T>(field: Option<T>, role: &str) -> ServiceResult<T> {
    field.ok_or_else(|| ServiceError::Internal(format!("the {role} sent an incomplete answer")))
}

/// The Frontend, over gRPC.
#[derive(Clone)]
pub struct FrontendClient(proto::frontend_client::FrontendClient<WaftChannel>);

impl FrontendClient {
    const ROLE: &str = "Frontend";

    /// A client of the Frontend on `channel`.
    pub fn new(channel: WaftChannel) -> Self {
        Self(
            proto::frontend_client::FrontendClient::new(channel)
                .max_decoding_message_size(MAX_FRONTEND_REQUEST)
                .max_encoding_message_size(MAX_FRONTEND_REQUEST),
        )
    }

    fn error(status: tonic::Status) -> ServiceError {
        from_status(status, Self::ROLE)
    }
}

#[async_trait]
impl FrontendApi for FrontendClient {
    async fn task_schedule_many(
        &self,
        tasks: Vec<TaskRequest>,
    ) -> ServiceResult<Vec<TaskInserted>> {
        let request = proto::ScheduleBatchRequest {
            tasks: tasks.into_iter().map(new_task_to_proto).collect(),
        };
        let response = self
            .0
            .clone()
            .schedule_batch(request)
            .await
            .map_err(Self::error)?;
        Ok(response
            .into_inner()
            .tasks
            .into_iter()
            .map(|t| TaskInserted {
                id: t.id,
                created: t.created,
            })
            .collect())
    }

    async fn task_get(&self, id: &str) -> ServiceResult<Task> {
        let response = self
            .0
            .clone()
            .get_task(proto::GetTaskRequest { id: id.to_owned() })
            .await
            .map_err(Self::error)?;
        task_from_proto(answer(response.into_inner().task, Self::ROLE)?)
    }

    async fn task_list(&self, filter: TaskList) -> ServiceResult<Vec<Task>> {
        let request = proto::ListTasksRequest {
            lambda: filter.lambda,
            collection: filter.collection,
            status: filter.status.map(|s| status_to_proto(s) as i32),
            parent_id: filter.parent_id,
            after: filter.after,
            limit: filter.limit,
        };
        let response = self
            .0
            .clone()
            .list_tasks(request)
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .tasks
            .into_iter()
            .map(task_from_proto)
            .collect()
    }

    async fn task_cancel(&self, id: &str) -> ServiceResult<Task> {
        let response = self
            .0
            .clone()
            .cancel_task(proto::CancelTaskRequest { id: id.to_owned() })
            .await
            .map_err(Self::error)?;
        task_from_proto(answer(response.into_inner().task, Self::ROLE)?)
    }

    async fn lambda_deploy(
        &self,
        name: &str,
        component: Vec<u8>,
        config: LambdaConfig,
    ) -> ServiceResult<Lambda> {
        let request = proto::DeployLambdaRequest {
            name: name.to_owned(),
            component,
            config: Some(config_to_proto(&config)),
        };
        let response = self
            .0
            .clone()
            .deploy_lambda(request)
            .await
            .map_err(Self::error)?;
        lambda_from_proto(answer(response.into_inner().lambda, Self::ROLE)?)
    }

    async fn lambda_get(&self, name: &str, version: Option<u32>) -> ServiceResult<Lambda> {
        let request = proto::GetLambdaRequest {
            name: name.to_owned(),
            version,
        };
        let response = self
            .0
            .clone()
            .get_lambda(request)
            .await
            .map_err(Self::error)?;
        lambda_from_proto(answer(response.into_inner().lambda, Self::ROLE)?)
    }

    async fn lambda_rollback(&self, name: &str, to: Option<u32>) -> ServiceResult<Lambda> {
        let response = self
            .0
            .clone()
            .rollback_lambda(proto::RollbackLambdaRequest {
                name: name.to_owned(),
                version: to,
            })
            .await
            .map_err(Self::error)?;
        lambda_from_proto(answer(response.into_inner().lambda, Self::ROLE)?)
    }

    async fn lambda_versions(&self, name: &str) -> ServiceResult<Vec<Lambda>> {
        let response = self
            .0
            .clone()
            .list_versions(proto::ListVersionsRequest {
                name: name.to_owned(),
            })
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .versions
            .into_iter()
            .map(lambda_from_proto)
            .collect()
    }

    async fn lambda_list(&self) -> ServiceResult<Vec<Lambda>> {
        let response = self
            .0
            .clone()
            .list_lambdas(proto::ListLambdasRequest {})
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .lambdas
            .into_iter()
            .map(lambda_from_proto)
            .collect()
    }

    async fn component_get(&self, digest: &str) -> ServiceResult<Vec<u8>> {
        let response = self
            .0
            .clone()
            .get_component(proto::GetComponentRequest {
                digest: digest.to_owned(),
            })
            .await
            .map_err(Self::error)?;
        Ok(response.into_inner().component)
    }

    async fn gate_set(
        &self,
        lambda: &str,
        collection: Option<&str>,
        state: GateState,
    ) -> ServiceResult<u64> {
        let request = proto::SetGateRequest {
            lambda: lambda.to_owned(),
            collection: collection.map(str::to_owned),
            state: gate_state_to_proto(state) as i32,
        };
        let response = self
            .0
            .clone()
            .set_gate(request)
            .await
            .map_err(Self::error)?;
        Ok(response.into_inner().released)
    }

    async fn gate_list(&self) -> ServiceResult<Vec<Gate>> {
        let response = self
            .0
            .clone()
            .list_gates(proto::ListGatesRequest {})
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .gates
            .into_iter()
            .map(gate_from_proto)
            .collect()
    }

    async fn dead_redrive(
        &self,
        selector: DeadSelector,
        version: Option<u32>,
    ) -> ServiceResult<u64> {
        let request = match selector {
            DeadSelector::Ids(ids) => proto::RedriveDeadRequest {
                ids,
                version,
                ..Default::default()
            },
            DeadSelector::Filter { lambda, collection } => proto::RedriveDeadRequest {
                ids: Vec::new(),
                lambda: Some(lambda),
                collection,
                version,
            },
        };
        let response = self
            .0
            .clone()
            .redrive_dead(request)
            .await
            .map_err(Self::error)?;
        Ok(response.into_inner().redriven)
    }

    async fn task_attempts(&self, id: &str) -> ServiceResult<Vec<Attempt>> {
        let response = self
            .0
            .clone()
            .list_attempts(proto::ListAttemptsRequest { id: id.to_owned() })
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .attempts
            .into_iter()
            .map(attempt_from_proto)
            .collect()
    }

    async fn token_create(
        &self,
        name: &str,
        role: TokenRole,
        lambdas: Vec<String>,
    ) -> ServiceResult<(Token, String)> {
        let response = self
            .0
            .clone()
            .create_token(proto::CreateTokenRequest {
                name: name.to_owned(),
                role: token_role_to_proto(role) as i32,
                lambdas,
            })
            .await
            .map_err(Self::error)?
            .into_inner();
        let token = token_from_proto(answer(response.token, Self::ROLE)?)?;
        Ok((token, response.secret))
    }

    async fn token_list(&self) -> ServiceResult<Vec<Token>> {
        let response = self
            .0
            .clone()
            .list_tokens(proto::ListTokensRequest {})
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .tokens
            .into_iter()
            .map(token_from_proto)
            .collect()
    }

    async fn token_revoke(&self, id: &str) -> ServiceResult<()> {
        self.0
            .clone()
            .revoke_token(proto::RevokeTokenRequest { id: id.to_owned() })
            .await
            .map_err(Self::error)?;
        Ok(())
    }

    async fn cron_create(&self, request: CronRequest) -> ServiceResult<Cron> {
        let response = self
            .0
            .clone()
            .create_cron(cron_request_to_proto(request))
            .await
            .map_err(Self::error)?;
        cron_from_proto(required(response.into_inner().cron, "cron")?)
    }

    async fn cron_list(&self) -> ServiceResult<Vec<Cron>> {
        let response = self
            .0
            .clone()
            .list_crons(proto::ListCronsRequest {})
            .await
            .map_err(Self::error)?;
        response
            .into_inner()
            .crons
            .into_iter()
            .map(cron_from_proto)
            .collect()
    }

    async fn cron_delete(&self, id: &str) -> ServiceResult<()> {
        self.0
            .clone()
            .delete_cron(proto::DeleteCronRequest { id: id.to_owned() })
            .await
            .map_err(Self::error)?;
        Ok(())
    }
}

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
}
