//! The Frontend's side of the rule of who may do what: the facts a row of
//! `waft_core::access`'s table needs that only the store knows (the lambda
//! of a task named by id, of the parent a new task names), and the lists
//! kept to what the caller may read. Every call of the Frontend's roles
//! passes through here before it does anything.

use std::collections::HashMap;

use waft_core::LambdaConfig;
use waft_core::access::{Action, Call, Rule};
use waft_store::Task;

use super::Frontend;
use crate::{ServiceError, ServiceResult, TaskRequest};

impl Frontend {
    /// `PermissionDenied` unless the caller may make `call` on `lambda`.
    pub(super) fn allow(&self, call: Call, lambda: Option<&str>) -> ServiceResult<()> {
        self.who.allow(call, lambda)
    }

    /// `PermissionDenied` unless the caller may make `call` on the lambda
    /// of task `id` (`NotFound` when there is none).
    pub(super) async fn allow_task(&self, call: Call, id: &str) -> ServiceResult<()> {
        if self.who.is_admin() {
            return Ok(());
        }
        let task = self.task_find(id).await?;
        self.allow(call, Some(&task.lambda))
    }

    /// Task `id`, or `NotFound`.
    pub(super) async fn task_find(&self, id: &str) -> ServiceResult<Task> {
        self.store
            .task_get(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("no task {id}")))
    }

    /// `PermissionDenied` unless the caller may deploy `config` as lambda
    /// `name`: manage it and, since allowing a lambda to schedule another's
    /// tasks hands on the deployer's right to schedule them, schedule every
    /// child it allows. A server checks this before it starts a deploy, so
    /// that a refusal is the call's answer rather than its first report.
    pub fn allow_deploy(&self, name: &str, config: &LambdaConfig) -> ServiceResult<()> {
        self.allow(Call::LambdaDeploy, Some(name))?;
        for child in &config.allowed_children {
            self.who.check(Action::Schedule, child)?;
        }
        Ok(())
    }

    /// `PermissionDenied` unless the caller may schedule each of `tasks`
    /// ([`waft_core::access::Principal::check_schedule`]), reading the
    /// lambda of each parent they name once. A parent that does not exist
    /// is `InvalidArgument`, as the store says of it.
    pub(super) async fn allow_schedule(&self, tasks: &[TaskRequest]) -> ServiceResult<()> {
        let mut parents: HashMap<&str, String> = HashMap::new();
        for task in tasks {
            let parent_lambda = match task.parent_id.as_deref() {
                // Every lambda's tasks are an admin's to name.
                Some(_) if self.who.is_admin() => None,
                Some(parent) => {
                    if !parents.contains_key(parent) {
                        let lambda = self.parent_lambda(parent).await?;
                        parents.insert(parent, lambda);
                    }
                    parents.get(parent).map(String::as_str)
                }
                None => None,
            };
            self.who.check_schedule(task, parent_lambda)?;
        }
        Ok(())
    }

    /// The lambda of task `parent`.
    async fn parent_lambda(&self, parent: &str) -> ServiceResult<String> {
        match self.task_find(parent).await {
            Ok(task) => Ok(task.lambda),
            Err(ServiceError::NotFound(_)) => Err(ServiceError::InvalidArgument(format!(
                "unknown parent task {parent}"
            ))),
            Err(error) => Err(error),
        }
    }

    /// The lambdas a query for `call` keeps to: those asked for (`None`:
    /// every one), less those the caller may not see. In the query, so that
    /// a page holds as many of the caller's rows as asked, not what is left
    /// of everyone's.
    pub(super) fn scope(&self, call: Call, asked: Option<Vec<String>>) -> Option<Vec<String>> {
        let Rule::Scoped(action) = call.rule() else {
            return asked;
        };
        match (self.who.lambdas(action), asked) {
            (None, asked) => asked,
            (Some(mine), None) => Some(mine),
            (Some(mine), Some(asked)) => {
                Some(asked.into_iter().filter(|l| mine.contains(l)).collect())
            }
        }
    }

    /// Keeps `rows` (of the lambda `lambda` says) to those the caller may
    /// see as an answer to `call`.
    pub(super) fn keep<T>(
        &self,
        call: Call,
        mut rows: Vec<T>,
        lambda: impl Fn(&T) -> &str,
    ) -> Vec<T> {
        if let Rule::Scoped(action) = call.rule() {
            rows.retain(|row| self.who.may(action, lambda(row)));
        }
        rows
    }
}
