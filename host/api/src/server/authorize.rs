//! The Frontend's checks that need the store's answer before they can say
//! whether a caller may go on: the lambda of a task named by id, and of
//! the parent a new task names. The rules themselves are
//! `waft_services::auth::Principal`'s; here they are given the facts.

use std::collections::HashMap;

use tonic::Status;
use waft_client::status::to_status;
use waft_services::auth::{Action, Principal};
use waft_services::{ServiceError, TaskRequest};

use super::FrontendService;

impl FrontendService {
    /// Checks that `who` may do `action` to the lambda of task `id`.
    pub(super) async fn check_task(
        &self,
        who: &Principal,
        action: Action,
        id: &str,
    ) -> Result<(), Status> {
        if who.is_admin() {
            return Ok(());
        }
        let task = self.0.task_get(id).await.map_err(to_status)?;
        who.check(action, &task.lambda).map_err(to_status)
    }

    /// Checks that `who` may schedule each of `tasks`
    /// ([`Principal::check_schedule`]), reading the lambda of each parent
    /// they name once. A parent that does not exist is `INVALID_ARGUMENT`,
    /// as the store says of it.
    pub(super) async fn check_schedule(
        &self,
        who: &Principal,
        tasks: &[TaskRequest],
    ) -> Result<(), Status> {
        let mut parents: HashMap<&str, String> = HashMap::new();
        for task in tasks {
            let parent_lambda = match task.parent_id.as_deref() {
                // Every lambda's tasks are an admin's to name.
                Some(_) if who.is_admin() => None,
                Some(parent) => {
                    if !parents.contains_key(parent) {
                        let lambda = self.parent_lambda(parent).await?;
                        parents.insert(parent, lambda);
                    }
                    parents.get(parent).map(String::as_str)
                }
                None => None,
            };
            who.check_schedule(task, parent_lambda).map_err(to_status)?;
        }
        Ok(())
    }

    /// The lambda of task `parent`.
    async fn parent_lambda(&self, parent: &str) -> Result<String, Status> {
        match self.0.task_get(parent).await {
            Ok(task) => Ok(task.lambda),
            Err(ServiceError::NotFound(_)) => Err(Status::invalid_argument(format!(
                "unknown parent task {parent}"
            ))),
            Err(error) => Err(to_status(error)),
        }
    }
}
