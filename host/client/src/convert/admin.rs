//! What operators manage: gates, cron schedules, tokens.

use waft_core::ServiceResult;
use waft_core::model::{Cron, Gate, GateState, Millis, Token, TokenRole};
use waft_core::roles::CronRequest;

use waft_core::task::check_json_payload;

use super::*;
use crate::proto;

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

pub fn cron_to_proto(schedule: Cron) -> proto::Cron {
    proto::Cron {
        id: schedule.id,
        lambda: schedule.lambda,
        expression: schedule.cron,
        timezone: schedule.timezone,
        payload: schedule.payload,
        collection: schedule.collection,
        key: schedule.key,
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
        key: cron.key,
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
        key: request.key,
        priority: request.priority.map(u32::from),
        catch_up: request.catch_up,
        payload_is_json: false,
    }
}

pub fn cron_request_from_proto(request: proto::CreateCronRequest) -> ServiceResult<CronRequest> {
    if request.payload_is_json {
        check_json_payload(&request.payload).map_err(invalid)?;
    }
    Ok(CronRequest {
        lambda: request.lambda,
        cron: request.expression,
        timezone: request.timezone,
        payload: request.payload,
        collection: request.collection,
        key: request.key,
        priority: request.priority.map(priority).transpose()?,
        catch_up: request.catch_up,
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
