//! [`Probe`]: every role's trait implemented by a caller that only notes
//! which call it was made, so that `invoke` is proven to reach each call's
//! method, and a new method cannot go without its `Call`.

use super::*;

/// A caller that only notes which call it was made.
#[derive(Default)]
pub(super) struct Probe(Mutex<Vec<Call>>);

impl Probe {
    fn saw(&self, call: Call) -> ServiceError {
        self.0.lock().unwrap().push(call);
        ServiceError::Internal("a probe answers nothing".into())
    }
}

#[tokio::test]
async fn invoking_each_call_reaches_its_method() {
    let fx = Fixture::new().await;
    for &call in Call::ALL {
        let probe = Probe::default();
        let _ = invoke(&probe, &fx, call).await;
        assert_eq!(*probe.0.lock().unwrap(), [call]);
    }
}

#[async_trait]
impl ClientApi for Probe {
    async fn task_schedule_many(&self, _: Vec<TaskRequest>) -> ServiceResult<Vec<TaskInserted>> {
        Err(self.saw(Call::TaskSchedule))
    }
    async fn task_get(&self, _: &str) -> ServiceResult<Task> {
        Err(self.saw(Call::TaskGet))
    }
    async fn task_list(&self, _: TaskList) -> ServiceResult<Vec<Task>> {
        Err(self.saw(Call::TaskList))
    }
    async fn task_count(&self, _: TaskCount) -> ServiceResult<Vec<StatusCount>> {
        Err(self.saw(Call::TaskCount))
    }
    async fn lambda_stats(&self, _: Duration) -> ServiceResult<Overview> {
        Err(self.saw(Call::LambdaStats))
    }
    async fn task_history(&self, _: HistoryQuery) -> ServiceResult<HistoryAnswer> {
        Err(self.saw(Call::TaskHistory))
    }
    async fn task_cancel(&self, _: &str) -> ServiceResult<Task> {
        Err(self.saw(Call::TaskCancel))
    }
    async fn task_signal(&self, _: &str, _: &str, _: Vec<u8>) -> ServiceResult<SignalSent> {
        Err(self.saw(Call::TaskSignal))
    }
    async fn task_attempts(&self, _: &str) -> ServiceResult<Vec<Attempt>> {
        Err(self.saw(Call::TaskAttempts))
    }
    async fn task_journal_page(&self, query: JournalQuery) -> ServiceResult<JournalSlice> {
        Err(self.saw(if query.answers {
            Call::TaskJournalAnswers
        } else {
            Call::TaskJournal
        }))
    }
    async fn lambda_deploy(&self, _: &str, _: Vec<u8>, _: LambdaConfig) -> ServiceResult<Lambda> {
        Err(self.saw(Call::LambdaDeploy))
    }
    async fn lambda_check(
        &self,
        _: &str,
        _: Vec<u8>,
        _: LambdaConfig,
        _: &(dyn Fn(waft_core::model::CheckProgress) + Send + Sync),
    ) -> ServiceResult<waft_core::model::DeployCheck> {
        Err(self.saw(Call::LambdaCheck))
    }
    async fn lambda_move(
        &self,
        _: &str,
        _: Option<u32>,
        _: &(dyn Fn(waft_core::model::CheckProgress) + Send + Sync),
    ) -> ServiceResult<waft_core::model::MoveReport> {
        Err(self.saw(Call::LambdaMove))
    }
    async fn lambda_get(&self, _: &str, _: Option<u32>) -> ServiceResult<Lambda> {
        Err(self.saw(Call::LambdaGet))
    }
    async fn lambda_list(&self) -> ServiceResult<Vec<Lambda>> {
        Err(self.saw(Call::LambdaList))
    }
    async fn lambda_rollback(&self, _: &str, _: Option<u32>) -> ServiceResult<Lambda> {
        Err(self.saw(Call::LambdaRollback))
    }
    async fn lambda_delete(
        &self,
        _: &str,
        _: bool,
    ) -> ServiceResult<waft_core::model::LambdaDeleted> {
        Err(self.saw(Call::LambdaDelete))
    }
    async fn lambda_versions(
        &self,
        _: &str,
    ) -> ServiceResult<Vec<waft_core::model::LambdaVersion>> {
        Err(self.saw(Call::LambdaVersions))
    }
    async fn gate_set(&self, _: &str, _: Option<&str>, _: GateState) -> ServiceResult<u64> {
        Err(self.saw(Call::GateSet))
    }
    async fn gate_list(&self) -> ServiceResult<Vec<Gate>> {
        Err(self.saw(Call::GateList))
    }
    async fn dead_redrive(&self, _: DeadSelector, _: Option<u32>, _: bool) -> ServiceResult<u64> {
        Err(self.saw(Call::DeadRedrive))
    }
    async fn dead_purge(&self, _: DeadSelector) -> ServiceResult<u64> {
        Err(self.saw(Call::DeadPurge))
    }
    async fn cron_create(&self, _: CronRequest) -> ServiceResult<Cron> {
        Err(self.saw(Call::CronCreate))
    }
    async fn cron_list(&self) -> ServiceResult<Vec<Cron>> {
        Err(self.saw(Call::CronList))
    }
    async fn cron_preview(&self, _: &str, _: Option<&str>, _: u32) -> ServiceResult<Vec<Millis>> {
        Err(self.saw(Call::CronPreview))
    }
    async fn cron_delete(&self, _: &str) -> ServiceResult<()> {
        Err(self.saw(Call::CronDelete))
    }
}

#[async_trait]
impl AdminApi for Probe {
    async fn token_create(
        &self,
        _: &str,
        _: TokenRole,
        _: Vec<String>,
    ) -> ServiceResult<(Token, String)> {
        Err(self.saw(Call::TokenCreate))
    }
    async fn token_list(&self) -> ServiceResult<Vec<Token>> {
        Err(self.saw(Call::TokenList))
    }
    async fn token_revoke(&self, _: &str) -> ServiceResult<()> {
        Err(self.saw(Call::TokenRevoke))
    }
    async fn secret_set(&self, _: &str, _: &str, _: &str) -> ServiceResult<()> {
        Err(self.saw(Call::SecretSet))
    }
    async fn secret_list(&self, _: &str) -> ServiceResult<Vec<SecretInfo>> {
        Err(self.saw(Call::SecretList))
    }
    async fn secret_remove(&self, _: &str, _: &str) -> ServiceResult<()> {
        Err(self.saw(Call::SecretRemove))
    }
}

#[async_trait]
impl ClusterApi for Probe {
    async fn component_get(&self, _: &str) -> ServiceResult<Vec<u8>> {
        Err(self.saw(Call::ComponentGet))
    }
    async fn artifact_get(&self, _: &str, _: &str) -> ServiceResult<Option<Artifact>> {
        Err(self.saw(Call::ArtifactGet))
    }
    async fn lambda_changed(&self, _: u64, _: Duration) -> ServiceResult<u64> {
        Err(self.saw(Call::LambdaChanged))
    }
    async fn queue_filled(&self, _: u64, _: Duration) -> ServiceResult<QueueFills> {
        Err(self.saw(Call::QueueFilled))
    }
    async fn queue_backlog(&self) -> ServiceResult<Vec<Backlog>> {
        Err(self.saw(Call::QueueBacklog))
    }
    async fn secret_sealed(&self, _: &str) -> ServiceResult<SealedSecrets> {
        Err(self.saw(Call::SecretSealed))
    }
}
