//! `waft invoke FILE.wasm`: one task, run locally, no server.
//!
//! Runs the lambda exactly as an executor would (same runtime, same limits,
//! a fresh sandboxed instance) with a local host: heartbeats succeed and
//! child tasks are listed instead of scheduled.
//!
//! With `--replay J` (a document of `waft task journal ID --json`), the
//! lambda runs against that task's journal: each call it makes is answered
//! from the journal while it matches, as the task's next attempt would be;
//! where the journal ends it stops there (`--then stop`) or goes on live
//! (`--then live`). A production failure, reproduced on a laptop.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use serde_json::json;
use waft_core::model::Wait;
use waft_core::{ByteSize, Limits, parse_duration};
use waft_runtime::{
    Execution, KillSwitch, Outcome, PreparedLambda, RecordingHost, Runtime, RuntimeConfig, Sandbox,
    TaskInput,
};

use crate::commands::journal_file::{self, Exported};
use crate::commands::lambda::GrantArgs;
use crate::exit::{self, Failure};

/// Arguments of `waft invoke`.
#[derive(Debug, Args)]
#[command(
    after_help = "Exit codes: 0 success, 2 bad input, 3 not a Waft lambda, 10 retriable \
failure, 11 fatal failure, 12 crash, 13 memory limit, 14 fuel limit, 15 timeout, 16 output \
limit, 17 killed, 19 journal limit, 1 internal error."
)]
pub struct InvokeArgs {
    /// The lambda: a `.wasm` component of the waft:lambda world.
    pub file: PathBuf,
    /// The task's payload, as JSON.
    #[arg(long, value_name = "JSON", conflicts_with = "payload_file")]
    pub payload: Option<String>,
    /// Read the task's payload (any bytes) from a file; `-` for stdin.
    #[arg(long, value_name = "FILE")]
    pub payload_file: Option<PathBuf>,
    /// The largest payload accepted.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_size)]
    pub max_payload: ByteSize,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub grants: GrantArgs,
    /// A CA certificate (PEM) outbound HTTPS trusts besides the system's.
    #[arg(long, value_name = "FILE")]
    pub outbound_ca: Option<PathBuf>,
    /// The attempt number the lambda sees (1 = first run; with `--replay`,
    /// the task's last attempt).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub attempt: Option<u32>,
    /// The lambda name the task carries (default: the file's stem; with
    /// `--replay`, the task's).
    #[arg(long)]
    pub lambda: Option<String>,
    /// The collection the task carries (default: `default`; with
    /// `--replay`, the task's).
    #[arg(long)]
    pub collection: Option<String>,
    /// The priority the task carries (default: 0; with `--replay`, the
    /// task's).
    #[arg(long)]
    pub priority: Option<u8>,
    /// Run against a task's journal, as exported by `waft task journal ID
    /// --json > J`: its calls answered from there while they match (no
    /// request sent), with the task's id and payload (`--payload` and
    /// `--payload-file` override it). A call that does not match is
    /// reported with its entry: what the journal has, what the lambda did.
    #[arg(long, value_name = "J")]
    pub replay: Option<PathBuf>,
    /// What happens where the journal ends: `stop` the lambda at the first
    /// call it does not answer (and say which), or go on `live`, as a plain
    /// `waft invoke` would, with its grants.
    #[arg(long, value_enum, default_value_t = Then::Stop, requires = "replay")]
    pub then: Then,
    /// Cache compiled components in this directory.
    #[arg(long, env = "WAFT_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `waft invoke --replay` does where the journal ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Then {
    /// Stop at the first call the journal does not answer.
    Stop,
    /// Make that call and the rest live.
    Live,
}

/// The limits of one lambda, as flags (shared by `invoke` and `bench`).
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Memory the instance may grow to.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub max_memory: ByteSize,
    /// Wall-clock time the task may run.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration_arg)]
    pub timeout: Duration,
    /// Fuel (about one unit per WebAssembly instruction) the task may burn;
    /// unlimited when absent.
    #[arg(long, value_name = "N")]
    pub fuel: Option<u64>,
    /// Output a successful task may return.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_size)]
    pub max_output: ByteSize,
    /// Log kept per task; beyond it records are dropped and counted.
    #[arg(long, value_name = "SIZE", default_value = "256KiB", value_parser = parse_size)]
    pub max_log: ByteSize,
}

impl LimitArgs {
    /// The limits, checked against their bounds.
    pub fn limits(&self) -> Result<Limits, Failure> {
        let limits = Limits {
            max_memory: self.max_memory,
            timeout: self.timeout,
            fuel: self.fuel,
            max_output: self.max_output,
            max_log: self.max_log,
        };
        limits
            .validate()
            .map_err(|e| Failure::usage(e.to_string()))?;
        Ok(limits)
    }
}

pub(crate) fn parse_size(text: &str) -> Result<ByteSize, String> {
    text.parse()
        .map_err(|e: waft_core::ParseError| e.to_string())
}

pub(crate) fn parse_duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// Runs `waft invoke`.
pub fn run(args: InvokeArgs) -> Result<ExitCode, Failure> {
    let replay = match &args.replay {
        Some(path) => Some(read_replay(path)?),
        None => None,
    };
    let replay_only = replay.is_some() && args.then == Then::Stop;
    let mut grants = args.grants.grants()?;
    if let Some(exported) = replay.as_ref().filter(|_| replay_only) {
        // Where the journal's requests went: admitted as they were, and
        // answered from the journal (a replay that stops sends nothing).
        for origin in journal_file::destinations(&exported.entries) {
            if let Ok(pattern) = origin.parse() {
                grants.outbound.push(pattern);
            }
        }
    }
    let sandbox = Sandbox {
        limits: args.limits.limits()?,
        grants: Arc::new(grants),
        secrets: Arc::default(),
        replay_only,
        ..Sandbox::default()
    };
    let payload = match (
        &replay,
        args.payload.is_some() || args.payload_file.is_some(),
    ) {
        (Some(exported), false) => exported.task.payload.clone(),
        _ => read_payload(&args)?,
    };
    let wasm = read_wasm(&args.file)?;
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::internal(format!("cannot start the async runtime: {e}")))?;
    tokio.block_on(async {
        let lambda = load(
            &wasm,
            &args.file,
            args.cache_dir.clone(),
            args.outbound_ca.clone(),
        )
        .await?;
        let task = match &replay {
            // The task as it ran: its id, name and time take part in what
            // the lambda does (an idempotency key is made of the id).
            Some(exported) => TaskInput {
                id: exported.task.id.clone(),
                lambda: args
                    .lambda
                    .clone()
                    .unwrap_or_else(|| exported.task.lambda.clone()),
                collection: args
                    .collection
                    .clone()
                    .unwrap_or_else(|| exported.task.collection.clone()),
                priority: args.priority.unwrap_or(exported.task.priority),
                attempt: args.attempt.unwrap_or(exported.task.attempts.max(1)),
                scheduled_at: UNIX_EPOCH
                    + Duration::from_millis(
                        u64::try_from(exported.task.scheduled_at_ms).unwrap_or(0),
                    ),
                payload,
                journal: exported.entries.clone(),
            },
            None => TaskInput {
                id: "local".into(),
                lambda: args.lambda.clone().unwrap_or_else(|| file_stem(&args.file)),
                collection: args.collection.clone().unwrap_or_else(|| "default".into()),
                priority: args.priority.unwrap_or(0),
                attempt: args.attempt.unwrap_or(1),
                scheduled_at: SystemTime::now(),
                payload,
                journal: Vec::new(),
            },
        };
        let host = Arc::new(RecordingHost::default());
        let kill = KillSwitch::new();
        let interrupt = kill.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupt.kill("interrupted");
            }
        });
        let execution = lambda.run(task, &sandbox, host.clone(), &kill).await;
        let replayed = replay.as_ref().map(|exported| Replayed {
            file: args.replay.clone().unwrap_or_default(),
            task: exported.task.id.clone(),
            lambda: exported.task.lambda.clone(),
            version: exported.task.version,
            entries: exported.entries.len(),
            then: args.then,
            execution: &execution,
        });
        if args.json {
            let mut report = report_json(&execution, &host);
            if let (Some(replayed), Some(object)) = (&replayed, report.as_object_mut()) {
                object.insert("replay".into(), replayed.json());
            }
            println!("{report}");
        } else {
            if let Some(replayed) = &replayed {
                print!("{}", replayed.text());
            }
            print!("{}", report_text(&execution, &host));
        }
        // Stopped where the journal ends, as asked: the replay went well.
        if execution.journal_end.is_some() {
            return Ok(ExitCode::SUCCESS);
        }
        Ok(ExitCode::from(exit::for_outcome(&execution.outcome)))
    })
}

/// A journal document, read and checked, or a usage error that says what
/// is wrong with it.
fn read_replay(path: &Path) -> Result<Exported, Failure> {
    let bytes = read_limited(path, MAX_REPLAY_FILE)?;
    if bytes.len() as u64 > MAX_REPLAY_FILE {
        return Err(Failure::usage(format!(
            "--replay {}: over {} bytes, more than a journal holds",
            path.display(),
            MAX_REPLAY_FILE
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        Failure::usage(format!(
            "--replay {}: not text (UTF-8); export a journal with `waft task journal ID --json > FILE`",
            path.display()
        ))
    })?;
    journal_file::import(&text)
        .map_err(|e| Failure::usage(format!("--replay {}: {e}", path.display())))
}

/// The largest `--replay` document read: a journal at its bound (64 MiB of
/// entries) in base64, with room for its JSON.
const MAX_REPLAY_FILE: u64 = 128 << 20;

/// What a replay did with its journal, for the report.
struct Replayed<'a> {
    file: PathBuf,
    task: String,
    lambda: String,
    version: Option<u32>,
    entries: usize,
    then: Then,
    execution: &'a Execution,
}

impl Replayed<'_> {
    /// Where the replay stopped answering from the journal, and why.
    fn verdict(&self) -> String {
        let execution = self.execution;
        let replayed = execution.replayed;
        if let Some((seq, call)) = &execution.journal_end {
            return format!(
                "the journal ends at entry {seq}: the lambda's next call, {call}, is not in it;                  stopped there (--then live goes on)"
            );
        }
        if let Outcome::Diverged { message } = &execution.outcome {
            return format!("{message} (the journal's entries before it matched)");
        }
        if replayed as usize >= self.entries {
            match self.then {
                Then::Live => "the whole journal matched, then the lambda went on live".into(),
                Then::Stop => "the whole journal matched and the lambda needed no more".into(),
            }
        } else {
            format!(
                "the lambda ended with {} of the journal's {} entries replayed",
                replayed, self.entries
            )
        }
    }

    fn text(&self) -> String {
        let version = self
            .version
            .map_or_else(String::new, |v| format!(" version {v}"));
        format!(
            "replay: {} of {} journal entries replayed from {} (task {}, lambda {}{version})\n\
             journal: {}\n",
            self.execution.replayed,
            self.entries,
            self.file.display(),
            self.task,
            self.lambda,
            self.verdict()
        )
    }

    fn json(&self) -> serde_json::Value {
        let execution = self.execution;
        json!({
            "file": self.file.display().to_string(),
            "task": self.task,
            "lambda": self.lambda,
            "version": self.version,
            "entries": self.entries,
            "replayed": execution.replayed,
            "then": match self.then { Then::Stop => "stop", Then::Live => "live" },
            "ended_at": execution.journal_end.as_ref().map(|(seq, call)| json!({
                "seq": seq,
                "call": call,
            })),
            "diverged": match &execution.outcome {
                Outcome::Diverged { message } => Some(message),
                _ => None,
            },
            "verdict": self.verdict(),
        })
    }
}

/// Builds a runtime for local use and prepares `wasm` in it.
pub async fn load(
    wasm: &[u8],
    file: &Path,
    cache_dir: Option<PathBuf>,
    outbound_ca: Option<PathBuf>,
) -> Result<PreparedLambda, Failure> {
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 16,
        cache_dir,
        outbound_ca,
        ..RuntimeConfig::default()
    })
    .map_err(|e| Failure::internal(e.to_string()))?;
    runtime.prepare(wasm).await.map_err(|e| Failure {
        code: exit::NOT_A_LAMBDA,
        message: format!("{} is not a Waft lambda: {e}", file.display()),
    })
}

/// Reads a `.wasm` file, with a message that names it when that fails.
pub fn read_wasm(file: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(file).map_err(|e| Failure::usage(format!("cannot read {}: {e}", file.display())))
}

fn read_payload(args: &InvokeArgs) -> Result<Vec<u8>, Failure> {
    let max = args.max_payload.bytes();
    let payload = if let Some(json) = &args.payload {
        if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(json) {
            return Err(Failure::usage(format!(
                "--payload is not valid JSON ({e}); pass raw bytes with --payload-file instead"
            )));
        }
        json.clone().into_bytes()
    } else if let Some(path) = &args.payload_file {
        read_limited(path, max)?
    } else {
        Vec::new()
    };
    if payload.len() as u64 > max {
        return Err(Failure::usage(format!(
            "the payload is {} bytes, over the limit of {} (raise it with --max-payload)",
            payload.len(),
            args.max_payload
        )));
    }
    Ok(payload)
}

/// Reads at most `max + 1` bytes, so an oversized (or endless) input is
/// refused without reading it all.
pub(crate) fn read_limited(path: &Path, max: u64) -> Result<Vec<u8>, Failure> {
    use std::io::Read;
    let cannot = |e: std::io::Error| Failure::usage(format!("cannot read {}: {e}", path.display()));
    let mut bytes = Vec::new();
    if path == Path::new("-") {
        std::io::stdin()
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
    } else {
        std::fs::File::open(path)
            .map_err(cannot)?
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
    }
    Ok(bytes)
}

fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "lambda".to_owned(), |s| s.to_string_lossy().into_owned())
}

fn report_text(execution: &Execution, host: &RecordingHost) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let detail = match &execution.outcome {
        Outcome::Success { .. } => String::new(),
        Outcome::Retriable {
            message,
            retry_after,
        } => match retry_after {
            Some(after) => format!(": {message} (retry after {after:?})"),
            None => format!(": {message}"),
        },
        Outcome::Fatal { message }
        | Outcome::Trapped { message }
        | Outcome::HostError { message }
        | Outcome::Diverged { message } => {
            format!(": {message}")
        }
        Outcome::LimitExceeded { detail, .. } => format!(": {detail}"),
        Outcome::Killed { reason } => format!(": {reason}"),
        Outcome::Suspended { until, wait } => {
            let until = humantime::format_rfc3339_millis(*until);
            match wait {
                Wait::Timer => format!(" until {until}"),
                Wait::Signal { name, .. } => format!(" until signal {name:?} or {until}"),
                Wait::Children { ids } => format!(" until its {} children end", ids.len()),
            }
        }
    };
    let _ = writeln!(out, "outcome: {}{detail}", execution.outcome.kind());
    let mut stats = format!(
        "{:.2?}, peak memory {}",
        execution.duration,
        ByteSize::b(execution.peak_memory)
    );
    if let Some(fuel) = execution.fuel_consumed {
        let _ = write!(stats, ", fuel {fuel}");
    }
    let _ = writeln!(out, "stats: {stats}");
    if let Outcome::Success {
        output: Some(bytes),
    } = &execution.outcome
    {
        let _ = writeln!(out, "output: {}", String::from_utf8_lossy(bytes));
    }
    if !execution.log.records.is_empty() || execution.log.truncated() {
        let _ = writeln!(out, "log:");
        for record in &execution.log.records {
            let fields: String = record
                .fields
                .iter()
                .map(|(k, v)| format!(" {k}={v}"))
                .collect();
            let _ = writeln!(
                out,
                "  {:>9.3}ms {:<6} {}{fields}",
                record.at.as_secs_f64() * 1000.0,
                record.source.to_string(),
                record.message
            );
        }
        if execution.log.truncated() {
            let _ = writeln!(
                out,
                "  ... {} records ({} bytes) dropped: over the log limit",
                execution.log.dropped_records, execution.log.dropped_bytes
            );
        }
    }
    let heartbeats = host.heartbeats();
    if heartbeats > 0 {
        let last = host.last_progress().unwrap_or_else(|| "-".into());
        let _ = writeln!(out, "heartbeats: {heartbeats} (last progress: {last})");
    }
    for child in host.children() {
        let _ = writeln!(
            out,
            "child task requested (not run locally): {} {}",
            child.lambda,
            String::from_utf8_lossy(&child.payload)
        );
    }
    out
}

fn report_json(execution: &Execution, host: &RecordingHost) -> serde_json::Value {
    let mut report = json!({
        "outcome": execution.outcome.kind(),
        "duration_ms": execution.duration.as_secs_f64() * 1000.0,
        "peak_memory": execution.peak_memory,
        "fuel_consumed": execution.fuel_consumed,
        "log": execution.log.records.iter().map(|r| json!({
            "at_ms": r.at.as_secs_f64() * 1000.0,
            "source": r.source.to_string(),
            "message": r.message,
            "fields": r.fields.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        })).collect::<Vec<_>>(),
        "log_dropped_records": execution.log.dropped_records,
        "heartbeats": host.heartbeats(),
        "last_progress": host.last_progress(),
        "children_requested": host.children_requested(),
        "children": host.children().iter().map(|c| json!({
            "lambda": c.lambda,
            "payload": String::from_utf8_lossy(&c.payload),
            "collection": c.collection,
            "priority": c.priority,
        })).collect::<Vec<_>>(),
    });
    let fields = match &execution.outcome {
        Outcome::Success { output } => json!({
            "output": output.as_ref().map(|bytes| {
                serde_json::from_slice::<serde_json::Value>(bytes)
                    .unwrap_or_else(|_| String::from_utf8_lossy(bytes).into())
            }),
        }),
        Outcome::Retriable {
            message,
            retry_after,
        } => json!({
            "message": message,
            "retry_after_ms": retry_after.map(|d| d.as_millis() as u64),
        }),
        Outcome::Fatal { message }
        | Outcome::Trapped { message }
        | Outcome::HostError { message }
        | Outcome::Diverged { message } => {
            json!({ "message": message })
        }
        Outcome::LimitExceeded { limit, detail } => {
            json!({ "limit": limit.as_str(), "message": detail })
        }
        Outcome::Killed { reason } => json!({ "message": reason }),
        Outcome::Suspended { until, wait } => json!({
            "until_ms": waft_core::model::millis_of(*until),
            "wait": wait.kind(),
            "signal": match wait {
                Wait::Timer | Wait::Children { .. } => None,
                Wait::Signal { name, .. } => Some(name),
            },
            "children": match wait {
                Wait::Children { ids } => Some(ids),
                Wait::Timer | Wait::Signal { .. } => None,
            },
        }),
    };
    if let (Some(report), serde_json::Value::Object(fields)) = (report.as_object_mut(), fields) {
        report.extend(fields);
    }
    report
}
