//! `waft secret …`: a lambda's secrets, which it reads through
//! `wasi:config`. A value is read from stdin or a file — never from the
//! command line, where shells and process lists keep it — and is never
//! shown again.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;
use waft_services::AdminApi;

use crate::commands::client::{ClientArgs, block_on, time};
use crate::exit::Failure;

/// Arguments of `waft secret`.
#[derive(Debug, Args)]
pub struct SecretArgs {
    #[command(subcommand)]
    pub command: SecretCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Set (or rotate) a secret: its value from stdin, or from --file. The
    /// lambda's next task sees it; no redeploy.
    Set {
        lambda: String,
        /// The name the lambda reads it by (A-Z, a-z, 0-9, '_', '-', '.').
        name: String,
        /// Read the value from this file instead of stdin.
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// A lambda's secrets by name; values are never shown.
    List { lambda: String },
    /// Remove a secret; the lambda's next task no longer sees it.
    Remove { lambda: String, name: String },
}

/// Runs `waft secret …`.
pub fn run(args: SecretArgs) -> Result<ExitCode, Failure> {
    let client = args.client;
    // Read before connecting: a value piped in is not left waiting.
    let value = match &args.command {
        SecretCommand::Set { file, .. } => Some(read_value(file.as_ref())?),
        _ => None,
    };
    block_on(async move {
        let frontend = client.frontend()?;
        match args.command {
            SecretCommand::Set { lambda, name, .. } => {
                let value = value.unwrap_or_default();
                frontend
                    .secret_set(&lambda, &name, &value)
                    .await
                    .map_err(|e| client.failure(e))?;
                if client.json {
                    println!("{}", json!({ "lambda": lambda, "name": name }));
                } else {
                    println!("secret {name} of {lambda} set");
                }
            }
            SecretCommand::List { lambda } => {
                let secrets = frontend
                    .secret_list(&lambda)
                    .await
                    .map_err(|e| client.failure(e))?;
                if client.json {
                    let all: Vec<_> = secrets
                        .iter()
                        .map(|s| json!({ "name": s.name, "updated_at": time(s.updated_at) }))
                        .collect();
                    println!("{}", serde_json::Value::Array(all));
                } else {
                    for secret in secrets {
                        println!("{:<32} set {}", secret.name, time(secret.updated_at));
                    }
                }
            }
            SecretCommand::Remove { lambda, name } => {
                frontend
                    .secret_remove(&lambda, &name)
                    .await
                    .map_err(|e| client.failure(e))?;
                if client.json {
                    println!("{}", json!({ "removed": name, "lambda": lambda }));
                } else {
                    println!("secret {name} of {lambda} removed");
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The value, without the one line break a shell or editor ends it with.
fn read_value(file: Option<&PathBuf>) -> Result<String, Failure> {
    let mut bytes = Vec::new();
    match file {
        Some(path) => {
            bytes = std::fs::read(path)
                .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
        }
        None => {
            std::io::stdin()
                .read_to_end(&mut bytes)
                .map_err(|e| Failure::usage(format!("cannot read the value from stdin: {e}")))?;
        }
    }
    let mut value = String::from_utf8(bytes)
        .map_err(|_| Failure::usage("a secret's value must be UTF-8 text"))?;
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    if value.is_empty() {
        return Err(Failure::usage(
            "the secret's value is empty: pipe it in (… | waft secret set LAMBDA NAME) or use --file",
        ));
    }
    Ok(value)
}
