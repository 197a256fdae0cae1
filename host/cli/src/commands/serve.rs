//! `waft dev` and `waft serve ROLE`: run the platform.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use waft_node::{Config, DevOptions, Node, Role};
use waft_telemetry::Telemetry;

use crate::exit::Failure;

/// Arguments of `waft dev`.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// Where the SQLite store and the compiled-component cache live.
    #[arg(long, env = "WAFT_DATA_DIR", default_value = ".waft")]
    pub data_dir: PathBuf,
    /// Where the gRPC server listens (overrides the file's `listen`).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// A configuration file (TOML); see docs/configuration.md.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Arguments of `waft serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The role this process plays.
    pub role: RoleArg,
    /// A configuration file (TOML); `WAFT_*` variables override it.
    #[arg(long, value_name = "FILE", env = "WAFT_CONFIG")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    Frontend,
    Consumer,
    Controller,
    Executor,
    Hsc,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Self {
        match role {
            RoleArg::Frontend => Role::Frontend,
            RoleArg::Consumer => Role::Consumer,
            RoleArg::Controller => Role::Controller,
            RoleArg::Executor => Role::Executor,
            RoleArg::Hsc => Role::Hsc,
        }
    }
}

fn load_config(file: Option<&PathBuf>) -> Result<Config, Failure> {
    let text = file
        .map(|path| {
            std::fs::read_to_string(path)
                .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))
        })
        .transpose()?;
    Config::load(text.as_deref(), std::env::vars()).map_err(|e| Failure::usage(e.to_string()))
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::internal(format!("cannot start the async runtime: {e}")))
}

/// Runs `waft dev` until Ctrl-C or SIGTERM.
pub fn dev(args: DevArgs) -> Result<ExitCode, Failure> {
    let config = crate::logging::while_starting(|| {
        let mut config = load_config(args.config.as_ref())?;
        if let Some(listen) = args.listen {
            config.listen = listen;
        }
        config
            .validate(None)
            .map_err(|e| Failure::usage(e.to_string()))?;
        Ok::<_, Failure>(config)
    })?;
    let auth = config.auth.enabled;
    let tls = config.tls.cert.is_some();
    runtime()?.block_on(async move {
        let telemetry = start_telemetry(&config)?;
        let node = waft_node::start_dev(DevOptions {
            data_dir: args.data_dir.clone(),
            config,
        })
        .await
        .map_err(|e| Failure::internal(e.to_string()))?;
        println!(
            "waft dev: listening on {} (Frontend, Controller and HSC); tasks in {} (SQLite), \
             in-process queues. Ctrl-C stops.",
            node.addr,
            args.data_dir.join("waft.db").display()
        );
        println!("dashboard at {}", dashboard_url(&node, tls));
        announce_metrics(&node);
        if !auth {
            println!(
                "auth is off: anyone who can reach {} may do anything (set auth.enabled and \
                 auth.cluster_token to require tokens)",
                node.addr
            );
        }
        run_until_signal(node, telemetry).await
    })
}

/// Runs `waft serve ROLE` until Ctrl-C or SIGTERM.
pub fn serve(args: ServeArgs) -> Result<ExitCode, Failure> {
    let role = Role::from(args.role);
    let config = crate::logging::while_starting(|| {
        let config = load_config(args.config.as_ref())?;
        config
            .validate(Some(role))
            .map_err(|e| Failure::usage(e.to_string()))?;
        Ok::<_, Failure>(config)
    })?;
    let tls = config.tls.cert.is_some();
    runtime()?.block_on(async move {
        let telemetry = start_telemetry(&config)?;
        let node = waft_node::start_role(role, config)
            .await
            .map_err(|e| Failure::internal(e.to_string()))?;
        println!("waft serve {}: listening on {}", role.as_str(), node.addr);
        if role == Role::Frontend {
            println!("dashboard at {}", dashboard_url(&node, tls));
        }
        announce_metrics(&node);
        run_until_signal(node, telemetry).await
    })
}

/// Starts the export of traces when `[otel]` names a collector, and
/// installs the process's logging either way; within the runtime, which
/// the exporter's connection lives on.
fn start_telemetry(config: &Config) -> Result<Option<Telemetry>, Failure> {
    let telemetry = Telemetry::start(&config.otel).map_err(|e| Failure::usage(e.to_string()))?;
    crate::logging::init(telemetry.as_ref());
    if let (Some(_), Some(endpoint)) = (&telemetry, &config.otel.endpoint) {
        println!("traces to {endpoint} (OTLP)");
    }
    Ok(telemetry)
}

/// Where the Frontend serves the dashboard: its own address, over HTTPS
/// when it serves TLS.
fn dashboard_url(node: &Node, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{}/", node.addr)
}

fn announce_metrics(node: &Node) {
    if let Some(addr) = node.metrics_addr {
        println!("metrics at http://{addr}/metrics");
    }
}

async fn run_until_signal(node: Node, telemetry: Option<Telemetry>) -> Result<ExitCode, Failure> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Failure::internal(format!("cannot watch for SIGTERM: {e}")))?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    eprintln!("stopping…");
    node.shutdown().await;
    // The last spans leave before the runtime their exporter uses ends.
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }
    Ok(ExitCode::SUCCESS)
}
