//! A task's journal as one JSON document, `waft task journal ID --json`:
//! what `waft invoke FILE --replay J` needs to run the lambda locally
//! against it — the task (id, lambda, version, attempts, payload) and
//! every entry with its digest and its answer.
//!
//! Bytes (the payload, each digest and answer) are base64 (standard
//! alphabet, padded), so they come back exactly; an answer is in the
//! journal's own encoding, with the values of the lambda's secrets masked
//! by the Frontend. Strings (calls, summaries) are JSON strings.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::json;
use waft_store::{Attempt, JournalEntry, Task};

use crate::commands::client::time;
use crate::commands::journal::Use;

/// What the document says it is, checked when read back.
pub(crate) const FORMAT: &str = "waft-journal/1";

/// The document: the task and its journal, with how each entry was used.
pub(crate) fn export(
    task: &Task,
    entries: &[JournalEntry],
    attempts: &[Attempt],
) -> serde_json::Value {
    json!({
        "format": FORMAT,
        "bytes": "base64 (standard, padded): task.payload and each entry's digest and answer; \
                  answers in the journal's own encoding, secrets masked",
        "task": {
            "id": task.id,
            "lambda": task.lambda,
            "version": task.version,
            "collection": task.collection,
            "priority": task.priority,
            "status": task.status.as_str(),
            "attempts": task.attempt,
            "scheduled_at_ms": task.scheduled_at,
            "payload": STANDARD.encode(&task.payload),
        },
        "entries": entries.iter().map(|entry| {
            let used = Use::of(entry, attempts);
            json!({
                "seq": entry.seq,
                "call": entry.call,
                "digest": STANDARD.encode(&entry.digest),
                "answer": STANDARD.encode(&entry.answer),
                "summary": entry.summary,
                "outside": entry.outside,
                "attempt": entry.attempt,
                "live_attempt": used.live,
                "replayed_by": used.replayed,
                "at": time(entry.at),
                "at_ms": entry.at,
                "took_us": entry.took_us,
            })
        }).collect::<Vec<_>>(),
    })
}

/// A document read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exported {
    pub(crate) task: ExportedTask,
    pub(crate) entries: Vec<JournalEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct ExportedTask {
    pub(crate) id: String,
    pub(crate) lambda: String,
    #[serde(default)]
    pub(crate) version: Option<u32>,
    #[serde(default = "default_collection")]
    pub(crate) collection: String,
    #[serde(default)]
    pub(crate) priority: u8,
    pub(crate) attempts: u32,
    #[serde(default)]
    pub(crate) scheduled_at_ms: i64,
    #[serde(deserialize_with = "base64_bytes")]
    pub(crate) payload: Vec<u8>,
}

fn default_collection() -> String {
    "default".to_owned()
}

/// The document as read (its `format` checked before).
#[derive(Deserialize)]
struct Document {
    task: ExportedTask,
    entries: Vec<EntryIn>,
}

#[derive(Deserialize)]
struct EntryIn {
    seq: u32,
    call: String,
    #[serde(deserialize_with = "base64_bytes")]
    digest: Vec<u8>,
    #[serde(deserialize_with = "base64_bytes")]
    answer: Vec<u8>,
    #[serde(default)]
    summary: String,
    #[serde(default)]
    outside: bool,
    attempt: u32,
    #[serde(default)]
    at_ms: i64,
    #[serde(default)]
    took_us: u64,
}

fn base64_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = String::deserialize(d)?;
    STANDARD
        .decode(text.as_bytes())
        .map_err(|e| serde::de::Error::custom(format!("not base64 ({e})")))
}

/// Reads a document `export` wrote; the error says what is wrong and what
/// to do, in a sentence.
pub(crate) fn import(text: &str) -> Result<Exported, String> {
    const HOW: &str = "export one with `waft task journal ID --json > FILE`";
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON ({e}); {HOW}"))?;
    if value.is_array() {
        return Err(format!(
            "a list of entries without their answers (what an older `waft task journal --json` \
             printed): a replay needs them; {HOW}"
        ));
    }
    let format = value.get("format").and_then(|f| f.as_str());
    if format != Some(FORMAT) {
        return Err(match format {
            Some(other) => format!("format {other:?}, not {FORMAT:?}; {HOW} with this waft"),
            None => format!("not a journal document (no \"format\": {FORMAT:?}); {HOW}"),
        });
    }
    let document: Document = serde_json::from_value(value)
        .map_err(|e| format!("not a whole journal document ({e}); {HOW}"))?;
    let mut entries = Vec::with_capacity(document.entries.len());
    for (i, entry) in document.entries.into_iter().enumerate() {
        if entry.seq as usize != i {
            return Err(format!(
                "entry {i} has seq {}: entries must be in order, numbered from 0; {HOW}",
                entry.seq
            ));
        }
        entries.push(JournalEntry {
            seq: entry.seq,
            call: entry.call,
            digest: entry.digest,
            answer: entry.answer,
            summary: entry.summary,
            outside: entry.outside,
            attempt: entry.attempt,
            at: entry.at_ms,
            took_us: entry.took_us,
        });
    }
    Ok(Exported {
        task: document.task,
        entries,
    })
}

/// The origins (`scheme://host:port`) the journal's HTTP requests went to,
/// read from their summaries (`POST https://pay.example/charge → 201`):
/// what a replay that stops where the journal ends is granted, so that a
/// request the journal answers is admitted as it was (nothing is sent).
pub(crate) fn destinations(entries: &[JournalEntry]) -> Vec<String> {
    let mut origins: Vec<String> = entries
        .iter()
        .filter(|entry| entry.call == HTTP && !entry.digest.is_empty())
        .filter_map(|entry| {
            let url = entry.summary.split_whitespace().nth(1)?;
            let (scheme, rest) = url.split_once("://")?;
            let authority = rest.split(['/', '?', '#']).next()?;
            let authority = authority
                .rsplit_once('@')
                .map_or(authority, |(_, host)| host);
            (!authority.is_empty() && !authority.contains("[redacted]"))
                .then(|| format!("{scheme}://{authority}"))
        })
        .collect();
    origins.sort();
    origins.dedup();
    origins
}

const HTTP: &str = "wasi:http/outgoing-handler.handle";

#[cfg(test)]
mod tests {
    use waft_core::TaskStatus;

    use super::*;

    fn task(payload: Vec<u8>) -> Task {
        Task {
            id: "01JTASK".into(),
            lambda: "durable".into(),
            collection: "billing".into(),
            priority: 3,
            payload,
            status: TaskStatus::Dead,
            attempt: 2,
            max_attempts: 2,
            scheduled_at: 1_800_000_000_000,
            next_trigger_at: None,
            held: false,
            parked: false,
            paced: false,
            key_paced: false,
            debounced: false,
            awaits_turn: false,
            enqueue_token: 0,
            lease_token: 2,
            created_at: 1_800_000_000_000,
            enqueued_at: None,
            claimed_at: None,
            heartbeat_at: None,
            finished_at: None,
            progress: None,
            last_error: None,
            log: None,
            output: None,
            parent_id: None,
            idempotency_key: None,
            key: None,
            cron_id: None,
            version: Some(4),
            continuation: None,
            waiting_for_signal: None,
            waiting_for_children: false,
        }
    }

    fn entry(seq: u32, summary: &str, answer: Vec<u8>) -> JournalEntry {
        JournalEntry {
            seq,
            call: "wasi:http/outgoing-handler.handle".into(),
            digest: (0..32).collect(),
            answer,
            summary: summary.into(),
            outside: true,
            attempt: seq + 1,
            at: 1_800_000_000_123,
            took_us: 1_500,
        }
    }

    #[test]
    fn every_byte_and_every_character_comes_back_as_it_left() {
        let every_byte: Vec<u8> = (0..=255).collect();
        let task = task(every_byte.iter().rev().copied().collect());
        let entries = vec![
            entry(
                0,
                "POST https://pay.example/ü → 201 «payé» 💸",
                every_byte.clone(),
            ),
            entry(1, "", Vec::new()),
        ];
        let text = export(&task, &entries, &[]).to_string();
        let back = import(&text).unwrap();
        assert_eq!(back.entries, entries);
        assert_eq!(back.task.payload, task.payload);
        assert_eq!(
            (
                back.task.id.as_str(),
                back.task.lambda.as_str(),
                back.task.version
            ),
            ("01JTASK", "durable", Some(4))
        );
        assert_eq!(
            (
                back.task.collection.as_str(),
                back.task.priority,
                back.task.attempts
            ),
            ("billing", 3, 2)
        );
        assert_eq!(back.task.scheduled_at_ms, 1_800_000_000_000);
        // Pretty-printed (or edited by hand) reads the same.
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(import(&format!("{value:#}")).unwrap(), back);
    }

    #[test]
    fn each_entry_says_which_attempt_made_it_live_and_which_replayed_it() {
        let attempt = |attempt: u32, replayed: u32| Attempt {
            attempt,
            lease_token: i64::from(attempt),
            outcome: waft_store::AttemptOutcome::Retriable,
            error: None,
            log: None,
            started_at: None,
            ended_at: 0,
            replayed,
        };
        let entries = [entry(0, "a", vec![]), entry(1, "b", vec![])];
        let document = export(&task(Vec::new()), &entries, &[attempt(1, 0), attempt(2, 1)]);
        assert_eq!(document["format"], FORMAT);
        assert_eq!(document["entries"][0]["live_attempt"], 1);
        assert_eq!(document["entries"][0]["replayed_by"], json!([2]));
        assert_eq!(document["entries"][1]["replayed_by"], json!([]));
        assert_eq!(document["entries"][1]["outside"], true);
        assert_eq!(document["task"]["status"], "dead");
    }

    #[test]
    fn the_origins_requests_went_to_are_read_from_summaries() {
        let mut entries = vec![
            entry(0, "POST https://pay.example/charge?x=1 → 201", vec![]),
            entry(1, "GET http://127.0.0.1:8080 → 200", vec![]),
            entry(2, "POST https://pay.example/refund → 500", vec![]),
            entry(3, "in flight: never answered", vec![]),
        ];
        entries[3].digest.clear();
        assert_eq!(
            destinations(&entries),
            ["http://127.0.0.1:8080", "https://pay.example"]
        );
    }

    #[test]
    fn bad_documents_say_what_is_wrong_and_how_to_get_a_good_one() {
        let good = export(&task(b"{}".to_vec()), &[entry(0, "x", vec![1])], &[]);
        let refused = |text: &str, says: &str| {
            let error = import(text).unwrap_err();
            assert!(error.contains(says), "{error}");
            assert!(error.contains("waft task journal ID --json"), "{error}");
        };
        refused("{\"format\":", "not JSON");
        refused("", "not JSON");
        refused("[{\"seq\":0}]", "without their answers");
        refused("{}", "no \"format\"");
        refused(r#"{"format":"waft-journal/9"}"#, "waft-journal/9");
        let mut missing = good.clone();
        missing["task"].as_object_mut().unwrap().remove("payload");
        refused(&missing.to_string(), "payload");
        let mut bad_bytes = good.clone();
        bad_bytes["entries"][0]["answer"] = json!("not base64!");
        refused(&bad_bytes.to_string(), "not base64");
        let mut out_of_order = good;
        out_of_order["entries"][0]["seq"] = json!(3);
        refused(&out_of_order.to_string(), "entry 0 has seq 3");
    }
}
