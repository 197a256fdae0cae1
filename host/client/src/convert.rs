//! Between the wire (`proto`) and Waft's own types, in both directions.
//!
//! Decoding checks what the wire cannot say (a priority is one byte, a
//! status is known, a required message is present) and answers a precise
//! `InvalidArgument`; encoding cannot fail.

use std::time::Duration;

use waft_core::model::{
    Attempt, AttemptOutcome, ClaimedTask, Continuation, Cron, Gate, GateState, Lambda, Millis,
    Refusal, ResultOutcome, Task, TaskResult, Token, TokenRole,
};
use waft_core::roles::{CronRequest, RunAt, TaskRequest};
use waft_core::{Backoff, ByteSize, LambdaConfig, Limits, TaskStatus};
use waft_core::{ServiceError, ServiceResult};

use crate::proto;

fn invalid(message: impl Into<String>) -> ServiceError {
    ServiceError::InvalidArgument(message.into())
}

/// A required message field.
pub fn required<T>(field: Option<T>, name: &str) -> ServiceResult<T> {
    field.ok_or_else(|| invalid(format!("{name} is required")))
}

pub fn priority(value: u32) -> ServiceResult<u8> {
    u8::try_from(value).map_err(|_| invalid(format!("priority {value} is out of range")))
}

pub fn status_to_proto(status: TaskStatus) -> proto::TaskStatus {
    match status {
        TaskStatus::New => proto::TaskStatus::New,
        TaskStatus::Enqueued => proto::TaskStatus::Enqueued,
        TaskStatus::Claimed => proto::TaskStatus::Claimed,
        TaskStatus::Processing => proto::TaskStatus::Processing,
        TaskStatus::RetriableFailure => proto::TaskStatus::RetriableFailure,
        TaskStatus::Success => proto::TaskStatus::Success,
        TaskStatus::FatalFailure => proto::TaskStatus::FatalFailure,
        TaskStatus::Dead => proto::TaskStatus::Dead,
        TaskStatus::Dropped => proto::TaskStatus::Dropped,
        TaskStatus::Cancelled => proto::TaskStatus::Cancelled,
    }
}

pub fn status_from_proto(value: i32) -> ServiceResult<TaskStatus> {
    Ok(
        match proto::TaskStatus::try_from(value)
            .map_err(|_| invalid(format!("unknown task status {value}")))?
        {
            proto::TaskStatus::Unspecified => return Err(invalid("task status is unspecified")),
            proto::TaskStatus::New => TaskStatus::New,
            proto::TaskStatus::Enqueued => TaskStatus::Enqueued,
            proto::TaskStatus::Claimed => TaskStatus::Claimed,
            proto::TaskStatus::Processing => TaskStatus::Processing,
            proto::TaskStatus::RetriableFailure => TaskStatus::RetriableFailure,
            proto::TaskStatus::Success => TaskStatus::Success,
            proto::TaskStatus::FatalFailure => TaskStatus::FatalFailure,
            proto::TaskStatus::Dead => TaskStatus::Dead,
            proto::TaskStatus::Dropped => TaskStatus::Dropped,
            proto::TaskStatus::Cancelled => TaskStatus::Cancelled,
        },
    )
}

pub fn task_to_proto(task: Task) -> proto::Task {
    proto::Task {
        id: task.id,
        lambda: task.lambda,
        collection: task.collection,
        priority: u32::from(task.priority),
        payload: task.payload,
        status: status_to_proto(task.status) as i32,
        attempt: task.attempt,
        max_attempts: task.max_attempts,
        scheduled_at_ms: task.scheduled_at,
        next_trigger_at_ms: task.next_trigger_at,
        held: task.held,
        created_at_ms: task.created_at,
        enqueued_at_ms: task.enqueued_at,
        claimed_at_ms: task.claimed_at,
        heartbeat_at_ms: task.heartbeat_at,
        finished_at_ms: task.finished_at,
        progress: task.progress,
        last_error: task.last_error,
        output: task.output,
        parent_id: task.parent_id,
        idempotency_key: task.idempotency_key,
        schedule_id: task.cron_id,
        log: task.log,
        version: task.version,
        then: task.continuation.map(continuation_to_proto),
    }
}

pub fn task_from_proto(task: proto::Task) -> ServiceResult<Task> {
    Ok(Task {
        status: status_from_proto(task.status)?,
        priority: priority(task.priority)?,
        id: task.id,
        lambda: task.lambda,
        collection: task.collection,
        payload: task.payload,
        attempt: task.attempt,
        max_attempts: task.max_attempts,
        scheduled_at: task.scheduled_at_ms,
        next_trigger_at: task.next_trigger_at_ms,
        held: task.held,
        // Internal to the store; never on the wire.
        enqueue_token: 0,
        lease_token: 0,
        created_at: task.created_at_ms,
        enqueued_at: task.enqueued_at_ms,
        claimed_at: task.claimed_at_ms,
        heartbeat_at: task.heartbeat_at_ms,
        finished_at: task.finished_at_ms,
        progress: task.progress,
        last_error: task.last_error,
        log: task.log,
        output: task.output,
        parent_id: task.parent_id,
        idempotency_key: task.idempotency_key,
        cron_id: task.schedule_id,
        version: task.version,
        continuation: task.then.map(continuation_from_proto).transpose()?,
    })
}

pub fn new_task_from_proto(task: proto::NewTask) -> ServiceResult<TaskRequest> {
    let run_at = match task.when {
        None => RunAt::Now,
        Some(proto::new_task::When::RunAtMs(at)) => RunAt::At(at),
        Some(proto::new_task::When::DelayMs(delay)) => RunAt::After(Duration::from_millis(delay)),
    };
    Ok(TaskRequest {
        priority: task.priority.map(priority).transpose()?,
        lambda: task.lambda,
        payload: task.payload,
        collection: task.collection,
        run_at,
        idempotency_key: task.idempotency_key,
        parent_id: task.parent_id,
        version: task.version,
        parent_lease: task.parent_lease,
        then: task.then.map(continuation_from_proto).transpose()?,
    })
}

pub fn new_task_to_proto(task: TaskRequest) -> proto::NewTask {
    proto::NewTask {
        lambda: task.lambda,
        payload: task.payload,
        collection: task.collection,
        priority: task.priority.map(u32::from),
        when: match task.run_at {
            RunAt::Now => None,
            RunAt::At(at) => Some(proto::new_task::When::RunAtMs(at)),
            RunAt::After(delay) => Some(proto::new_task::When::DelayMs(
                u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            )),
        },
        idempotency_key: task.idempotency_key,
        parent_id: task.parent_id,
        version: task.version,
        parent_lease: task.parent_lease,
        then: task.then.map(continuation_to_proto),
    }
}

pub fn continuation_to_proto(then: Continuation) -> proto::Continuation {
    proto::Continuation {
        lambda: then.lambda,
        collection: then.collection,
        priority: then.priority.map(u32::from),
    }
}

pub fn continuation_from_proto(then: proto::Continuation) -> ServiceResult<Continuation> {
    Ok(Continuation {
        priority: then.priority.map(priority).transpose()?,
        lambda: then.lambda,
        collection: then.collection,
    })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Every field set, so a reader sees the whole effective config.
pub fn config_to_proto(config: &LambdaConfig) -> proto::LambdaConfig {
    proto::LambdaConfig {
        max_memory_bytes: Some(config.limits.max_memory.bytes()),
        timeout_ms: Some(millis(config.limits.timeout)),
        fuel: Some(config.limits.fuel.unwrap_or(0)),
        max_output_bytes: Some(config.limits.max_output.bytes()),
        max_log_bytes: Some(config.limits.max_log.bytes()),
        max_attempts: Some(config.max_attempts),
        backoff_base_ms: Some(millis(config.backoff.base)),
        backoff_factor: Some(config.backoff.factor),
        backoff_max_ms: Some(millis(config.backoff.max)),
        priorities: Some(u32::from(config.priorities)),
        default_priority: Some(u32::from(config.default_priority)),
        max_payload_bytes: Some(config.max_payload.bytes()),
        concurrency: Some(config.concurrency),
        quota_per_sec: config.quota_per_sec,
        allowed_children: config.allowed_children.clone(),
    }
}

/// Absent fields take their defaults; the result is not yet validated.
pub fn config_from_proto(config: Option<proto::LambdaConfig>) -> ServiceResult<LambdaConfig> {
    let config = config.unwrap_or_default();
    let defaults = LambdaConfig::default();
    let small = |value: Option<u32>, name: &str, default: u8| -> ServiceResult<u8> {
        value.map_or(Ok(default), |v| {
            u8::try_from(v).map_err(|_| invalid(format!("{name} {v} is out of range")))
        })
    };
    Ok(LambdaConfig {
        limits: Limits {
            max_memory: config
                .max_memory_bytes
                .map_or(defaults.limits.max_memory, ByteSize::b),
            timeout: config
                .timeout_ms
                .map_or(defaults.limits.timeout, Duration::from_millis),
            fuel: config.fuel.filter(|fuel| *fuel > 0),
            max_output: config
                .max_output_bytes
                .map_or(defaults.limits.max_output, ByteSize::b),
            max_log: config
                .max_log_bytes
                .map_or(defaults.limits.max_log, ByteSize::b),
        },
        max_attempts: config.max_attempts.unwrap_or(defaults.max_attempts),
        backoff: Backoff {
            base: config
                .backoff_base_ms
                .map_or(defaults.backoff.base, Duration::from_millis),
            factor: config.backoff_factor.unwrap_or(defaults.backoff.factor),
            max: config
                .backoff_max_ms
                .map_or(defaults.backoff.max, Duration::from_millis),
        },
        priorities: small(config.priorities, "priorities", defaults.priorities)?,
        default_priority: small(
            config.default_priority,
            "default_priority",
            defaults.default_priority,
        )?,
        max_payload: config
            .max_payload_bytes
            .map_or(defaults.max_payload, ByteSize::b),
        concurrency: config.concurrency.unwrap_or(defaults.concurrency),
        quota_per_sec: config.quota_per_sec,
        allowed_children: config.allowed_children,
    })
}

pub fn lambda_to_proto(lambda: Lambda) -> proto::Lambda {
    proto::Lambda {
        config: Some(config_to_proto(&lambda.config)),
        name: lambda.name,
        version: lambda.version,
        digest: lambda.digest,
        created_at_ms: lambda.created_at,
    }
}

pub fn lambda_from_proto(lambda: proto::Lambda) -> ServiceResult<Lambda> {
    Ok(Lambda {
        config: config_from_proto(Some(required(lambda.config, "lambda.config")?))?,
        name: lambda.name,
        version: lambda.version,
        digest: lambda.digest,
        created_at: lambda.created_at_ms,
    })
}

pub fn gate_state_to_proto(state: GateState) -> proto::GateState {
    match state {
        GateState::Open => proto::GateState::Open,
        GateState::Paused => proto::GateState::Paused,
        GateState::Dropped => proto::GateState::Dropped,
    }
}

pub fn gate_state_from_proto(value: i32) -> ServiceResult<GateState> {
    match proto::GateState::try_from(value) {
        Ok(proto::GateState::Open) => Ok(GateState::Open),
        Ok(proto::GateState::Paused) => Ok(GateState::Paused),
        Ok(proto::GateState::Dropped) => Ok(GateState::Dropped),
        _ => Err(invalid(format!(
            "gate state {value} is not one of open, paused, dropped"
        ))),
    }
}

pub fn gate_to_proto(gate: Gate) -> proto::Gate {
    proto::Gate {
        state: gate_state_to_proto(gate.state) as i32,
        lambda: gate.lambda,
        collection: gate.collection,
        updated_at_ms: gate.updated_at,
    }
}

pub fn gate_from_proto(gate: proto::Gate) -> ServiceResult<Gate> {
    Ok(Gate {
        state: gate_state_from_proto(gate.state)?,
        lambda: gate.lambda,
        collection: gate.collection,
        updated_at: gate.updated_at_ms,
    })
}

pub fn claimed_to_proto(task: ClaimedTask) -> proto::ClaimedTask {
    proto::ClaimedTask {
        id: task.id,
        lambda: task.lambda,
        lambda_version: task.lambda_version,
        collection: task.collection,
        priority: u32::from(task.priority),
        payload: task.payload,
        attempt: task.attempt,
        scheduled_at_ms: task.scheduled_at,
        lease_token: task.lease_token,
    }
}

pub fn claimed_from_proto(task: proto::ClaimedTask) -> ServiceResult<ClaimedTask> {
    Ok(ClaimedTask {
        priority: priority(task.priority)?,
        id: task.id,
        lambda: task.lambda,
        lambda_version: task.lambda_version,
        collection: task.collection,
        payload: task.payload,
        attempt: task.attempt,
        scheduled_at: task.scheduled_at_ms,
        lease_token: task.lease_token,
    })
}

pub fn refusal_to_proto(refusal: Refusal) -> proto::Refusal {
    use proto::refusal::Reason;
    proto::Refusal {
        reason: Some(match refusal {
            Refusal::NotFound => Reason::NotFound(true),
            Refusal::WrongState(status) => Reason::WrongState(status_to_proto(status) as i32),
            Refusal::StaleEnqueueToken { current } => Reason::StaleEnqueueToken(current),
            Refusal::StaleLease { current } => Reason::StaleLease(current),
            Refusal::Held => Reason::Held(true),
        }),
    }
}

pub fn refusal_from_proto(refusal: proto::Refusal) -> ServiceResult<Refusal> {
    use proto::refusal::Reason;
    Ok(match required(refusal.reason, "refusal.reason")? {
        Reason::NotFound(_) => Refusal::NotFound,
        Reason::WrongState(status) => Refusal::WrongState(status_from_proto(status)?),
        Reason::StaleEnqueueToken(current) => Refusal::StaleEnqueueToken { current },
        Reason::StaleLease(current) => Refusal::StaleLease { current },
        Reason::Held(_) => Refusal::Held,
    })
}

pub fn result_to_proto(result: TaskResult) -> proto::Result {
    use proto::result::Outcome;
    proto::Result {
        task_id: result.id,
        lease_token: result.lease_token,
        outcome: Some(match result.outcome {
            ResultOutcome::Success { output } => Outcome::Success(proto::Success { output }),
            ResultOutcome::Retriable { error, retry_after } => Outcome::Retriable(proto::Failure {
                error,
                retry_after_ms: retry_after.map(millis),
            }),
            ResultOutcome::Fatal { error } => Outcome::Fatal(proto::Failure {
                error,
                retry_after_ms: None,
            }),
        }),
        log: result.log,
    }
}

pub fn result_from_proto(result: proto::Result) -> ServiceResult<TaskResult> {
    use proto::result::Outcome;
    Ok(TaskResult {
        outcome: match required(result.outcome, "result.outcome")? {
            Outcome::Success(success) => ResultOutcome::Success {
                output: success.output,
            },
            Outcome::Retriable(failure) => ResultOutcome::Retriable {
                error: failure.error,
                retry_after: failure.retry_after_ms.map(Duration::from_millis),
            },
            Outcome::Fatal(failure) => ResultOutcome::Fatal {
                error: failure.error,
            },
        },
        id: result.task_id,
        lease_token: result.lease_token,
        log: result.log,
    })
}

pub fn cron_to_proto(schedule: Cron) -> proto::Cron {
    proto::Cron {
        id: schedule.id,
        lambda: schedule.lambda,
        expression: schedule.cron,
        timezone: schedule.timezone,
        payload: schedule.payload,
        collection: schedule.collection,
        priority: schedule.priority.map(u32::from),
        catch_up: schedule.catch_up,
        next_at_ms: (schedule.next_at != Millis::MAX).then_some(schedule.next_at),
        created_at_ms: schedule.created_at,
    }
}

pub fn cron_from_proto(cron: proto::Cron) -> ServiceResult<Cron> {
    Ok(Cron {
        id: cron.id,
        lambda: cron.lambda,
        cron: cron.expression,
        timezone: cron.timezone,
        payload: cron.payload,
        collection: cron.collection,
        priority: cron.priority.map(priority).transpose()?,
        catch_up: cron.catch_up,
        next_at: cron.next_at_ms.unwrap_or(Millis::MAX),
        created_at: cron.created_at_ms,
    })
}

pub fn cron_request_to_proto(request: CronRequest) -> proto::CreateCronRequest {
    proto::CreateCronRequest {
        lambda: request.lambda,
        expression: request.cron,
        timezone: request.timezone,
        payload: request.payload,
        collection: request.collection,
        priority: request.priority.map(u32::from),
        catch_up: request.catch_up,
    }
}

pub fn cron_request_from_proto(request: proto::CreateCronRequest) -> ServiceResult<CronRequest> {
    Ok(CronRequest {
        lambda: request.lambda,
        cron: request.expression,
        timezone: request.timezone,
        payload: request.payload,
        collection: request.collection,
        priority: request.priority.map(priority).transpose()?,
        catch_up: request.catch_up,
    })
}

pub fn attempt_to_proto(attempt: Attempt) -> proto::Attempt {
    let outcome = match attempt.outcome {
        AttemptOutcome::Success => proto::AttemptOutcome::Success,
        AttemptOutcome::Retriable => proto::AttemptOutcome::Retriable,
        AttemptOutcome::Fatal => proto::AttemptOutcome::Fatal,
        AttemptOutcome::Lost => proto::AttemptOutcome::Lost,
    };
    proto::Attempt {
        attempt: attempt.attempt,
        lease_token: attempt.lease_token,
        outcome: outcome as i32,
        error: attempt.error,
        log: attempt.log,
        started_at_ms: attempt.started_at,
        ended_at_ms: attempt.ended_at,
    }
}

pub fn attempt_from_proto(attempt: proto::Attempt) -> ServiceResult<Attempt> {
    let outcome = match proto::AttemptOutcome::try_from(attempt.outcome) {
        Ok(proto::AttemptOutcome::Success) => AttemptOutcome::Success,
        Ok(proto::AttemptOutcome::Retriable) => AttemptOutcome::Retriable,
        Ok(proto::AttemptOutcome::Fatal) => AttemptOutcome::Fatal,
        Ok(proto::AttemptOutcome::Lost) => AttemptOutcome::Lost,
        _ => {
            return Err(invalid(format!(
                "attempt outcome {} is unknown",
                attempt.outcome
            )));
        }
    };
    Ok(Attempt {
        attempt: attempt.attempt,
        lease_token: attempt.lease_token,
        outcome,
        error: attempt.error,
        log: attempt.log,
        started_at: attempt.started_at_ms,
        ended_at: attempt.ended_at_ms,
    })
}

pub fn token_role_to_proto(role: TokenRole) -> proto::TokenRole {
    match role {
        TokenRole::Admin => proto::TokenRole::Admin,
        TokenRole::Owner => proto::TokenRole::Owner,
        TokenRole::Scheduler => proto::TokenRole::Scheduler,
    }
}

pub fn token_role_from_proto(value: i32) -> ServiceResult<TokenRole> {
    match proto::TokenRole::try_from(value) {
        Ok(proto::TokenRole::Admin) => Ok(TokenRole::Admin),
        Ok(proto::TokenRole::Owner) => Ok(TokenRole::Owner),
        Ok(proto::TokenRole::Scheduler) => Ok(TokenRole::Scheduler),
        _ => Err(invalid(format!(
            "token role {value} is not one of admin, owner, scheduler"
        ))),
    }
}

pub fn token_to_proto(token: Token) -> proto::Token {
    proto::Token {
        role: token_role_to_proto(token.role) as i32,
        id: token.id,
        name: token.name,
        lambdas: token.lambdas,
        created_at_ms: token.created_at,
        revoked_at_ms: token.revoked_at,
    }
}

pub fn token_from_proto(token: proto::Token) -> ServiceResult<Token> {
    Ok(Token {
        role: token_role_from_proto(token.role)?,
        id: token.id,
        name: token.name,
        lambdas: token.lambdas,
        created_at: token.created_at_ms,
        revoked_at: token.revoked_at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_round_trip_and_absent_fields_take_defaults() {
        let config = LambdaConfig {
            max_attempts: 7,
            quota_per_sec: Some(2.5),
            allowed_children: vec!["hello".into(), "mail".into()],
            ..LambdaConfig::default()
        };
        assert_eq!(
            config_from_proto(Some(config_to_proto(&config))).unwrap(),
            config
        );
        assert_eq!(config_from_proto(None).unwrap(), LambdaConfig::default());
        let too_many = proto::LambdaConfig {
            priorities: Some(300),
            ..Default::default()
        };
        assert!(matches!(
            config_from_proto(Some(too_many)),
            Err(ServiceError::InvalidArgument(_))
        ));
    }

    #[test]
    fn every_status_and_refusal_round_trips() {
        for status in TaskStatus::ALL {
            assert_eq!(
                status_from_proto(status_to_proto(status) as i32).unwrap(),
                status
            );
        }
        assert!(status_from_proto(0).is_err());
        assert!(status_from_proto(99).is_err());
        for refusal in [
            Refusal::NotFound,
            Refusal::WrongState(TaskStatus::Dead),
            Refusal::StaleEnqueueToken { current: 4 },
            Refusal::StaleLease { current: 9 },
            Refusal::Held,
        ] {
            assert_eq!(
                refusal_from_proto(refusal_to_proto(refusal.clone())).unwrap(),
                refusal
            );
        }
    }

    #[test]
    fn attempts_round_trip() {
        for outcome in [
            AttemptOutcome::Success,
            AttemptOutcome::Retriable,
            AttemptOutcome::Fatal,
            AttemptOutcome::Lost,
        ] {
            let attempt = Attempt {
                attempt: 2,
                lease_token: 7,
                outcome,
                error: Some("busy".into()),
                log: None,
                started_at: Some(1),
                ended_at: 2,
            };
            assert_eq!(
                attempt_from_proto(attempt_to_proto(attempt.clone())).unwrap(),
                attempt
            );
        }
    }

    #[test]
    fn periodic_schedules_round_trip_and_never_is_absent() {
        let request = CronRequest {
            lambda: "report".into(),
            cron: "0 3 * * *".into(),
            timezone: Some("Europe/Paris".into()),
            payload: b"{}".to_vec(),
            collection: Some("eu".into()),
            priority: Some(1),
            catch_up: true,
        };
        assert_eq!(
            cron_request_from_proto(cron_request_to_proto(request.clone())).unwrap(),
            request
        );
        let schedule = Cron {
            id: "01J".into(),
            lambda: "report".into(),
            cron: "0 3 * * *".into(),
            timezone: "UTC".into(),
            payload: Vec::new(),
            collection: None,
            priority: None,
            catch_up: false,
            next_at: Millis::MAX,
            created_at: 5,
        };
        let wire = cron_to_proto(schedule.clone());
        assert_eq!(wire.next_at_ms, None);
        assert_eq!(cron_from_proto(wire).unwrap(), schedule);
    }

    #[test]
    fn requests_and_results_round_trip() {
        for run_at in [
            RunAt::Now,
            RunAt::At(1_700_000_000_000),
            RunAt::After(Duration::from_secs(5)),
        ] {
            let request = TaskRequest {
                lambda: "hello".into(),
                payload: b"{}".to_vec(),
                priority: Some(2),
                run_at,
                ..TaskRequest::default()
            };
            assert_eq!(
                new_task_from_proto(new_task_to_proto(request.clone())).unwrap(),
                request
            );
        }
        let result = TaskResult {
            id: "t".into(),
            lease_token: 3,
            outcome: ResultOutcome::Retriable {
                error: "busy".into(),
                retry_after: Some(Duration::from_millis(1500)),
            },
            log: Some("+0ms info hi\n".into()),
        };
        assert_eq!(
            result_from_proto(result_to_proto(result.clone())).unwrap(),
            result
        );
        let high = proto::NewTask {
            lambda: "hello".into(),
            priority: Some(256),
            ..Default::default()
        };
        assert!(new_task_from_proto(high).is_err());
    }
}
