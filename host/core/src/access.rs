//! Who may do what: the rule every call of the Frontend's roles passes
//! through, whoever makes it.
//!
//! Every call names a [`Call`], and [`Call::rule`] says what it needs of
//! its caller, one row a call. The Frontend checks its caller
//! ([`Principal`]) against that row before it does anything, so a caller
//! in the same process meets the same rule as one over gRPC: the adapter
//! only says who is calling. The facts a row needs from the store (the
//! lambda of a task named by id, of a parent a new task names) the
//! Frontend looks up; the verdict is given here.
//!
//! Three roles of tokens: `admin` may do everything a client may; `owner`
//! everything about its lambdas; `scheduler` schedules and reads tasks of
//! its lambdas. The processes of one installation call each other with the
//! cluster token, which has every right, and one more no client token has:
//! scheduling a child under a running task's lease, which only the
//! executor running that task does. A lease token counts claims, so it is
//! no secret; were it accepted from clients, anyone allowed to schedule a
//! lambda's tasks could take a running task's next child slot
//! ([`Principal::check_schedule`]).

use std::collections::BTreeSet;

use crate::error::{ServiceError, ServiceResult};
use crate::model::{Token, TokenRole};
use crate::roles::TaskRequest;

/// Who is calling, as far as rights go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The cluster token, which the installation's own processes call each
    /// other with; also every caller in one process, and every caller when
    /// auth is off: every right, a parent's lease included.
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
    /// Deploy, roll back, cancel, gate, redrive, crons, secrets.
    Manage,
}

/// What a call needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Nothing: it reads nothing stored.
    Anyone,
    /// The right to do this to the lambda it names, or of the task it names.
    Lambda(Action),
    /// Nothing, but it answers only what the caller may do this to: a list
    /// kept to the caller's lambdas ([`Principal::lambdas`]). Naming a
    /// lambda to keep it to needs the right.
    Scoped(Action),
    /// The right to schedule tasks of the lambdas a new task involves
    /// ([`Principal::check_schedule`]).
    Schedule,
    /// An admin token (or the cluster's); the words say what to whom it
    /// is refused.
    Admin(&'static str),
}

/// Declares [`Call`] and its list together, so no call is left out of it.
macro_rules! calls {
    ($($(#[$doc:meta])* $call:ident,)*) => {
        /// Every call of the Frontend's roles, one for each method of
        /// [`ClientApi`](crate::roles::ClientApi),
        /// [`AdminApi`](crate::roles::AdminApi) and
        /// [`ClusterApi`](crate::roles::ClusterApi).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Call {
            $($(#[$doc])* $call,)*
        }

        impl Call {
            /// Every call.
            pub const ALL: &[Call] = &[$(Call::$call,)*];
        }
    };
}

calls! {
    TaskSchedule,
    TaskGet,
    TaskList,
    TaskCount,
    TaskCancel,
    TaskSignal,
    TaskAttempts,
    TaskJournal,
    /// A task's journal with its answers (response bodies, children's
    /// outputs, signals' payloads): what the lambda saw, for its owner.
    TaskJournalAnswers,
    LambdaStats,
    /// The task history's points, of one lambda or added together.
    TaskHistory,
    LambdaDeploy,
    /// Replaying the journals of a lambda's live tasks against new code
    /// (`deploy --check`): it runs uploaded code, and reads every journal.
    LambdaCheck,
    /// Moving waiting tasks to another version of their lambda.
    LambdaMove,
    LambdaGet,
    LambdaList,
    LambdaRollback,
    LambdaDelete,
    LambdaVersions,
    GateSet,
    GateList,
    DeadRedrive,
    DeadPurge,
    CronCreate,
    CronList,
    CronPreview,
    CronDelete,
    TokenCreate,
    TokenList,
    TokenRevoke,
    SecretSet,
    SecretList,
    SecretRemove,
    ComponentGet,
    ArtifactGet,
    LambdaChanged,
    QueueFilled,
    QueueBacklog,
    SecretSealed,
}

impl Call {
    /// What the call needs of its caller: the table of rights.
    pub fn rule(self) -> Rule {
        use Action::{Manage, Read, Schedule};
        match self {
            Call::TaskSchedule => Rule::Schedule,
            Call::TaskSignal => Rule::Lambda(Schedule),
            Call::TaskGet | Call::TaskCount | Call::TaskAttempts | Call::TaskJournal => {
                Rule::Lambda(Read)
            }
            Call::TaskList | Call::LambdaStats | Call::LambdaList => Rule::Scoped(Read),
            Call::TaskHistory => Rule::Scoped(Read),
            Call::TaskCancel | Call::DeadRedrive | Call::DeadPurge => Rule::Lambda(Manage),
            Call::TaskJournalAnswers => Rule::Lambda(Manage),
            Call::LambdaDeploy | Call::LambdaRollback | Call::GateSet => Rule::Lambda(Manage),
            Call::LambdaCheck | Call::LambdaMove => Rule::Lambda(Manage),
            Call::LambdaDelete => Rule::Lambda(Manage),
            Call::LambdaGet | Call::LambdaVersions => Rule::Lambda(Read),
            Call::GateList | Call::CronList => Rule::Scoped(Read),
            Call::CronCreate | Call::CronDelete => Rule::Lambda(Manage),
            Call::CronPreview => Rule::Anyone,
            Call::TokenCreate => Rule::Admin("create tokens"),
            Call::TokenList => Rule::Admin("list tokens"),
            Call::TokenRevoke => Rule::Admin("revoke tokens"),
            Call::SecretSet | Call::SecretRemove => Rule::Lambda(Manage),
            Call::SecretList => Rule::Lambda(Read),
            Call::ComponentGet => Rule::Admin("fetch components"),
            Call::ArtifactGet => Rule::Admin("fetch compiled components"),
            Call::LambdaChanged => Rule::Admin("follow the lambdas' changes"),
            Call::QueueFilled => Rule::Admin("follow the queues' fills"),
            Call::QueueBacklog => Rule::Admin("list the queues' backlog"),
            Call::SecretSealed => Rule::Admin("fetch sealed secrets"),
        }
    }
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

    /// `PermissionDenied` unless it may make `call`, on `lambda` when the
    /// call touches one (the lambda it names, or of the task it names; for
    /// a list, the lambda it is asked to keep to).
    /// A scheduling call is checked further by [`Self::check_schedule`].
    pub fn allow(&self, call: Call, lambda: Option<&str>) -> ServiceResult<()> {
        let action = match call.rule() {
            Rule::Anyone => return Ok(()),
            Rule::Admin(what) => return self.check_admin(what),
            // A list: naming a lambda to keep it to needs the right.
            Rule::Scoped(action) => match lambda {
                Some(lambda) => return self.check(action, lambda),
                None => return Ok(()),
            },
            Rule::Lambda(action) => action,
            Rule::Schedule => Action::Schedule,
        };
        match lambda {
            Some(lambda) => self.check(action, lambda),
            None if self.is_admin() => Ok(()),
            None => Err(ServiceError::PermissionDenied(format!(
                "{call:?} names no lambda, so only an admin token may make it"
            ))),
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
        self.allow(Call::TaskSchedule, Some(&task.lambda))?;
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
    fn a_call_on_no_lambda_is_an_admins() {
        let owner = Principal::Owner(["mail".to_owned()].into());
        assert!(owner.allow(Call::TaskGet, Some("mail")).is_ok());
        assert!(matches!(
            owner.allow(Call::TaskGet, None),
            Err(ServiceError::PermissionDenied(_))
        ));
        assert!(Principal::Admin.allow(Call::TaskGet, None).is_ok());
        assert!(owner.allow(Call::CronPreview, None).is_ok());
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
}
