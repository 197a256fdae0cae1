//! `waft:lambda/heartbeat`: a lambda says it is alive, and learns whether
//! its execution still holds the task's lease.
//!
//! Its progress note is for people: the HSC stores it in the task, where
//! anyone who may read the task reads it back. So the note is cut here, as
//! it enters the host, to
//! [`MAX_PROGRESS_NOTE`](waft_core::limits::MAX_PROGRESS_NOTE) (a lambda's 17 MiB note
//! would otherwise ride in a heartbeat batch beside every other tenant's
//! beats), and the execution's secrets are redacted from it first, as from
//! its log, errors and output — first, so that a secret the cut would split
//! cannot leave half in clear.
//!
//! Journaled (see `durable`): a replayed beat is answered as it was, and
//! reaches no platform (the executor heartbeats for the execution anyway).
//! Beats that follow each other and get the same answer share one entry
//! (whatever their notes), so a lambda that heartbeats in a loop costs its
//! journal what it learned (alive, or the lease lost), not how often it
//! asked.

use waft_core::limits::cut_note;

use crate::contract::current::wit::{heartbeat, types};
use crate::durable::digest;
use crate::redact::Redactor;
use crate::run::HostState;

const BEAT: &str = "waft:lambda/heartbeat.beat";

impl heartbeat::Host for HostState {
    async fn beat(
        &mut self,
        progress: Option<String>,
    ) -> wasmtime::Result<Result<(), types::LeaseLost>> {
        self.ensure_running()?;
        let progress = progress.map(|note| carried(note, &self.redactor));
        // The note is for people and changes nothing the lambda learns: it
        // is left out of the match, so beats with other notes share an
        // entry too. Journals written when it was in still replay.
        let matched = digest(BEAT, &());
        let legacy = (!self.journal.live_next()).then(|| digest(BEAT, &progress));
        let host = self.host.clone();
        let live = || {
            let (host, progress) = (host.clone(), progress.clone());
            async move { host.heartbeat(progress).await.map_err(|lost| lost.reason) }
        };
        let summary = |reply: &Result<(), String>| match reply {
            Ok(()) => "beat → alive".to_owned(),
            Err(reason) => format!("beat → lease lost: {reason}"),
        };
        let (reply, _) = self
            .journal
            .repeated(BEAT, &matched, legacy.as_ref(), live, summary)
            .await?;
        Ok(reply.map_err(|reason| types::LeaseLost { reason }))
    }
}

/// The note as the host carries it: without the secrets, and at most
/// [`MAX_PROGRESS_NOTE`](waft_core::limits::MAX_PROGRESS_NOTE) bytes.
fn carried(note: String, redactor: &Redactor) -> String {
    let note = if redactor.is_empty() {
        note
    } else {
        redactor.text(note)
    };
    cut_note(note)
}

#[cfg(test)]
mod tests {
    use waft_core::limits::MAX_PROGRESS_NOTE;

    use super::*;

    #[test]
    fn a_secret_is_redacted_before_the_cut_can_split_it() {
        let secret = "k".repeat(64);
        let redactor = Redactor::new([secret.as_str()]);
        // The secret straddles the cut: half of it would be kept.
        let note = format!("{}{secret}", "n".repeat(MAX_PROGRESS_NOTE - 40));
        let carried = carried(note, &redactor);
        assert!(carried.len() <= MAX_PROGRESS_NOTE);
        assert!(
            !carried.contains("kkkk"),
            "{}",
            &carried[carried.len() - 80..]
        );
        assert_eq!(carried, cut_note(carried.clone()));
    }

    #[test]
    fn a_short_note_passes_unchanged_and_a_secret_in_it_goes() {
        let redactor = Redactor::new(["hunter2222"]);
        assert_eq!(carried("step 3 of 9".into(), &redactor), "step 3 of 9");
        assert_eq!(
            carried("token hunter2222".into(), &redactor),
            "token [redacted]"
        );
        assert_eq!(
            carried("step 3 of 9".into(), &Redactor::default()),
            "step 3 of 9"
        );
    }
}
