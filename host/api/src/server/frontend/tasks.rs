//! Tasks over gRPC: scheduling them (one or a batch), reading them (one,
//! a page, their counts, history and statistics, their attempts and
//! journal), and acting on one (cancel, signal). These are the calls a
//! client makes about its own work, the bulk of the Frontend's traffic,
//! kept apart from the calls that shape lambdas and the installation.

use std::time::Duration;

use tonic::{Request, Response, Status};
use waft_client::convert::*;
use waft_client::proto;
use waft_client::status::to_status;
use waft_services::Frontend;
use waft_services::api::{ClientApi, JournalQuery};
use waft_store::{TaskCount, TaskList};

/// The trace context of a call's `traceparent` (and `tracestate`)
/// metadata, for the tasks it schedules that name none of their own. A
/// malformed one is ignored, as W3C asks of a receiver: a proxy's header
/// must not cost a client its task.
fn header_trace<T>(request: &Request<T>) -> Option<waft_core::TraceContext> {
    let metadata = request.metadata();
    let traceparent = metadata.get("traceparent")?.to_str().ok()?;
    let tracestate = metadata.get("tracestate").and_then(|v| v.to_str().ok());
    match waft_core::TraceContext::parse(traceparent, tracestate) {
        Ok(trace) => Some(trace),
        Err(error) => {
            tracing::debug!(%error, "ignoring the call's traceparent");
            None
        }
    }
}

pub(super) async fn schedule(
    role: Frontend,
    request: Request<proto::ScheduleRequest>,
) -> Result<Response<proto::ScheduleResponse>, Status> {
    let header = header_trace(&request);
    let task = required(request.into_inner().task, "task").map_err(to_status)?;
    let mut task = new_task_from_proto(task).map_err(to_status)?;
    task.trace = task.trace.or(header);
    let mut inserted = role
        .task_schedule_many(vec![task])
        .await
        .map_err(to_status)?;
    let inserted = inserted
        .pop()
        .ok_or_else(|| Status::internal("the store answered no task"))?;
    Ok(Response::new(proto::ScheduleResponse {
        id: inserted.id,
        created: inserted.created,
    }))
}

pub(super) async fn schedule_batch(
    role: Frontend,
    request: Request<proto::ScheduleBatchRequest>,
) -> Result<Response<proto::ScheduleBatchResponse>, Status> {
    let header = header_trace(&request);
    let tasks = request
        .into_inner()
        .tasks
        .into_iter()
        .map(|task| {
            let mut task = new_task_from_proto(task)?;
            task.trace = task.trace.or_else(|| header.clone());
            Ok(task)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(to_status)?;
    let inserted = role.task_schedule_many(tasks).await.map_err(to_status)?;
    Ok(Response::new(proto::ScheduleBatchResponse {
        tasks: inserted
            .into_iter()
            .map(|t| proto::ScheduleResponse {
                id: t.id,
                created: t.created,
            })
            .collect(),
    }))
}

pub(super) async fn get_task(
    role: Frontend,
    request: Request<proto::GetTaskRequest>,
) -> Result<Response<proto::GetTaskResponse>, Status> {
    let task = role
        .task_get(&request.into_inner().id)
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::GetTaskResponse {
        task: Some(task_to_proto(task)),
    }))
}

pub(super) async fn list_tasks(
    role: Frontend,
    request: Request<proto::ListTasksRequest>,
) -> Result<Response<proto::ListTasksResponse>, Status> {
    let request = request.into_inner();
    let filter = TaskList {
        status: request
            .status
            .map(status_from_proto)
            .transpose()
            .map_err(to_status)?,
        lambda: request.lambda,
        // Every lambda; the Frontend keeps it to the caller's.
        lambdas: None,
        collection: request.collection,
        key: request.key,
        parent_id: request.parent_id,
        created_from: request.created_from_ms,
        created_before: request.created_before_ms,
        newest_first: request.newest_first,
        after: request.after,
        limit: request.limit,
    };
    let tasks = role.task_list(filter).await.map_err(to_status)?;
    Ok(Response::new(proto::ListTasksResponse {
        tasks: tasks.into_iter().map(task_to_proto).collect(),
    }))
}

pub(super) async fn lambda_stats(
    role: Frontend,
    request: Request<proto::LambdaStatsRequest>,
) -> Result<Response<proto::LambdaStatsResponse>, Status> {
    let window = match request.into_inner().window_ms {
        0 => Duration::from_secs(3600),
        ms => Duration::from_millis(ms),
    };
    let overview = role.lambda_stats(window).await.map_err(to_status)?;
    Ok(Response::new(overview_to_proto(overview)))
}

pub(super) async fn task_history(
    role: Frontend,
    request: Request<proto::TaskHistoryRequest>,
) -> Result<Response<proto::TaskHistoryResponse>, Status> {
    let query = history_query_from_proto(request.into_inner());
    let answer = role.task_history(query).await.map_err(to_status)?;
    Ok(Response::new(history_to_proto(answer)))
}

pub(super) async fn count_tasks(
    role: Frontend,
    request: Request<proto::CountTasksRequest>,
) -> Result<Response<proto::CountTasksResponse>, Status> {
    let request = request.into_inner();
    let counts = role
        .task_count(TaskCount {
            lambda: request.lambda,
            collection: request.collection,
            key: request.key,
            parent_id: request.parent_id,
        })
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::CountTasksResponse {
        counts: counts
            .into_iter()
            .map(|c| proto::StatusCount {
                status: status_to_proto(c.status) as i32,
                count: c.count,
            })
            .collect(),
    }))
}

pub(super) async fn cancel_task(
    role: Frontend,
    request: Request<proto::CancelTaskRequest>,
) -> Result<Response<proto::CancelTaskResponse>, Status> {
    let id = request.into_inner().id;
    let task = role.task_cancel(&id).await.map_err(to_status)?;
    Ok(Response::new(proto::CancelTaskResponse {
        task: Some(task_to_proto(task)),
    }))
}

pub(super) async fn signal_task(
    role: Frontend,
    request: Request<proto::SignalTaskRequest>,
) -> Result<Response<proto::SignalTaskResponse>, Status> {
    let proto::SignalTaskRequest { id, name, payload } = request.into_inner();
    let sent = role
        .task_signal(&id, &name, payload)
        .await
        .map_err(to_status)?;
    Ok(Response::new(proto::SignalTaskResponse {
        seq: sent.seq,
        woke: sent.woke,
    }))
}

pub(super) async fn list_attempts(
    role: Frontend,
    request: Request<proto::ListAttemptsRequest>,
) -> Result<Response<proto::ListAttemptsResponse>, Status> {
    let id = request.into_inner().id;
    let attempts = role.task_attempts(&id).await.map_err(to_status)?;
    Ok(Response::new(proto::ListAttemptsResponse {
        attempts: attempts.into_iter().map(attempt_to_proto).collect(),
    }))
}

pub(super) async fn get_journal(
    role: Frontend,
    request: Request<proto::GetJournalRequest>,
) -> Result<Response<proto::GetJournalResponse>, Status> {
    let request = request.into_inner();
    let query = JournalQuery {
        id: request.id,
        answers: request.answers,
        from: request.from,
        limit: request.limit,
    };
    let slice = role.task_journal_page(query).await.map_err(to_status)?;
    Ok(Response::new(proto::GetJournalResponse {
        entries: slice
            .entries
            .into_iter()
            .map(journal_entry_to_proto)
            .collect(),
        next: slice.next,
    }))
}
