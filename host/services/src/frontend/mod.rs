//! The Frontend: where clients schedule tasks and owners deploy lambdas.
//!
//! It validates everything before the store sees it and stores each request
//! in one transaction, so bad input is refused whole. A deploy compiles and
//! trial-instantiates the component first: a `.wasm` that is not a Waft
//! lambda is refused at deploy, not discovered at its first task. When a
//! request stores a task due now, the Frontend signals the Store Consumer
//! so the task does not wait for the next poll tick. Lambdas with a
//! scheduling quota are held to it here ([`crate::quota`]).
//!
//! A deploy compiles the component once, here, and stores the compiled
//! artifact beside it, sealed under the installation's key, so executors
//! load it in milliseconds instead of compiling it each
//! (`waft_runtime::ArtifactKey` says why it is sealed). Every deploy and
//! rollback moves the lambdas' generation, which executors and controllers
//! follow ([`crate::api::ClusterApi::lambda_changed`]): they learn of a
//! new version at once, not at their next refresh. Controllers likewise
//! follow the queues the Store Consumer filled ([`crate::fills`]), and ask
//! the store's backlog for what no fill announced.
//!
//! Every call is made by someone: a [`Frontend`] answers one caller
//! ([`Frontend::acting`]), and checks each call against that caller's
//! rights before it does anything (`access.rs`, by the table in
//! `waft_core::access`). The gRPC adapter only says who is calling; a
//! caller in the same process is the cluster, and meets the same checks.
//!
//! `client.rs` answers clients ([`crate::api::ClientApi`]), with its
//! larger calls beside it: scheduling (`schedule.rs`), journal pages
//! (`journal.rs`) and crons (`crons.rs`); `admin.rs` answers
//! administration and the installation's executors
//! ([`crate::api::AdminApi`], [`crate::api::ClusterApi`]).

mod access;
mod admin;
mod check;
mod client;
mod crons;
mod history;
mod journal;
pub mod masking;
mod schedule;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use waft_core::access::Principal;
use waft_runtime::Runtime;
use waft_store::{GcReport, LambdaGc, Millis, TaskStore};

use crate::Clock;
use crate::fills::Fills;
use crate::quota::Quotas;
use crate::secrets::SecretKey;

/// Tasks one request may schedule: one request is one transaction.
pub const MAX_TASKS_PER_REQUEST: usize = 10_000;
/// The largest component a lambda may deploy.
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;
/// Versions of a lambda kept after a deploy or rollback, by default.
pub const KEEP_VERSIONS: u32 = 10;

/// Tells the Store Consumer when stored tasks come due, and other
/// processes' Frontends when the lambdas change.
#[async_trait]
pub trait DueSignal: Send + Sync {
    /// Tasks were stored that come due at `at` (Unix milliseconds; now or
    /// earlier for immediate ones): the consumer takes a turn then rather
    /// than at its next poll. Best effort: a lost signal only delays tasks
    /// until the next poll.
    async fn due(&self, at: Millis);
    /// A lambda was deployed or rolled back. Frontends of other processes
    /// that hear it call [`Frontend::note_lambdas_changed`], so executors
    /// and controllers following any Frontend learn of it at once. Nothing
    /// by default: in one process there is no other Frontend.
    async fn lambdas_changed(&self) {}
}

#[async_trait]
impl DueSignal for crate::Wake {
    async fn due(&self, at: Millis) {
        self.wake_at(at);
    }
}

/// The Frontend role, answering one caller. Clones share everything but
/// the caller.
#[derive(Clone)]
pub struct Frontend {
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    /// Checks components at deploy.
    runtime: Arc<Runtime>,
    due: Arc<dyn DueSignal>,
    quotas: Arc<Quotas>,
    keep_versions: u32,
    /// Seals secrets and artifacts; none: secrets cannot be set, and
    /// executors compile what is deployed themselves.
    secrets: Option<Arc<SecretKey>>,
    /// The lambdas' generation: changes at every deploy and rollback
    /// ([`crate::api::ClusterApi::lambda_changed`]).
    generation: Arc<watch::Sender<u64>>,
    /// The queues the Store Consumer filled, as Controllers follow them
    /// ([`crate::api::ClusterApi::queue_filled`]).
    fills: Fills,
    /// Who is calling: what every call is checked against.
    who: Principal,
}

/// The longest [`crate::api::ClusterApi::lambda_changed`] waits.
pub const MAX_CHANGE_WAIT: Duration = Duration::from_secs(30);

impl Frontend {
    /// A Frontend storing into `store`, checking components with `runtime`
    /// and signalling due tasks through `due`, answering the cluster (the
    /// installation's own processes) until told otherwise
    /// ([`Self::acting`]).
    pub fn new(
        store: Arc<dyn TaskStore>,
        clock: Arc<dyn Clock>,
        runtime: Arc<Runtime>,
        due: Arc<dyn DueSignal>,
    ) -> Self {
        Self {
            quotas: Arc::new(Quotas::new(store.clone(), clock.clone())),
            store,
            clock,
            runtime,
            due,
            keep_versions: KEEP_VERSIONS,
            secrets: None,
            generation: Arc::new(watch::Sender::new(first_generation())),
            fills: Fills::default(),
            who: Principal::Cluster,
        }
    }

    /// The same Frontend answering `who`: each call it makes is checked
    /// against `who`'s rights.
    pub fn acting(&self, who: Principal) -> Self {
        Self {
            who,
            ..self.clone()
        }
    }

    /// The lambdas changed, here or in another process: wakes every
    /// [`crate::api::ClusterApi::lambda_changed`] waiting.
    pub fn note_lambdas_changed(&self) {
        self.generation
            .send_modify(|generation| *generation = generation.wrapping_add(1));
    }

    /// After this Frontend changed the lambdas.
    async fn lambdas_changed(&self) {
        self.note_lambdas_changed();
        self.due.lambdas_changed().await;
    }

    /// Answers Controllers from `fills`: what the consumer beside it
    /// tells, or what a relay of another process's consumers notes.
    pub fn fills(mut self, fills: Fills) -> Self {
        self.fills = fills;
        self
    }

    /// Seals the secrets `waft secret set` sends with `key`.
    pub fn secrets(mut self, key: Arc<SecretKey>) -> Self {
        self.secrets = Some(key);
        self
    }

    /// Keeps this many versions of each lambda (at least 1, the current);
    /// older ones and the components nothing uses any more are deleted
    /// after each deploy and rollback, except versions pinned by tasks that
    /// may still run.
    pub fn keep_versions(mut self, keep: u32) -> Self {
        self.keep_versions = keep.max(1);
        self
    }

    /// Collects the lambda's old versions; a failure only delays it to the
    /// next deploy.
    async fn collect_versions(&self, lambda: &str) {
        let gc = LambdaGc {
            lambda: lambda.to_owned(),
            keep: self.keep_versions,
        };
        match self.store.lambda_gc(gc).await {
            Ok(report) if report != GcReport::default() => tracing::info!(
                lambda,
                versions = report.versions,
                components = report.components,
                "old versions collected"
            ),
            Ok(_) => {}
            Err(error) => tracing::warn!(lambda, %error, "cannot collect old versions"),
        }
    }
}

/// A generation no earlier Frontend is likely to have answered: a client
/// that followed one before a restart sees a change at once.
fn first_generation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
}
