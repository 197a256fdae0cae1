//! What a lambda is granted beyond computing on its payload: outbound HTTP
//! to the destinations of an allow-list, and configuration variables.
//!
//! Deny by default: [`Grants::default`] grants nothing. Grants are kept
//! with each version of a lambda, so a deploy changes them and a rollback
//! restores them.
//!
//! # Allow-list patterns (see [`OutboundPattern`])
//!
//! `SCHEME://HOST[:PORT]`, one destination each:
//!
//! | part | forms |
//! |---|---|
//! | scheme | `http`, `https`, or `*` (either) |
//! | host | a name (`api.example.com`); `*.example.com` (its subdomains, not itself); an address (`10.0.0.7`, `[fd00::7]`) or a network (`10.0.0.0/8`, `[fd00::/8]`) |
//! | port | a number; `*` (any); absent: the scheme's own (80, 443) |
//!
//! `*://*:*` allows every destination and must be written out whole: a
//! wildcard that covers every host anywhere else (`https://*`, `*.com`) is
//! refused, so nobody grants the internet without saying so.
//!
//! Names are resolved by Waft, and an address that is not global (loopback,
//! private, link-local — the cloud metadata address 169.254.169.254 — or
//! unspecified) is reached only when a pattern names that address or its
//! network: a name on the list cannot be pointed at the inside.
//!
//! # Stored grants are read leniently
//!
//! The store keeps a version's grants as JSON, and during a rolling upgrade
//! (or after a rollback) a binary may read grants that a newer release
//! wrote. So reading ignores fields it does not know and gives the fields
//! it misses their defaults: an older executor runs the version with the
//! grants it understands, which can only be fewer than the newer one's (a
//! field Waft adds here grants more, never less, when present, so ignoring
//! it denies). Clients never send this JSON: they send typed fields
//! (gRPC, CLI flags), checked by [`Grants::validate`]. See docs/upgrades.md.

mod pattern;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ByteSize;

pub use pattern::{OutboundPattern, is_global, is_host_name, parse_address};

/// What a lambda's executions may reach; nothing by default.
///
/// Deserialized leniently (unknown fields ignored, missing ones default):
/// see the module's docs on stored grants.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Grants {
    /// Destinations of outbound HTTP requests; none by default.
    pub outbound: Vec<OutboundPattern>,
    /// Bounds of outbound HTTP, per execution.
    pub outbound_limits: OutboundLimits,
    /// Configuration variables, read by the guest through `wasi:config`.
    pub env: BTreeMap<String, String>,
}

/// Bounds of one execution's outbound HTTP. Every timeout is also cut to
/// what is left of the task's own. Deserialized leniently, as [`Grants`]
/// is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OutboundLimits {
    /// Requests an execution may send, redirects followed included
    /// (default 64).
    pub max_requests: u32,
    /// Requests open at once (default 8).
    pub max_connections: u32,
    /// Bytes of one response body (default 16 MiB).
    #[serde(with = "as_bytes")]
    pub max_response: ByteSize,
    /// To connect, TLS included (default 10 s).
    #[serde(with = "as_millis")]
    pub connect_timeout: Duration,
    /// From the request sent to the response's first byte (default 30 s).
    #[serde(with = "as_millis")]
    pub first_byte_timeout: Duration,
    /// Between two chunks of a response body (default 30 s).
    #[serde(with = "as_millis")]
    pub between_bytes_timeout: Duration,
}

impl Default for OutboundLimits {
    fn default() -> Self {
        Self {
            max_requests: 64,
            max_connections: 8,
            max_response: ByteSize::mib(16),
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(30),
            between_bytes_timeout: Duration::from_secs(30),
        }
    }
}

/// A grant out of bounds, or a pattern that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("outbound pattern {pattern:?}: {reason}")]
    Pattern { pattern: String, reason: String },
    #[error("{0}")]
    Invalid(String),
}

impl Grants {
    /// The most allow-list patterns a lambda may have.
    pub const MAX_OUTBOUND: usize = 64;
    /// The most configuration variables a lambda may have.
    pub const MAX_ENV: usize = 128;
    /// The largest value of one variable (and of one secret).
    pub const MAX_VALUE: usize = 64 * 1024;

    /// Checks every grant against its bounds.
    pub fn validate(&self) -> Result<(), GrantError> {
        if self.outbound.len() > Self::MAX_OUTBOUND {
            return Err(GrantError::Invalid(format!(
                "{} outbound patterns; a lambda may have at most {}",
                self.outbound.len(),
                Self::MAX_OUTBOUND
            )));
        }
        let limits = &self.outbound_limits;
        if !(1..=10_000).contains(&limits.max_requests) {
            return Err(GrantError::Invalid(
                "outbound max_requests must be within 1..=10000".into(),
            ));
        }
        if !(1..=1_000).contains(&limits.max_connections) {
            return Err(GrantError::Invalid(
                "outbound max_connections must be within 1..=1000".into(),
            ));
        }
        if limits.max_response > ByteSize::gib(1) {
            return Err(GrantError::Invalid(
                "outbound max_response must be at most 1GiB".into(),
            ));
        }
        for (name, timeout) in [
            ("connect_timeout", limits.connect_timeout),
            ("first_byte_timeout", limits.first_byte_timeout),
            ("between_bytes_timeout", limits.between_bytes_timeout),
        ] {
            if timeout < Duration::from_millis(1) || timeout > Duration::from_secs(3600) {
                return Err(GrantError::Invalid(format!(
                    "outbound {name} must be within 1ms..=1h"
                )));
            }
        }
        if self.env.len() > Self::MAX_ENV {
            return Err(GrantError::Invalid(format!(
                "{} variables; a lambda may have at most {}",
                self.env.len(),
                Self::MAX_ENV
            )));
        }
        for (key, value) in &self.env {
            check_key(key)?;
            if value.len() > Self::MAX_VALUE {
                return Err(GrantError::Invalid(format!(
                    "variable {key} is {} bytes; at most {} are allowed",
                    value.len(),
                    Self::MAX_VALUE
                )));
            }
        }
        Ok(())
    }

    /// The patterns that allow a request to `scheme://host:port` (`host`
    /// lowercase, an address in its usual text form), first match first.
    pub fn outbound_matches<'a>(
        &'a self,
        scheme: &'a str,
        host: &'a str,
        port: u16,
    ) -> impl Iterator<Item = &'a OutboundPattern> + 'a {
        self.outbound
            .iter()
            .filter(move |pattern| pattern.matches(scheme, host, port))
    }
}

/// Checks the name of a variable or secret: 1 to 128 characters from
/// `A-Z`, `a-z`, `0-9`, `_`, `-` and `.`.
pub fn check_key(key: &str) -> Result<(), GrantError> {
    let fine = !key.is_empty()
        && key.len() <= 128
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if fine {
        Ok(())
    } else {
        Err(GrantError::Invalid(format!(
            "{key:?} is not a variable name: 1 to 128 characters from A-Z, a-z, 0-9, '_', '-' and '.'"
        )))
    }
}

mod as_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(deserializer)?))
    }
}

mod as_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::ByteSize;

    pub fn serialize<S: Serializer>(value: &ByteSize, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(value.bytes())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ByteSize, D::Error> {
        Ok(ByteSize::b(u64::deserialize(deserializer)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Grants a newer release wrote, with a field this one does not know
    /// at each level, read as the grants this release knows of them.
    #[test]
    fn grants_from_a_newer_release_are_read_without_their_new_fields() {
        let newer = r#"{
            "outbound": ["https://api.example.com"],
            "outbound_limits": {"max_requests": 3, "max_retries_per_request": 2},
            "env": {"REGION": "eu"},
            "udp": ["10.0.0.7:53"]
        }"#;
        let read: Grants = serde_json::from_str(newer).unwrap();
        assert_eq!(
            read,
            Grants {
                outbound: vec!["https://api.example.com".parse().unwrap()],
                outbound_limits: OutboundLimits {
                    max_requests: 3,
                    ..OutboundLimits::default()
                },
                env: BTreeMap::from([("REGION".into(), "eu".into())]),
            }
        );
        read.validate().unwrap();
        // What an older release wrote lacks the fields added since: defaults.
        let older: Grants = serde_json::from_str(r#"{"outbound": []}"#).unwrap();
        assert_eq!(older, Grants::default());
        // A known field of the wrong type is still an error, not a default.
        assert!(serde_json::from_str::<Grants>(r#"{"outbound": 7}"#).is_err());
    }

    #[test]
    fn grants_round_trip_and_are_bounded() {
        let grants = Grants {
            outbound: vec!["https://api.example.com".parse().unwrap()],
            outbound_limits: OutboundLimits {
                max_requests: 3,
                ..OutboundLimits::default()
            },
            env: BTreeMap::from([("REGION".into(), "eu".into())]),
        };
        grants.validate().unwrap();
        let json = serde_json::to_string(&grants).unwrap();
        assert_eq!(serde_json::from_str::<Grants>(&json).unwrap(), grants);
        assert_eq!(
            serde_json::from_str::<Grants>("{}").unwrap(),
            Grants::default()
        );
        let bad_key = Grants {
            env: BTreeMap::from([("A B".into(), String::new())]),
            ..Grants::default()
        };
        assert!(bad_key.validate().unwrap_err().to_string().contains("A B"));
        assert_eq!(
            OutboundPattern::suggest("https", "api.example.com", 443),
            "https://api.example.com"
        );
        assert_eq!(
            OutboundPattern::suggest("http", "::1", 8080),
            "http://[::1]:8080"
        );
    }
}
