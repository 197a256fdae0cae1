//! `waft lambda …`: deploy lambdas and look at them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use waft_client::FrontendClient;
use waft_core::retention::{End, Keep, Retention};
use waft_core::{
    Backoff, ByteSize, Grants, KeyFairness, LambdaConfig, OnDivergence, OutboundLimits,
    OutboundPattern,
};
use waft_services::ClientApi;
use waft_store::{Lambda, LambdaVersion};

use crate::commands::client::{ClientArgs, block_on, time};
use crate::commands::invoke::{LimitArgs, parse_duration_arg, parse_size, read_wasm};
use crate::exit::Failure;

/// Arguments of `waft lambda`.
#[derive(Debug, Args)]
pub struct LambdaArgs {
    #[command(subcommand)]
    pub command: LambdaCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum LambdaCommand {
    /// Deploy a `.wasm` component as the lambda's next version. The server
    /// checks it is a Waft lambda first.
    Deploy(Box<DeployArgs>),
    /// Every lambda at its current version.
    List,
    /// Make an earlier version current again (the previous one unless
    /// VERSION is given), as a new version with its component and
    /// configuration.
    Rollback { name: String, version: Option<u32> },
    /// Delete a lambda: its versions, secrets, periodic schedules, gates,
    /// queues and every task of it, with their attempts, logs and journals.
    /// Refused while tasks of it may still run (waiting, running, suspended
    /// or dead), unless --drop-tasks.
    Delete {
        name: String,
        /// Delete its tasks that may still run too; an execution of one
        /// stops when its next heartbeat finds it gone.
        #[arg(long)]
        drop_tasks: bool,
    },
    /// Every kept version of a lambda, oldest first, with the live tasks that
    /// still need it (pinned to it, or resuming on it: their journal's
    /// version), and how many of them are suspended.
    Versions { name: String },
    /// Move the lambda's waiting tasks (suspended, waiting for a retry, dead,
    /// queued) to a version: exactly those whose journals replay cleanly on
    /// it, as `deploy --check` replays them, each only if it has not been
    /// claimed or written to since; the others stay on the versions that
    /// wrote their journals. Exits 26 when some stay.
    Move {
        name: String,
        /// The version they move to; the current one when absent.
        #[arg(long, value_name = "VERSION")]
        to: Option<u32>,
    },
    /// One lambda and its configuration.
    Get {
        name: String,
        /// A past version; the current one when absent.
        #[arg(long)]
        version: Option<u32>,
    },
}

#[derive(Debug, Args)]
pub struct DeployArgs {
    /// The lambda's name (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// The component, built for wasm32-wasip2.
    pub file: PathBuf,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Executions a task gets before it becomes a dead letter.
    #[arg(long, default_value_t = 5)]
    pub max_attempts: u32,
    /// Delay after the first failure.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration_arg)]
    pub backoff_base: Duration,
    /// Growth of the delay per further failure.
    #[arg(long, default_value_t = 2.0)]
    pub backoff_factor: f64,
    /// Longest delay between attempts.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration_arg)]
    pub backoff_max: Duration,
    /// Priority levels (tasks take 0..N, higher first).
    #[arg(long, default_value_t = 3)]
    pub priorities: u8,
    /// Priority of tasks scheduled without one.
    #[arg(long, default_value_t = 0)]
    pub default_priority: u8,
    /// Largest payload a task may carry.
    #[arg(long, value_name = "SIZE", default_value = "256KiB", value_parser = parse_size)]
    pub max_payload: ByteSize,
    /// Tasks of this lambda one executor runs at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: u32,
    /// Scheduling quota, tasks a second: the Frontend refuses more (with a
    /// burst of one second's worth) and the Store Consumer starts a backlog
    /// no faster. No quota when absent.
    #[arg(long, value_name = "PER_SEC")]
    pub quota: Option<f64>,
    /// Tasks of one key (`waft task schedule --key`) in flight at once,
    /// across the whole installation; the others wait parked, spending no
    /// attempt. Unlimited when absent.
    #[arg(long, value_name = "N")]
    pub key_concurrency: Option<u32>,
    /// Tasks of one key started a period, across the whole installation:
    /// `10/1m` is a bucket of ten that refills one every six seconds. The
    /// others wait for their slots, spending no attempt. Unlimited when
    /// absent.
    #[arg(long, value_name = "COUNT/PERIOD")]
    pub key_rate: Option<waft_core::KeyRate>,
    /// Fairness between keys: ready tasks of different keys take turns,
    /// so one key's backlog does not delay another key's first task.
    /// Without it, tasks start first come, first served.
    #[arg(long)]
    pub key_fairness: bool,
    /// A key's weight under fairness, KEY=WEIGHT (1..=100; every other key
    /// weighs 1): `gold=4` takes four turns to another key's one.
    /// Repeatable; implies --key-fairness.
    #[arg(long = "key-weight", value_name = "KEY=WEIGHT", value_parser = waft_core::KeyFairness::parse_weight)]
    pub key_weight: Vec<(String, u32)>,
    /// Under fairness, how many of a key's tasks (times its weight) wait in
    /// the queue at once, the rest parked in the store (1..=10000, default
    /// 100). Smaller: another key's task starts sooner behind a backlog;
    /// larger: a lone key's backlog runs faster. Implies --key-fairness.
    #[arg(long, value_name = "TASKS", value_parser = clap::value_parser!(u32).range(1..=i64::from(waft_core::KeyFairness::MAX_LOOKAHEAD)))]
    pub key_lookahead: Option<u32>,
    /// Another lambda whose tasks this lambda may schedule as children
    /// (repeatable; a lambda may always schedule its own). Needs the right
    /// to schedule that lambda's tasks.
    #[arg(long = "allow-child", value_name = "LAMBDA")]
    pub allow_child: Vec<String>,
    /// What a retry does when the lambda's host calls stop matching its
    /// task's journal (the code changed, or it is not deterministic):
    /// `fail` ends the task fatal, saying where the calls differ;
    /// `restart` discards the journal and runs the task afresh.
    #[arg(long, value_name = "POLICY", default_value = "fail", value_parser = on_divergence_parser())]
    pub on_divergence: OnDivergence,
    /// How long its tasks that ended one way are kept before they are
    /// deleted (repeatable): `success=1h`, `fatal=30d`, `cancelled=forever`;
    /// ends: success, fatal, dropped, cancelled. An end not named keeps the
    /// installation's retention (`[retention]`). Dead letters stay until
    /// redriven or purged.
    #[arg(long = "retain", value_name = "END=DURATION", value_parser = parse_retain)]
    pub retain: Vec<(End, Keep)>,
    #[command(flatten)]
    pub grants: GrantArgs,
    /// Deploy nothing: replay the journal of every live task of the lambda
    /// (suspended, waiting for a retry, dead) against this component and
    /// configuration, in the sandbox and answered from the journal alone,
    /// and report how many would resume cleanly on it and where the others
    /// depart. Exits 26 when any departs.
    #[arg(long)]
    pub check: bool,
}

fn parse_retain(text: &str) -> Result<(End, Keep), String> {
    let retention = Retention::parse_each([text])?;
    Ok(retention.iter().next().expect("one item parsed"))
}

/// `fail` or `restart`, listed in the help as the values it takes.
fn on_divergence_parser() -> impl clap::builder::TypedValueParser<Value = OnDivergence> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    let names = OnDivergence::ALL.map(OnDivergence::as_str);
    PossibleValuesParser::new(names)
        .map(|name| OnDivergence::parse(&name).expect("a possible value is a policy"))
}

/// What the lambda's executions may reach; nothing unless granted here.
#[derive(Debug, Args)]
pub struct GrantArgs {
    /// A destination its executions may send HTTP requests to (repeatable):
    /// `https://api.example.com`, `https://*.example.com:8443`,
    /// `http://10.0.0.0/8:*`; `*://*:*` for every destination. None: no
    /// network.
    #[arg(long = "allow-outbound", value_name = "PATTERN", value_parser = parse_pattern)]
    pub allow_outbound: Vec<OutboundPattern>,
    /// A configuration variable the lambda reads through wasi:config
    /// (repeatable). Visible to anyone who may read the lambda: put secrets
    /// in `waft secret set` instead.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Outbound requests one execution may send.
    #[arg(long, value_name = "N", default_value_t = OutboundLimits::default().max_requests)]
    pub outbound_max_requests: u32,
    /// Outbound requests one execution may have open at once.
    #[arg(long, value_name = "N", default_value_t = OutboundLimits::default().max_connections)]
    pub outbound_max_connections: u32,
    /// Largest response body an outbound request may receive.
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = parse_size)]
    pub outbound_max_response: ByteSize,
    /// Time to connect (TLS included), cut to what is left of the task's.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration_arg)]
    pub outbound_connect_timeout: Duration,
    /// Time from a request sent to the response's first byte.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration_arg)]
    pub outbound_first_byte_timeout: Duration,
    /// Time between two chunks of a response body.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration_arg)]
    pub outbound_between_bytes_timeout: Duration,
}

impl GrantArgs {
    pub(crate) fn grants(&self) -> Result<Grants, Failure> {
        let mut env = BTreeMap::new();
        for (key, value) in &self.env {
            if env.insert(key.clone(), value.clone()).is_some() {
                return Err(Failure::usage(format!("--env {key} is given twice")));
            }
        }
        let grants = Grants {
            outbound: self.allow_outbound.clone(),
            outbound_limits: OutboundLimits {
                max_requests: self.outbound_max_requests,
                max_connections: self.outbound_max_connections,
                max_response: self.outbound_max_response,
                connect_timeout: self.outbound_connect_timeout,
                first_byte_timeout: self.outbound_first_byte_timeout,
                between_bytes_timeout: self.outbound_between_bytes_timeout,
            },
            env,
        };
        grants
            .validate()
            .map_err(|e| Failure::usage(format!("invalid grants: {e}")))?;
        Ok(grants)
    }
}

fn parse_pattern(text: &str) -> Result<OutboundPattern, String> {
    text.parse()
        .map_err(|e: waft_core::GrantError| e.to_string())
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    waft_core::grants::check_key(key).map_err(|e| e.to_string())?;
    Ok((key.to_owned(), value.to_owned()))
}

impl DeployArgs {
    /// The `--retain` items; an end named twice is refused.
    fn retention(&self) -> Result<Retention, Failure> {
        let mut retention = Retention::default();
        for (end, keep) in &self.retain {
            if retention.get(*end).is_some() {
                return Err(Failure::usage(format!("--retain names {end} twice")));
            }
            retention.set(*end, *keep);
        }
        Ok(retention)
    }

    /// `--key-fairness`, its `--key-weight`s and `--key-lookahead`; a key
    /// weighed twice is refused.
    fn key_fairness(&self) -> Result<Option<KeyFairness>, Failure> {
        if !self.key_fairness && self.key_weight.is_empty() && self.key_lookahead.is_none() {
            return Ok(None);
        }
        let mut fairness = KeyFairness::default();
        if let Some(lookahead) = self.key_lookahead {
            fairness.lookahead = lookahead;
        }
        for (key, weight) in &self.key_weight {
            if fairness.weights.insert(key.clone(), *weight).is_some() {
                return Err(Failure::usage(format!("--key-weight weighs {key:?} twice")));
            }
        }
        Ok(Some(fairness))
    }

    fn config(&self) -> Result<LambdaConfig, Failure> {
        let config = LambdaConfig {
            limits: self.limits.limits()?,
            max_attempts: self.max_attempts,
            backoff: Backoff {
                base: self.backoff_base,
                factor: self.backoff_factor,
                max: self.backoff_max,
            },
            priorities: self.priorities,
            default_priority: self.default_priority,
            max_payload: self.max_payload,
            concurrency: self.concurrency,
            quota_per_sec: self.quota,
            key_concurrency: self.key_concurrency,
            key_rate: self.key_rate,
            key_fairness: self.key_fairness()?,
            allowed_children: self.allow_child.clone(),
            grants: self.grants.grants()?,
            on_divergence: self.on_divergence,
            retention: self.retention()?,
        };
        config
            .validate()
            .map_err(|e| Failure::usage(format!("invalid lambda configuration: {e}")))?;
        Ok(config)
    }
}

/// Runs `waft lambda …`.
pub fn run(args: LambdaArgs) -> Result<ExitCode, Failure> {
    let client = args.client;
    block_on(async move {
        let frontend = client.frontend()?;
        match args.command {
            LambdaCommand::Deploy(deploy) if deploy.check => {
                let config = deploy.config()?;
                let component = read_wasm(&deploy.file)?;
                return super::deploy_check::run(
                    &frontend,
                    &client,
                    &deploy.name,
                    component,
                    config,
                )
                .await;
            }
            LambdaCommand::Deploy(deploy) => deploy_lambda(&frontend, &client, *deploy).await?,
            LambdaCommand::Move { name, to } => {
                return super::deploy_check::move_waiting(&frontend, &client, &name, to).await;
            }
            LambdaCommand::List => {
                let lambdas = frontend
                    .lambda_list()
                    .await
                    .map_err(|e| client.failure(e))?;
                print_lambdas(&lambdas, client.json, true);
            }
            LambdaCommand::Delete { name, drop_tasks } => {
                let deleted = frontend
                    .lambda_delete(&name, drop_tasks)
                    .await
                    .map_err(|e| client.failure(e))?;
                if client.json {
                    println!(
                        "{}",
                        json!({ "lambda": name, "tasks": deleted.tasks, "live": deleted.live })
                    );
                } else {
                    println!(
                        "{name} deleted, with {} tasks ({} of them not ended)",
                        deleted.tasks, deleted.live
                    );
                }
            }
            LambdaCommand::Rollback { name, version } => {
                let lambda = frontend
                    .lambda_rollback(&name, version)
                    .await
                    .map_err(|e| client.failure(e))?;
                if client.json {
                    println!("{}", lambda_json(&lambda));
                } else {
                    println!(
                        "{} is now version {} ({})",
                        lambda.name, lambda.version, lambda.digest
                    );
                }
            }
            LambdaCommand::Versions { name } => {
                let versions = frontend
                    .lambda_versions(&name)
                    .await
                    .map_err(|e| client.failure(e))?;
                print_versions(&versions, client.json);
            }
            LambdaCommand::Get { name, version } => {
                let lambda = frontend
                    .lambda_get(&name, version)
                    .await
                    .map_err(|e| client.failure(e))?;
                if client.json {
                    println!("{}", lambda_json(&lambda));
                } else {
                    println!("{:#}", lambda_json(&lambda));
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `waft lambda deploy`: uploads the component and follows the Frontend's
/// checks.
async fn deploy_lambda(
    frontend: &FrontendClient,
    client: &ClientArgs,
    deploy: DeployArgs,
) -> Result<(), Failure> {
    let config = deploy.config()?;
    let component = read_wasm(&deploy.file)?;
    // A spinner on a terminal while the Frontend checks and
    // compiles (seconds for a Python or JavaScript lambda);
    // nothing when stderr is not a terminal.
    let spinner = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{spinner} deploying {msg}").expect("a valid template"),
    );
    spinner.set_message(format!("{}: uploading", deploy.name));
    spinner.enable_steady_tick(Duration::from_millis(120));
    let deployed = frontend
        .lambda_deploy_reporting(&deploy.name, component, config, |report| {
            spinner.set_message(format!(
                "{}: {}, {} s",
                deploy.name,
                report.stage,
                report.elapsed.as_secs()
            ));
        })
        .await;
    spinner.finish_and_clear();
    let lambda = deployed.map_err(|e| client.failure(e))?;
    if client.json {
        println!("{}", lambda_json(&lambda));
    } else {
        println!(
            "deployed {} version {} ({})",
            lambda.name, lambda.version, lambda.digest
        );
    }
    Ok(())
}

/// One line a lambda version (with the lambda's name when `named`), or a
/// JSON array.
fn print_lambdas(lambdas: &[Lambda], as_json: bool, named: bool) {
    if as_json {
        let list: Vec<_> = lambdas.iter().map(lambda_json).collect();
        println!("{}", serde_json::Value::Array(list));
        return;
    }
    for lambda in lambdas {
        let name = if named {
            format!("{:<24} ", lambda.name)
        } else {
            String::new()
        };
        println!(
            "{name}v{:<4} {}  deployed {}",
            lambda.version,
            &lambda.digest[..12.min(lambda.digest.len())],
            time(lambda.created_at)
        );
    }
}

/// `waft lambda versions`: each version, and the tasks that still need it
/// (which keep it from garbage collection).
fn print_versions(versions: &[LambdaVersion], as_json: bool) {
    if as_json {
        let list: Vec<_> = versions
            .iter()
            .map(|v| {
                let mut shown = lambda_json(&v.lambda);
                shown["suspended_tasks"] = json!(v.suspended);
                shown["live_tasks"] = json!(v.live);
                shown
            })
            .collect();
        println!("{}", serde_json::Value::Array(list));
        return;
    }
    for v in versions {
        let lambda = &v.lambda;
        let needed = match (v.suspended, v.live) {
            (0, 0) => String::new(),
            (0, live) => format!("  needed by {live} live tasks"),
            (suspended, live) => {
                format!("  needed by {live} live tasks, {suspended} of them suspended")
            }
        };
        println!(
            "v{:<4} {}  deployed {}{needed}",
            lambda.version,
            &lambda.digest[..12.min(lambda.digest.len())],
            time(lambda.created_at)
        );
    }
}

fn lambda_json(lambda: &Lambda) -> serde_json::Value {
    let config = &lambda.config;
    json!({
        "name": lambda.name,
        "version": lambda.version,
        "digest": lambda.digest,
        "deployed_at": time(lambda.created_at),
        "config": {
            "max_memory": config.limits.max_memory.to_string(),
            "timeout": humantime::format_duration(config.limits.timeout).to_string(),
            "fuel": config.limits.fuel,
            "max_output": config.limits.max_output.to_string(),
            "max_log": config.limits.max_log.to_string(),
            "max_attempts": config.max_attempts,
            "backoff_base": humantime::format_duration(config.backoff.base).to_string(),
            "backoff_factor": config.backoff.factor,
            "backoff_max": humantime::format_duration(config.backoff.max).to_string(),
            "priorities": config.priorities,
            "default_priority": config.default_priority,
            "max_payload": config.max_payload.to_string(),
            "concurrency": config.concurrency,
            "quota_per_sec": config.quota_per_sec,
            "key_concurrency": config.key_concurrency,
            "key_rate": config.key_rate.map(|rate| rate.to_string()),
            "key_fairness": config.key_fairness.as_ref().map(|fairness| json!({
                "weights": fairness.weights,
                "lookahead": fairness.lookahead,
            })),
            "allowed_children": config.allowed_children,
            "allow_outbound": config.grants.outbound.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
            "outbound_limits": {
                "max_requests": config.grants.outbound_limits.max_requests,
                "max_connections": config.grants.outbound_limits.max_connections,
                "max_response": config.grants.outbound_limits.max_response.to_string(),
                "connect_timeout": humantime::format_duration(config.grants.outbound_limits.connect_timeout).to_string(),
                "first_byte_timeout": humantime::format_duration(config.grants.outbound_limits.first_byte_timeout).to_string(),
                "between_bytes_timeout": humantime::format_duration(config.grants.outbound_limits.between_bytes_timeout).to_string(),
            },
            "env": config.grants.env,
            "on_divergence": config.on_divergence.as_str(),
            "retention": config
                .retention
                .iter()
                .map(|(end, keep)| (end.as_str().to_owned(), keep.to_string().into()))
                .collect::<serde_json::Map<String, serde_json::Value>>(),
        },
    })
}
