//! Who may do what, and what lambdas may read: API tokens and secrets
//! (their names, never their values, outside the store).

use super::Millis;

/// A secret as anyone may see it: its name, never its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretInfo {
    pub name: String,
    pub updated_at: Millis,
}

/// A lambda's secrets as the store keeps them: sealed with the
/// installation's key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SealedSecrets {
    /// Changes with every set or removal.
    pub version: i64,
    /// Each secret's name and sealed value.
    pub secrets: Vec<(String, Vec<u8>)>,
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRole {
    /// Everything, tokens included.
    Admin,
    /// Everything about its lambdas: deploy, schedule, read, cancel, gate,
    /// redrive, periodic schedules.
    Owner,
    /// Schedules tasks of its lambdas and reads them.
    Scheduler,
}

impl TokenRole {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenRole::Admin => "admin",
            TokenRole::Owner => "owner",
            TokenRole::Scheduler => "scheduler",
        }
    }
}

impl std::str::FromStr for TokenRole {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "admin" => Ok(TokenRole::Admin),
            "owner" => Ok(TokenRole::Owner),
            "scheduler" => Ok(TokenRole::Scheduler),
            other => Err(format!(
                "unknown role {other:?}: use admin, owner or scheduler"
            )),
        }
    }
}

/// An API token, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub id: String,
    pub name: String,
    pub role: TokenRole,
    /// The lambdas an owner or scheduler token is limited to.
    pub lambdas: Vec<String>,
    pub created_at: Millis,
    pub revoked_at: Option<Millis>,
}

/// A token to store with the hash of its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenCreate {
    pub token: Token,
    /// SHA-256 of the secret, hex.
    pub hash: String,
}

/// A secret to store, sealed by the Frontend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSet {
    pub lambda: String,
    pub name: String,
    pub sealed: Vec<u8>,
    pub now: Millis,
}
