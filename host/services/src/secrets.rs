//! Secrets at rest: sealed with the installation's key before they reach
//! the store, opened only by an executor about to run the lambda.
//!
//! AES-256-GCM with a fresh random nonce per value; the lambda's and the
//! secret's names are authenticated with it, so a sealed value copied to
//! another row does not open. The Frontend seals what `waft secret set`
//! sends; the store and every RPC after it carry only sealed bytes; an
//! executor opens them into the lambda's `wasi:config` values, and hands
//! the runtime the clear values to redact from logs, errors and outputs.

use std::fmt;
use std::path::Path;

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use waft_runtime::ArtifactKey;

/// The installation's secrets key: 32 random bytes, kept as 64 hex digits
/// in a file only the Waft processes may read.
pub struct SecretKey {
    key: LessSafeKey,
    /// Seals compiled components: derived from the same bytes, never the
    /// same key.
    artifacts: ArtifactKey,
}

/// Why a key could not be had, or a value not opened.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secrets key {path}: {reason}")]
    Key { path: String, reason: String },
    #[error(
        "a sealed secret did not open: the key is not the one it was sealed with, or the bytes were altered"
    )]
    Unsealed,
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

impl SecretKey {
    /// Reads the key in `path` (64 hex digits).
    pub fn read(path: &Path) -> Result<Self, SecretError> {
        let failed = |reason: String| SecretError::Key {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
        let bytes = hex::decode(text.trim())
            .map_err(|_| failed("must hold 64 hex digits (32 bytes)".into()))?;
        Self::from_bytes(&bytes).ok_or_else(|| failed("must hold 64 hex digits (32 bytes)".into()))
    }

    /// Reads the key in `path`, first writing a new random one there (mode
    /// 0600) if there is none: how `waft dev` gets its key.
    pub fn read_or_create(path: &Path) -> Result<Self, SecretError> {
        if !path.exists() {
            let mut bytes = [0u8; 32];
            SystemRandom::new()
                .fill(&mut bytes)
                .map_err(|_| SecretError::Key {
                    path: path.display().to_string(),
                    reason: "no randomness to make a key".into(),
                })?;
            write_private(path, hex::encode(bytes).as_bytes()).map_err(|e| SecretError::Key {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        }
        Self::read(path)
    }

    fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let key = UnboundKey::new(&AES_256_GCM, bytes).ok()?;
        Some(Self {
            key: LessSafeKey::new(key),
            artifacts: ArtifactKey::new(bytes),
        })
    }

    /// The key that seals this installation's compiled components.
    pub fn artifact_key(&self) -> &ArtifactKey {
        &self.artifacts
    }

    /// Seals `value`, bound to `lambda` and `name`: the nonce, then the
    /// ciphertext and its tag.
    pub fn seal(&self, lambda: &str, name: &str, value: &str) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        // The system's randomness does not fail on Linux once booted.
        SystemRandom::new()
            .fill(&mut nonce)
            .expect("the system's randomness");
        let mut sealed = value.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(binding(lambda, name)),
                &mut sealed,
            )
            .expect("a value within AES-GCM's bounds");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        out
    }

    /// Opens what [`seal`](Self::seal) made for `lambda` and `name`.
    pub fn open(&self, lambda: &str, name: &str, sealed: &[u8]) -> Result<String, SecretError> {
        if sealed.len() < NONCE_LEN {
            return Err(SecretError::Unsealed);
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SecretError::Unsealed)?;
        let mut rest = rest.to_vec();
        let clear = self
            .key
            .open_in_place(nonce, Aad::from(binding(lambda, name)), &mut rest)
            .map_err(|_| SecretError::Unsealed)?;
        String::from_utf8(clear.to_vec()).map_err(|_| SecretError::Unsealed)
    }
}

/// The associated data of a sealed value: whose secret it is.
fn binding(lambda: &str, name: &str) -> Vec<u8> {
    format!("waft-secret\0{lambda}\0{name}").into_bytes()
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_as_what_they_were_sealed_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.key");
        let key = SecretKey::read_or_create(&path).unwrap();
        let again = SecretKey::read_or_create(&path).unwrap();
        let sealed = key.seal("mail", "TOKEN", "s3cret\0é");
        assert!(!sealed.windows(6).any(|w| w == b"s3cret"));
        assert_eq!(again.open("mail", "TOKEN", &sealed).unwrap(), "s3cret\0é");
        // Another row, another lambda, altered bytes, another key: refused.
        assert!(key.open("mail", "OTHER", &sealed).is_err());
        assert!(key.open("billing", "TOKEN", &sealed).is_err());
        let mut altered = sealed.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert!(key.open("mail", "TOKEN", &altered).is_err());
        let other = SecretKey::read_or_create(&dir.path().join("other.key")).unwrap();
        assert!(other.open("mail", "TOKEN", &sealed).is_err());
        // Two seals of one value differ (fresh nonces).
        assert_ne!(
            key.seal("mail", "TOKEN", "x"),
            key.seal("mail", "TOKEN", "x")
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(dir.path().join("bad.key"), "not hex").unwrap();
        let error = SecretKey::read(&dir.path().join("bad.key")).unwrap_err();
        assert!(error.to_string().contains("64 hex digits"), "{error}");
    }
}
