//! Who may do what: API tokens, their rights, and the check every call of a
//! client goes through.
//!
//! A token is a random secret shown once at creation; the store keeps only
//! its SHA-256, so a leaked database reveals no usable token. (The secrets
//! carry 256 random bits: a fast hash is enough, unlike for passwords.)
//! Three roles: `admin` may do everything; `owner` everything about its
//! lambdas; `scheduler` schedules and reads tasks of its lambdas. The
//! processes of one installation call each other with the cluster token
//! from their configuration, which has every right (and is how the first
//! admin token is made), and one more no client token has: scheduling a
//! child under a running task's lease, which only the executor running
//! that task does. A lease token counts claims, so it is no secret; were
//! it accepted from clients, anyone allowed to schedule a lambda's tasks
//! could take a running task's next child slot ([`Principal::check_schedule`]).
//!
//! Authentication happens in the gRPC layer (`waft-api`), which resolves
//! the bearer token to a [`Principal`] once per call; the Frontend's
//! server checks it against the lambda each call touches. In-process calls
//! (`waft dev`'s roles calling each other) are trusted.

use std::collections::BTreeSet;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use waft_store::{TaskStore, Token, TokenRole};

use crate::{ServiceError, ServiceResult, TaskRequest};

/// Prefix of every secret, so a leaked one is recognisable (and scanners
/// can find it).
const SECRET_PREFIX: &str = "waft_";

/// Who is calling, as far as rights go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The cluster token, which the installation's own processes call each
    /// other with (or any caller when auth is off): every right, a parent's
    /// lease included.
    Cluster,
    /// An admin token: every right a client may have.
    Admin,
    /// Everything about these lambdas.
    Owner(BTreeSet<String>),
    /// Schedules and reads tasks of these lambdas.
    Scheduler(BTreeSet<String>),
}

/// What a call does to a lambda.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read its tasks, versions and settings.
    Read,
    /// Schedule its tasks.
    Schedule,
    /// Deploy, roll back, cancel, gate, redrive, periodic schedules.
    Manage,
}

impl Principal {
    /// The principal of a stored token.
    pub fn of(token: &Token) -> Self {
        let lambdas = token.lambdas.iter().cloned().collect();
        match token.role {
            TokenRole::Admin => Principal::Admin,
            TokenRole::Owner => Principal::Owner(lambdas),
            TokenRole::Scheduler => Principal::Scheduler(lambdas),
        }
    }

    /// Whether it has every right a client may have: the cluster token or
    /// an admin token.
    pub fn is_admin(&self) -> bool {
        matches!(self, Principal::Cluster | Principal::Admin)
    }

    /// Whether it may do `action` to `lambda`.
    pub fn may(&self, action: Action, lambda: &str) -> bool {
        match self {
            Principal::Cluster | Principal::Admin => true,
            Principal::Owner(lambdas) => lambdas.contains(lambda),
            Principal::Scheduler(lambdas) => action != Action::Manage && lambdas.contains(lambda),
        }
    }

    /// The lambdas it may do `action` to, for a query to keep to; `None`
    /// when it may do it to every lambda.
    pub fn lambdas(&self, action: Action) -> Option<Vec<String>> {
        match self {
            Principal::Cluster | Principal::Admin => None,
            Principal::Owner(lambdas) => Some(lambdas.iter().cloned().collect()),
            Principal::Scheduler(lambdas) if action != Action::Manage => {
                Some(lambdas.iter().cloned().collect())
            }
            Principal::Scheduler(_) => Some(Vec::new()),
        }
    }

    /// `PermissionDenied` unless it may do `action` to `lambda`.
    pub fn check(&self, action: Action, lambda: &str) -> ServiceResult<()> {
        if self.may(action, lambda) {
            return Ok(());
        }
        let verb = match action {
            Action::Read => "read",
            Action::Schedule => "schedule tasks of",
            Action::Manage => "manage",
        };
        Err(ServiceError::PermissionDenied(format!(
            "this token may not {verb} lambda {lambda:?}"
        )))
    }

    /// `PermissionDenied` unless it is an admin (or the cluster).
    pub fn check_admin(&self, what: &str) -> ServiceResult<()> {
        if self.is_admin() {
            return Ok(());
        }
        Err(ServiceError::PermissionDenied(format!(
            "only an admin token may {what}"
        )))
    }

    /// `PermissionDenied` unless it may schedule `task`: tasks of its
    /// lambda; of its continuation's, which the store creates later with no
    /// caller left to ask; and of its parent's (`parent_lambda`, the lambda
    /// of `task.parent_id` as stored; `None` when not looked up), since a
    /// parent's tree is its lambda's. A parent's lease only the cluster
    /// may send: it is the executor running the parent that schedules
    /// under it.
    pub fn check_schedule(
        &self,
        task: &TaskRequest,
        parent_lambda: Option<&str>,
    ) -> ServiceResult<()> {
        if task.parent_lease.is_some() && *self != Principal::Cluster {
            return Err(ServiceError::PermissionDenied(
                "a parent's lease belongs to the execution holding it: only the installation's \
                 own processes (the cluster token) may schedule under one; leave parent_lease \
                 unset"
                    .into(),
            ));
        }
        self.check(Action::Schedule, &task.lambda)?;
        if let Some(then) = &task.then {
            self.check(Action::Schedule, &then.lambda)?;
        }
        match (&task.parent_id, parent_lambda) {
            (None, _) => Ok(()),
            (Some(_), Some(lambda)) if self.may(Action::Schedule, lambda) => Ok(()),
            (Some(_), None) if self.is_admin() => Ok(()),
            (Some(parent), Some(lambda)) => Err(ServiceError::PermissionDenied(format!(
                "parent task {parent} is a task of lambda {lambda:?}, whose tasks this token \
                 may not schedule"
            ))),
            (Some(parent), None) => Err(ServiceError::PermissionDenied(format!(
                "the lambda of parent task {parent} is unknown, so this token may not name it"
            ))),
        }
    }
}

/// A new secret: the prefix and 256 random bits, hex.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{SECRET_PREFIX}{}", hex::encode(bytes))
}

/// What the store keeps of a secret.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Resolves bearer tokens to principals.
pub struct Authenticator {
    /// Where client tokens are; `None` in a role without the store (the
    /// Controller), which only its peers call.
    store: Option<Arc<dyn TaskStore>>,
    /// The hash of the cluster token.
    cluster: Option<String>,
}

impl Authenticator {
    /// Accepts the tokens in `store` and `cluster_token`.
    pub fn new(store: Option<Arc<dyn TaskStore>>, cluster_token: Option<&str>) -> Self {
        Self {
            store,
            cluster: cluster_token.map(hash_secret),
        }
    }

    /// The principal of `secret`; `Unauthenticated` for a missing, unknown
    /// or revoked token.
    pub async fn authenticate(&self, secret: Option<&str>) -> ServiceResult<Principal> {
        let Some(secret) = secret.filter(|s| !s.is_empty()) else {
            return Err(ServiceError::Unauthenticated(
                "this server needs a token: pass --token or set WAFT_TOKEN".into(),
            ));
        };
        let hash = hash_secret(secret);
        if self.cluster.as_deref().is_some_and(|cluster| {
            // Equal lengths always; compare without an early exit.
            cluster
                .bytes()
                .zip(hash.bytes())
                .fold(0, |d, (a, b)| d | (a ^ b))
                == 0
        }) {
            return Ok(Principal::Cluster);
        }
        if let Some(store) = &self.store
            && let Some(token) = store.token_find(&hash).await?
        {
            return Ok(Principal::of(&token));
        }
        Err(ServiceError::Unauthenticated(
            "the token is unknown or revoked".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_has_its_rights() {
        let mail: BTreeSet<String> = ["mail".to_owned()].into();
        let owner = Principal::Owner(mail.clone());
        let scheduler = Principal::Scheduler(mail);
        for action in [Action::Read, Action::Schedule, Action::Manage] {
            assert!(Principal::Cluster.may(action, "anything"));
            assert!(Principal::Admin.may(action, "anything"));
            assert!(owner.may(action, "mail"));
            assert!(!owner.may(action, "billing"));
            assert!(!scheduler.may(action, "billing"));
        }
        assert!(scheduler.may(Action::Schedule, "mail"));
        assert!(scheduler.may(Action::Read, "mail"));
        assert!(!scheduler.may(Action::Manage, "mail"));
        // The lambdas a query keeps to are the ones `may` allows.
        let mail = Some(vec!["mail".to_owned()]);
        assert_eq!(Principal::Admin.lambdas(Action::Manage), None);
        assert_eq!(owner.lambdas(Action::Manage), mail);
        assert_eq!(scheduler.lambdas(Action::Read), mail);
        assert_eq!(scheduler.lambdas(Action::Manage), Some(Vec::new()));
        assert!(matches!(
            owner.check_admin("create tokens"),
            Err(ServiceError::PermissionDenied(_))
        ));
    }

    #[test]
    fn a_parents_lease_is_the_clusters_and_its_lambda_needs_the_right() {
        let mail = Principal::Scheduler(["mail".to_owned()].into());
        let task = |parent: Option<&str>, lease: Option<i64>| TaskRequest {
            lambda: "mail".into(),
            parent_id: parent.map(str::to_owned),
            parent_lease: lease,
            ..TaskRequest::default()
        };
        let denied = |result: ServiceResult<()>| {
            assert!(
                matches!(result, Err(ServiceError::PermissionDenied(_))),
                "{result:?}"
            );
        };
        let leased = task(Some("p"), Some(1));
        Principal::Cluster
            .check_schedule(&leased, Some("mail"))
            .unwrap();
        denied(Principal::Admin.check_schedule(&leased, Some("mail")));
        denied(mail.check_schedule(&leased, Some("mail")));
        // A parent of its own lambda, without a lease: allowed.
        let named = task(Some("p"), None);
        mail.check_schedule(&named, Some("mail")).unwrap();
        denied(mail.check_schedule(&named, Some("billing")));
        denied(mail.check_schedule(&named, None));
        Principal::Admin.check_schedule(&named, None).unwrap();
        mail.check_schedule(&task(None, None), None).unwrap();
        denied(mail.check_schedule(
            &TaskRequest {
                lambda: "billing".into(),
                ..TaskRequest::default()
            },
            None,
        ));
    }

    #[tokio::test]
    async fn secrets_are_random_and_only_the_cluster_token_passes_without_a_store() {
        let (a, b) = (new_secret(), new_secret());
        assert!(a.starts_with("waft_") && a.len() == 5 + 64 && a != b);
        assert_eq!(hash_secret(&a).len(), 64);
        let auth = Authenticator::new(None, Some(&a));
        assert_eq!(
            auth.authenticate(Some(&a)).await.unwrap(),
            Principal::Cluster
        );
        for wrong in [Some(b.as_str()), Some(""), None] {
            assert!(matches!(
                auth.authenticate(wrong).await,
                Err(ServiceError::Unauthenticated(_))
            ));
        }
    }
}
