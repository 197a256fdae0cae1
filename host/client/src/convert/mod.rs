//! Between the wire (`proto`) and Waft's own types, in both directions.
//!
//! Decoding checks what the wire cannot say (a priority is one byte, a
//! status is known, a required message is present) and answers a precise
//! `InvalidArgument`; encoding cannot fail.

mod admin;
mod check;
mod journal;
mod lambda;
mod lease;
mod task;

pub use admin::*;
pub use check::*;
pub use journal::*;
pub use lambda::*;
pub use lease::*;
pub use task::*;

use waft_core::{ServiceError, ServiceResult};

pub(crate) fn invalid(message: impl Into<String>) -> ServiceError {
    ServiceError::InvalidArgument(message.into())
}

/// A required message field.
pub fn required<T>(field: Option<T>, name: &str) -> ServiceResult<T> {
    field.ok_or_else(|| invalid(format!("{name} is required")))
}

pub fn priority(value: u32) -> ServiceResult<u8> {
    u8::try_from(value).map_err(|_| invalid(format!("priority {value} is out of range")))
}

pub(crate) fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use waft_core::model::*;
    use waft_core::roles::{CronRequest, RunAt, TaskRequest};
    use waft_core::{LambdaConfig, TaskStatus};

    use super::*;
    use crate::proto;

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
        let mut value = 1;
        while proto::TaskStatus::try_from(value).is_ok() {
            let status = status_from_proto(value).unwrap();
            assert_eq!(status_to_proto(status) as i32, value);
            value += 1;
        }
        assert_eq!(value as usize, TaskStatus::ALL.len() + 1);
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
                replayed: 4,
            };
            assert_eq!(
                attempt_from_proto(attempt_to_proto(attempt.clone())).unwrap(),
                attempt
            );
        }
    }

    /// An entry whose strings hold every character class a Rust string
    /// may (NUL, control characters, multi-byte ones) and whose bytes hold
    /// every byte.
    fn entry(seq: u32) -> JournalEntry {
        JournalEntry {
            seq,
            call: "wasi:http/outgoing-handler.handle\0\u{1}".into(),
            digest: (0..=255).collect(),
            answer: (0..=255).rev().collect(),
            summary: "POST https://pay.example/charge → 201 \0 é 𝄞 \u{7f}".into(),
            outside: true,
            attempt: 3,
            at: 1_800_000_000_123,
            took_us: u64::MAX,
        }
    }

    #[test]
    fn journal_entries_round_trip_every_byte_and_character() {
        for seq in [0, 1, u32::MAX] {
            let entry = entry(seq);
            assert_eq!(
                journal_entry_from_proto(journal_entry_to_proto(entry.clone())),
                entry
            );
        }
        // Through the bytes on the wire, too.
        use prost::Message;
        let write = journal_write_to_proto(JournalWrite {
            from: 7,
            entries: vec![entry(7), entry(8)],
        });
        let decoded = proto::JournalWrite::decode(write.encode_to_vec().as_slice()).unwrap();
        assert_eq!(
            journal_write_from_proto(decoded),
            JournalWrite {
                from: 7,
                entries: vec![entry(7), entry(8)],
            }
        );
    }

    #[test]
    fn claims_carry_the_journals_length_and_configs_their_divergence_policy() {
        let claimed = ClaimedTask {
            id: "t".into(),
            lambda: "pay".into(),
            lambda_version: 4,
            collection: "default".into(),
            priority: 1,
            payload: b"{}".to_vec(),
            attempt: 2,
            scheduled_at: 5,
            lease_token: 9,
            secrets_version: 0,
            journal_len: 12,
            journal_generation: 3,
            trace: waft_core::TraceContext::parse(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Some("k=v"),
            )
            .ok(),
        };
        assert_eq!(
            claimed_from_proto(claimed_to_proto(claimed.clone())).unwrap(),
            claimed
        );
        for on_divergence in waft_core::OnDivergence::ALL {
            let config = LambdaConfig {
                on_divergence,
                ..LambdaConfig::default()
            };
            assert_eq!(
                config_from_proto(Some(config_to_proto(&config))).unwrap(),
                config
            );
        }
        let unknown = proto::LambdaConfig {
            on_divergence: Some(9),
            ..Default::default()
        };
        assert!(matches!(
            config_from_proto(Some(unknown)),
            Err(ServiceError::InvalidArgument(m)) if m.contains("on_divergence")
        ));
        let unspecified = proto::LambdaConfig {
            on_divergence: Some(0),
            ..Default::default()
        };
        assert_eq!(
            config_from_proto(Some(unspecified)).unwrap().on_divergence,
            waft_core::OnDivergence::Fail
        );
    }

    #[test]
    fn periodic_schedules_round_trip_and_never_is_absent() {
        let request = CronRequest {
            lambda: "report".into(),
            cron: "0 3 * * *".into(),
            timezone: Some("Europe/Paris".into()),
            payload: b"{}".to_vec(),
            collection: Some("eu".into()),
            key: Some("customer-9".into()),
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
            key: Some("customer-9".into()),
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
                key: Some("customer-9".into()),
                then: Some(waft_core::model::Continuation {
                    lambda: "next".into(),
                    key: Some("customer-10".into()),
                    ..Default::default()
                }),
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
            journal: None,
            replayed: 0,
        };
        assert_eq!(
            result_from_proto(result_to_proto(result.clone())).unwrap(),
            result
        );
        let journaled = TaskResult {
            journal: Some(JournalWrite {
                from: 2,
                entries: vec![entry(2), entry(3)],
            }),
            replayed: 2,
            ..result
        };
        assert_eq!(
            result_from_proto(result_to_proto(journaled.clone())).unwrap(),
            journaled
        );
        // A cut (a write of no entries) is not the absence of a write.
        let cut = TaskResult {
            journal: Some(JournalWrite::default()),
            ..journaled
        };
        let wire = result_to_proto(cut.clone());
        assert!(wire.journal.is_some());
        assert_eq!(result_from_proto(wire).unwrap(), cut);
        let high = proto::NewTask {
            lambda: "hello".into(),
            priority: Some(256),
            ..Default::default()
        };
        assert!(new_task_from_proto(high).is_err());
    }
}
