//! The calls a lambda makes to its host — heartbeats, children, its
//! configuration — and the test hosts that answer them: a host that refuses
//! every child, and one whose watchdog pulls the kill switch during the first
//! heartbeat, after which the instance calls its host no more. Every
//! `TaskHost` the tests implement is here, so that a new host call is
//! answered in one place.

use std::sync::Arc;

use serde_json::{Value, json};
use waft_core::Limits;
use waft_runtime::{
    KillSwitch, LeaseLost, Outcome, RecordingHost, Sandbox, ScheduleRejection, TaskHost,
};
use waft_sample_artifacts as samples;

use super::{messages, output_json, run_with, runtime, task};

use crate::support::{lambda_around, prepare};

#[tokio::test]
async fn sleepy_heartbeats_with_progress() {
    let host = Arc::new(RecordingHost::default());
    let execution = run_with(
        samples::SLEEPY,
        task("sleepy", json!({"steps": 3, "step_ms": 5})),
        Limits::default(),
        host.clone(),
    )
    .await;
    assert_eq!(output_json(&execution), json!({"steps": 3}));
    assert_eq!(host.heartbeats(), 3);
    assert_eq!(host.last_progress().as_deref(), Some("step 3 of 3"));
}

#[tokio::test]
async fn chain_schedules_children_through_the_host() {
    let host = Arc::new(RecordingHost::default());
    let mut input = task("chain", json!({"lambda": "hello", "names": ["a", "b"]}));
    input.collection = "batch".into();
    let execution = run_with(samples::CHAIN, input, Limits::default(), host.clone()).await;
    assert_eq!(
        output_json(&execution),
        json!({"children": ["local-child-1", "local-child-2"]})
    );
    let children = host.children();
    assert_eq!(children.len(), 2);
    assert_eq!(children[0].lambda, "hello");
    assert_eq!(children[1].payload, br#"{"name":"b"}"#);
    assert_eq!(children[0].collection.as_deref(), Some("batch"));
}

/// A host that refuses every child, as the platform does for an unknown lambda.
struct RefusingHost;

#[async_trait::async_trait]
impl TaskHost for RefusingHost {
    async fn heartbeat(&self, _: Option<String>) -> Result<(), LeaseLost> {
        Ok(())
    }
    async fn schedule(
        &self,
        child: waft_runtime::ChildRequest,
    ) -> Result<String, ScheduleRejection> {
        Err(ScheduleRejection::Invalid(format!(
            "unknown lambda {}",
            child.lambda
        )))
    }
    async fn journal(&self, _: waft_core::model::JournalWrite) -> Result<(), LeaseLost> {
        Ok(())
    }
    async fn signal(&self, _: &str, _: u32) -> Result<Option<Vec<u8>>, waft_runtime::Unread> {
        Ok(None)
    }
    async fn children(
        &self,
        _: &[String],
    ) -> Result<waft_core::model::ChildrenState, waft_runtime::Unread> {
        Ok(waft_core::model::ChildrenState::Waiting { live: 1 })
    }
}

#[tokio::test]
async fn a_refused_child_reaches_the_lambda_as_a_value() {
    let input = task("chain", json!({"lambda": "nope", "names": ["a"]}));
    let execution = run_with(
        samples::CHAIN,
        input,
        Limits::default(),
        Arc::new(RefusingHost),
    )
    .await;
    assert_eq!(
        execution.outcome,
        Outcome::Fatal {
            message: "unknown lambda nope".into()
        }
    );
}

/// A host whose watchdog decides, during the first heartbeat, that the lease
/// is gone: it pulls the kill switch and lets the call return.
struct LosingHost {
    kill: KillSwitch,
    heartbeats: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl TaskHost for LosingHost {
    async fn heartbeat(&self, _: Option<String>) -> Result<(), LeaseLost> {
        self.heartbeats
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.kill.kill("three heartbeats failed");
        Ok(())
    }
    async fn schedule(&self, _: waft_runtime::ChildRequest) -> Result<String, ScheduleRejection> {
        unreachable!("sleepy schedules nothing")
    }
    async fn journal(&self, _: waft_core::model::JournalWrite) -> Result<(), LeaseLost> {
        Ok(())
    }
    async fn signal(&self, _: &str, _: u32) -> Result<Option<Vec<u8>>, waft_runtime::Unread> {
        Ok(None)
    }
    async fn children(
        &self,
        _: &[String],
    ) -> Result<waft_core::model::ChildrenState, waft_runtime::Unread> {
        Ok(waft_core::model::ChildrenState::Waiting { live: 1 })
    }
}

#[tokio::test]
async fn a_killed_instance_makes_no_further_host_calls() {
    let runtime = runtime();
    let lambda = prepare(&runtime, samples::SLEEPY).await;
    let kill = KillSwitch::new();
    let host = Arc::new(LosingHost {
        kill: kill.clone(),
        heartbeats: Default::default(),
    });
    let execution = lambda
        .run(
            task("sleepy", json!({"steps": 5, "step_ms": 0})),
            &Sandbox::default(),
            host.clone(),
            &kill,
        )
        .await;
    assert_eq!(
        execution.outcome,
        Outcome::Killed {
            reason: "three heartbeats failed".into()
        }
    );
    assert_eq!(host.heartbeats.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The only record is the one logged before the kill.
    assert_eq!(messages(&execution), ["info finished step 1"]);
}

/// A lambda that heartbeats, then reads the variable `KEY` through
/// `wasi:config` and answers success with its value: hand-written (no
/// sample reads its configuration after a heartbeat), a core module in WAT
/// around the `lambda` world. Its task's flattened parameters: three
/// strings (pointer, length), priority, attempt, scheduled-at, payload.
/// Each import writes its answer at the address it is given last; the
/// outcome it returns is at 256 (aligned to 8, its payload at 264).
const READS_CONFIG_AFTER_A_HEARTBEAT: &str = r#"(module
    (import "waft:lambda/heartbeat@CURRENT" "beat" (func $beat (param i32 i32 i32 i32)))
    (import "wasi:config/store@0.2.0-rc.1" "get" (func $get (param i32 i32 i32)))
    (memory (export "memory") 1)
    (data (i32.const 16) "KEY")
    (global $free (mut i32) (i32.const 1024))
    (func (export "cabi_realloc") (param i32 i32) (param $align i32) (param $size i32)
        (result i32)
        (local $at i32)
        (local.set $at (i32.and
            (i32.add (global.get $free) (i32.sub (local.get $align) (i32.const 1)))
            (i32.sub (i32.const 0) (local.get $align))))
        (global.set $free (i32.add (local.get $at) (local.get $size)))
        (local.get $at))
    (func (export "waft:lambda/handler@CURRENT#handle")
        (param i32 i32 i32 i32 i32 i32 i32 i32 i64 i32 i32) (result i32)
        ;; beat(none)
        (call $beat (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 64))
        ;; get("KEY"): result<option<string>, error>, the option at 132
        (call $get (i32.const 16) (i32.const 3) (i32.const 128))
        ;; success(that option)
        (i32.store8 (i32.const 264) (i32.load8_u (i32.const 132)))
        (i32.store (i32.const 268) (i32.load (i32.const 136)))
        (i32.store (i32.const 272) (i32.load (i32.const 140)))
        (i32.const 256)))"#;

/// `wasi:config` is a capability like the others: once the execution is
/// stopped, a read of its configuration traps instead of being answered.
#[tokio::test]
async fn a_killed_instance_reads_no_configuration() {
    let runtime = runtime();
    let lambda = runtime
        .prepare(&lambda_around(READS_CONFIG_AFTER_A_HEARTBEAT))
        .await
        .expect("the lambda prepares");
    let sandbox = Sandbox {
        grants: Arc::new(waft_core::Grants {
            env: [("KEY".to_owned(), "a value".to_owned())].into(),
            ..waft_core::Grants::default()
        }),
        ..Sandbox::default()
    };
    // Running, it reads its variable.
    let execution = lambda
        .run(
            task("config", Value::Null),
            &sandbox,
            Arc::new(RecordingHost::default()),
            &KillSwitch::new(),
        )
        .await;
    assert_eq!(
        execution.outcome,
        Outcome::Success {
            output: Some(b"a value".to_vec())
        }
    );
    // Killed during its heartbeat, it does not.
    let kill = KillSwitch::new();
    let host = Arc::new(LosingHost {
        kill: kill.clone(),
        heartbeats: Default::default(),
    });
    let execution = lambda
        .run(task("config", Value::Null), &sandbox, host.clone(), &kill)
        .await;
    assert_eq!(
        execution.outcome,
        Outcome::Killed {
            reason: "three heartbeats failed".into()
        }
    );
    assert_eq!(host.heartbeats.load(std::sync::atomic::Ordering::SeqCst), 1);
}
