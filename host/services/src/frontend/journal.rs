//! A task's journal as people and local replays read it
//! ([`ClientApi::task_journal_page`](crate::api::ClientApi::task_journal_page)):
//! a page at a time, each cut by bytes.
//!
//! With answers, a journal holds up to 64 MiB, and every answer byte is
//! searched for the lambda's secret values (`masking.rs`). One call reads
//! and masks at most [`MAX_PAGE_BYTES`] (and one entry beyond, when a
//! single answer is larger): what one caller can make a Frontend do per
//! call is bounded, and a client reads a long journal in pages, each a
//! call of its own that is checked and scheduled like any other.

use waft_store::{JournalEntry, TaskJournalRead};

use super::Frontend;
use super::masking::Masker;
use crate::api::{JournalQuery, JournalSlice};
use crate::{ServiceError, ServiceResult};

/// The most entries one page holds, and what a limit of 0 asks for.
pub const MAX_PAGE_ENTRIES: u32 = 10_000;

/// The most bytes of entries one page holds, answers included (4 MiB); a
/// page holds its first entry whatever its size (an answer is at most
/// [`MAX_JOURNAL_ANSWER`](waft_core::limits::MAX_JOURNAL_ANSWER)).
pub const MAX_PAGE_BYTES: usize = 4 << 20;

/// Entries read from the store at once with their answers: a page cut by
/// bytes reads little past its end.
const ANSWERED_READ: u32 = 64;

impl Frontend {
    /// The entries of `query`'s page as the store holds them (answers
    /// included when asked for), cut by count and bytes, and where the next
    /// page starts.
    pub(super) async fn journal_slice(&self, query: &JournalQuery) -> ServiceResult<JournalSlice> {
        let limit = match query.limit {
            0 => MAX_PAGE_ENTRIES,
            n => n.min(MAX_PAGE_ENTRIES),
        };
        let step = if query.answers { ANSWERED_READ } else { limit };
        let mut entries: Vec<JournalEntry> = Vec::new();
        let mut bytes = 0;
        loop {
            let read = u32::try_from(entries.len()).unwrap_or(u32::MAX);
            let from = query.from.saturating_add(read);
            let wanted = step.min(limit - read);
            let chunk = self
                .store
                .task_journal(TaskJournalRead {
                    id: query.id.clone(),
                    from,
                    limit: wanted,
                    without_answers: !query.answers,
                })
                .await?;
            let short = chunk.len() < wanted as usize;
            for entry in chunk {
                let size = entry.wire_size();
                if !entries.is_empty() && bytes + size > MAX_PAGE_BYTES {
                    return Ok(slice(query.from, entries, true));
                }
                bytes += size;
                entries.push(entry);
            }
            if short {
                return Ok(slice(query.from, entries, false));
            }
            if entries.len() >= limit as usize {
                return Ok(slice(query.from, entries, true));
            }
        }
    }

    /// `query`'s page for a caller allowed to read it: without answers
    /// unless asked for, and with them the lambda's secret values masked.
    pub(super) async fn journal_page(&self, query: JournalQuery) -> ServiceResult<JournalSlice> {
        let values = if query.answers {
            self.secret_values(&query.id).await?
        } else {
            Vec::new()
        };
        let slice = self.journal_slice(&query).await?;
        if slice.entries.is_empty() && self.store.task_get(&query.id).await?.is_none() {
            return Err(ServiceError::NotFound(format!("no task {}", query.id)));
        }
        if !query.answers {
            // Kept out unless asked for, whatever the store answers: it
            // may hold a response's body.
            let entries = slice.entries.into_iter();
            let entries = entries.map(|entry| JournalEntry {
                answer: Vec::new(),
                ..entry
            });
            return Ok(JournalSlice {
                entries: entries.collect(),
                ..slice
            });
        }
        if values.is_empty() {
            return Ok(slice);
        }
        // Linear in the page's bytes, but megabytes of them: off the
        // threads that serve every other call.
        tokio::task::spawn_blocking(move || {
            let masker = Masker::new(&values);
            let entries = slice.entries.into_iter();
            let entries = entries.map(|entry| JournalEntry {
                answer: masker.masked(entry.answer),
                ..entry
            });
            JournalSlice {
                entries: entries.collect(),
                ..slice
            }
        })
        .await
        .map_err(|e| ServiceError::Internal(format!("masking a journal's answers: {e}")))
    }

    /// The values of the secrets of task `id`'s lambda, to mask in its
    /// journal's answers: the runtime keeps a secret's name where it reads
    /// one, but a server may echo a value the lambda sent it.
    pub(super) async fn secret_values(&self, id: &str) -> ServiceResult<Vec<String>> {
        let Some(task) = self.store.task_get(id).await? else {
            return Err(ServiceError::NotFound(format!("no task {id}")));
        };
        let secrets = self
            .secrets_in_clear(&task.lambda, "to keep them out of the journal's answers")
            .await?;
        Ok(secrets.into_iter().map(|(_, value)| value).collect())
    }

    /// The secrets of lambda `name` in clear, by name, as its executions
    /// get them; `FailedPrecondition` when it has some and this Frontend
    /// has no key to open them (the error says what they were needed
    /// `for_what`).
    pub(super) async fn secrets_in_clear(
        &self,
        name: &str,
        for_what: &str,
    ) -> ServiceResult<Vec<(String, String)>> {
        let sealed = self.store.secret_sealed(name).await?;
        if sealed.secrets.is_empty() {
            return Ok(Vec::new());
        }
        let Some(key) = &self.secrets else {
            return Err(ServiceError::FailedPrecondition(format!(
                "lambda {name} has secrets and this Frontend has no secrets key {for_what} \
                 (secrets.key_file)"
            )));
        };
        sealed
            .secrets
            .iter()
            .map(|(secret, value)| {
                let clear = key.open(name, secret, value).map_err(|e| {
                    ServiceError::Internal(format!("secret {secret} of lambda {name}: {e}"))
                })?;
                Ok((secret.clone(), clear))
            })
            .collect()
    }
}

/// A page of `entries` from `from`; `more` when entries may follow it.
fn slice(from: u32, entries: Vec<JournalEntry>, more: bool) -> JournalSlice {
    let next = from.saturating_add(u32::try_from(entries.len()).unwrap_or(u32::MAX));
    JournalSlice {
        next: (more && !entries.is_empty()).then_some(next),
        entries,
    }
}
