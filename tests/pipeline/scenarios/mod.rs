//! The scenarios, each run against each mode's installation: a client
//! schedules over gRPC and real `waft` processes run the sample lambdas to
//! a terminal state. A scenario deploys what it needs beyond [`setup`]'s
//! lambdas and assumes nothing of the scenarios run before it.
//!
//! One module per area. Each scenario is re-exported here under the name
//! `tests/pipeline.rs` lists it by, which is its test's name.

mod auth;
mod chaining;
mod crons;
mod durable;
mod flow;
mod grants;
mod helpers;
mod keys;
mod languages;
mod lifecycle;
mod metrics;
mod serving;
mod versions;

use waft_core::ByteSize;
use waft_sample_artifacts as samples;

pub use auth::auth;
pub use chaining::chaining;
pub use crons::periodic;
pub use durable::{durable, replay_locally};
pub use flow::{gates, priorities, quotas};
pub use grants::{outbound, secrets};
pub use keys::{debounce, key_concurrency, key_fairness, key_rate};
pub use languages::{first_contract, javascript, python};
pub use lifecycle::{
    bad_input_stores_nothing, cancel, dead_letter, fatal, over_its_limit, retry_then_success,
    success,
};
pub use metrics::metrics;
pub use serving::{page_and_grpc_web, wrong_role_and_health};
pub use versions::new_versions_apply_without_restart;

pub use crate::checks::deploy_check;
pub use crate::deleted_children::deleted_children;
pub use crate::generations::{
    a_restart_on_divergence_schedules_new_children, fresh_starts_schedule_new_children,
};
pub use crate::retention::retention;
use crate::support::Cluster;
pub use crate::waits::{durable_sleep, fan_in, signals, suspended_tasks_hold_no_slot};

/// Deploys the lambdas the scenarios share, once per installation.
pub async fn setup(cluster: &Cluster) {
    cluster.deploy("hello", samples::HELLO, |_| {}).await;
    cluster.deploy("flaky", samples::FLAKY, |_| {}).await;
    cluster
        .deploy("flaky2", samples::FLAKY, |c| c.max_attempts = 2)
        .await;
    cluster.deploy("fatal", samples::FATAL, |_| {}).await;
    cluster
        .deploy("chain", samples::CHAIN, |c| {
            c.allowed_children = vec!["hello".into()]
        })
        .await;
    cluster
        .deploy("hog", samples::HOG, |c| {
            c.limits.max_memory = ByteSize::mib(2)
        })
        .await;
    cluster
        .deploy("one-at-a-time", samples::HELLO, |c| c.concurrency = 1)
        .await;
}
