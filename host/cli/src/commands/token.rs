//! `waft token …`: API tokens (admin only).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;
use waft_services::AdminApi;
use waft_store::{Token, TokenRole};

use crate::commands::client::{ClientArgs, block_on, time};
use crate::exit::Failure;

/// Arguments of `waft token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print its secret, which is shown this once.
    Create {
        /// What the token is for (a team, a service).
        name: String,
        /// admin (everything), owner (everything about its lambdas) or
        /// scheduler (schedule and read tasks of its lambdas).
        #[arg(long, value_parser = parse_role)]
        role: TokenRole,
        /// A lambda an owner or scheduler token acts on; repeat for more.
        #[arg(long = "lambda", value_name = "LAMBDA")]
        lambdas: Vec<String>,
    },
    /// Every token, without secrets.
    List,
    /// Revoke a token: calls with it fail from now on.
    Revoke { id: String },
}

fn parse_role(text: &str) -> Result<TokenRole, String> {
    text.parse()
}

/// Runs `waft token …`.
pub fn run(args: TokenArgs) -> Result<ExitCode, Failure> {
    let client = args.client;
    block_on(async move {
        let frontend = client.frontend()?;
        match args.command {
            TokenCommand::Create {
                name,
                role,
                lambdas,
            } => {
                let (token, secret) = frontend
                    .token_create(&name, role, lambdas)
                    .await
                    .map_err(|e| client.failure(e))?;
                if client.json {
                    let mut shown = token_json(&token);
                    shown["secret"] = json!(secret);
                    println!("{shown}");
                } else {
                    println!("{secret}");
                    eprintln!(
                        "token {} ({}) created; the secret above is shown only now",
                        token.id,
                        token.role.as_str()
                    );
                }
            }
            TokenCommand::List => {
                let tokens = frontend.token_list().await.map_err(|e| client.failure(e))?;
                if client.json {
                    let all: Vec<_> = tokens.iter().map(token_json).collect();
                    println!("{}", serde_json::Value::Array(all));
                } else {
                    for t in tokens {
                        println!(
                            "{}  {:<9} {:<24} {}{}",
                            t.id,
                            t.role.as_str(),
                            t.name,
                            t.lambdas.join(","),
                            t.revoked_at
                                .map(|at| format!("  (revoked {})", time(at)))
                                .unwrap_or_default()
                        );
                    }
                }
            }
            TokenCommand::Revoke { id } => {
                frontend
                    .token_revoke(&id)
                    .await
                    .map_err(|e| client.failure(e))?;
                if client.json {
                    println!("{}", json!({ "revoked": id }));
                } else {
                    println!("{id} revoked");
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn token_json(t: &Token) -> serde_json::Value {
    json!({
        "id": t.id,
        "name": t.name,
        "role": t.role.as_str(),
        "lambdas": t.lambdas,
        "created_at": time(t.created_at),
        "revoked_at": t.revoked_at.map(time),
    })
}
