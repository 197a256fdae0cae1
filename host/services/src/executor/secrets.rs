//! The lambdas' secrets on an executor: opened with the installation's key
//! when a task needs them, kept until a claim carries a newer version.
//!
//! Kept by the lambda's name and the version they were read at. The store
//! starts a lambda deployed again after a delete past its predecessor's
//! secrets version, so a claim of the new lambda never finds the old one's
//! secrets recent enough; and a deleted lambda's are forgotten as soon as the
//! executor's list no longer has it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::secrets::SecretKey;
use crate::{FrontendApi, lock};

/// A lambda's secrets in clear, by name.
type Clear = Arc<Vec<(String, String)>>;

pub(super) struct Secrets {
    /// None: a lambda with secrets cannot run here.
    key: Option<Arc<SecretKey>>,
    /// Each lambda's secrets, with the version they were read at.
    opened: Mutex<HashMap<String, (i64, Clear)>>,
}

impl Secrets {
    pub(super) fn new(key: Option<Arc<SecretKey>>) -> Self {
        Self {
            key,
            opened: Mutex::default(),
        }
    }

    /// Forgets the secrets of the lambdas `listed` says no to (deleted
    /// ones).
    pub(super) fn keep_only(&self, listed: impl Fn(&str) -> bool) {
        lock(&self.opened).retain(|lambda, _| listed(lambda));
    }

    /// The lambda's secrets in clear, read again when the task was claimed
    /// at a newer version of them: a set or a removal applies to the next
    /// task. Version 0 is a lambda that never had one.
    pub(super) async fn of(
        &self,
        frontend: &dyn FrontendApi,
        lambda: &str,
        version: i64,
    ) -> Result<Clear, String> {
        if version == 0 {
            return Ok(Arc::default());
        }
        if let Some((read, secrets)) = lock(&self.opened).get(lambda)
            && *read >= version
        {
            return Ok(secrets.clone());
        }
        let key = self.key.as_ref().ok_or_else(|| {
            format!(
                "lambda {lambda} has secrets and this executor has no secrets key \
                 (secrets.key_file)"
            )
        })?;
        let sealed = frontend
            .secret_sealed(lambda)
            .await
            .map_err(|e| format!("cannot read the secrets of lambda {lambda}: {e}"))?;
        let secrets = sealed
            .secrets
            .iter()
            .map(|(name, sealed)| {
                key.open(lambda, name, sealed)
                    .map(|value| (name.clone(), value))
                    .map_err(|e| format!("secret {name} of lambda {lambda}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let secrets = Arc::new(secrets);
        lock(&self.opened).insert(lambda.to_owned(), (sealed.version, secrets.clone()));
        Ok(secrets)
    }
}
